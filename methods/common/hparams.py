"""One declaration per hyperparameter.

A method's hyperparameters are one frozen dataclass that subclasses
:class:`Hyperparameters`; every field is declared once, with :func:`field`::

  @dataclasses.dataclass(frozen=True)
  class FitConfig(hparams.Hyperparameters):
    steps: int = hparams.field(300, "Adam steps per restart.", low=1)
    evidence: str = hparams.field("laplace", "Evidence kind.", choices=EVIDENCE_KINDS)
    jitter: float = hparams.field(0.5, "Sd of the restarts' perturbations.", low=0)

    def checks(self):  # cross-field checks, once, here
      if self.evidence == "heldout" and self.num_val < 1:
        yield "num_val", "heldout evidence needs num_val >= 1"

Constructing an instance validates it (:class:`HparamError` names every bad
field). The launcher derives the rest from the same declaration: the config
section (:func:`to_config`), the config schema's type, range and choice
checks (:func:`constraints`), and the instance (:func:`from_config`); cross-
field problems are reported with the config key's full path. A field's config
key is its name, or the ``key`` it declares (a dotted path, e.g.
``"reg.alpha"``, for configs whose layout predates the dataclass); fields
declared with ``config=False`` are set by the experiment (e.g. per
algorithm), not by the user.

Floats must be finite in float32 (and ints fit in int32) unless declared
``finite=False``; a range is checked on the value and on its float32 rounding.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import struct
import typing
from typing import Any, Iterable, Iterator, Optional, Sequence

_META = "hparam"


# ----------------------------------------------------------------------------
# Value constraints (shared with the launcher's config schema).


class Constraint:
  """A check of one value; returns an error message or ``None``."""

  def check(self, value: Any) -> Optional[str]:
    raise NotImplementedError

  def describe(self) -> str:
    return ""


def _is_float(value: Any) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral))


FLOAT32_MAX = 3.4028234663852886e38
INT32_MAX = 2**31 - 1


def as_float32(value: float) -> float:
  """``value`` rounded to float32, the dtype hyperparameters are computed in (``inf`` past its range)."""
  if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
    return math.copysign(math.inf, value) if not math.isnan(value) else value
  return struct.unpack("f", struct.pack("f", value))[0]


@dataclasses.dataclass(frozen=True)
class Finite(Constraint):
  """A float is finite in float32 (NaN, +-inf and |x| > 3.4e38 refused); an int fits in int32."""

  def check(self, value):
    if _is_float(value):
      if not math.isfinite(value):
        return f"{value!r} is not a finite number"
      if abs(value) > FLOAT32_MAX:
        return f"{value!r} overflows float32 (|x| <= 3.4e38), the dtype it is computed in"
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool) and abs(value) > INT32_MAX:
      return f"{value!r} overflows int32 (|n| <= {INT32_MAX}), the dtype it is computed in"
    return None


@dataclasses.dataclass(frozen=True)
class OneOf(Constraint):
  values: tuple

  def check(self, value):
    if value not in self.values:
      return f"{value!r} is not allowed; allowed values: {list(self.values)}"
    return None

  def describe(self) -> str:
    return f"one of {list(self.values)}"


@dataclasses.dataclass(frozen=True)
class Range(Constraint):
  """``lo <= value <= hi`` (``lo < value`` with ``lo_open``, etc.); NaN is refused."""

  lo: Optional[float] = None
  hi: Optional[float] = None
  lo_open: bool = False
  hi_open: bool = False

  def describe(self) -> str:
    lo = "-inf" if self.lo is None else self.lo
    hi = "inf" if self.hi is None else self.hi
    return f"{'(' if self.lo_open or self.lo is None else '['}{lo}, {hi}{')' if self.hi_open or self.hi is None else ']'}"

  def check(self, value):
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
      return f"{value!r} is not a number; allowed: {self.describe()}"
    if _is_float(value) and math.isnan(value):
      return f"{value!r} is not a number; allowed: {self.describe()}"
    for v in (value, as_float32(value)) if _is_float(value) else (value,):
      bad_lo = self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo)
      bad_hi = self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi)
      if bad_lo or bad_hi:
        cast = "" if v == value else f" (it is {v!r} in float32, the dtype it is computed in)"
        return f"{value!r} is out of range{cast}; allowed: {self.describe()}"
    return None


def positive() -> Range:
  return Range(lo=0, lo_open=True)


def probability(*, lo_open: bool = False, hi_open: bool = False) -> Range:
  return Range(lo=0, hi=1, lo_open=lo_open, hi_open=hi_open)


@dataclasses.dataclass(frozen=True)
class Each(Constraint):
  """Applies ``inner`` to every element of a sequence."""

  inner: Constraint
  nonempty: bool = False

  def check(self, value):
    if self.nonempty and not value:
      return "must not be empty"
    for i, v in enumerate(value):
      msg = self.inner.check(v)
      if msg:
        return f"element {i}: {msg}"
    return None

  def describe(self) -> str:
    inner = self.inner.describe()
    return f"each {inner}" if inner else ""


@dataclasses.dataclass(frozen=True)
class Unique(Constraint):
  def check(self, value):
    dup = sorted({v for v in value if list(value).count(v) > 1})
    return f"duplicate entries {dup}" if dup else None


@dataclasses.dataclass(frozen=True)
class All(Constraint):
  """Every one of ``parts`` (the first message wins)."""

  parts: tuple[Constraint, ...]

  def check(self, value):
    for part in self.parts:
      msg = part.check(value)
      if msg:
        return msg
    return None

  def describe(self) -> str:
    return "; ".join(d for d in (p.describe() for p in self.parts) if d)


# ----------------------------------------------------------------------------
# Declarations.


@dataclasses.dataclass(frozen=True)
class Meta:
  """What :func:`field` records about a hyperparameter."""

  doc: str
  constraint: Optional[Constraint]
  key: Optional[str]
  config: bool


def field(
    default: Any,
    doc: str,
    *,
    low: Optional[float] = None,
    high: Optional[float] = None,
    low_open: bool = False,
    high_open: bool = False,
    choices: Optional[Sequence[Any]] = None,
    nonempty: bool = False,
    unique: bool = False,
    finite: bool = True,
    key: Optional[str] = None,
    config: bool = True,
) -> Any:
  """Declares one hyperparameter of a :class:`Hyperparameters` dataclass.

  Args:
    default: the default value (a tuple for sequence fields).
    doc: one line: what it is, with its unit or the paper's symbol.
    low: the smallest allowed value (of every element of a sequence field).
    high: the largest allowed value (of every element of a sequence field).
    low_open: ``low`` itself is not allowed.
    high_open: ``high`` itself is not allowed.
    choices: the allowed values (of every element of a sequence field).
    nonempty: a sequence field must have at least one element.
    unique: a sequence field must not repeat an element.
    finite: floats must be finite (the default); ``False`` allows +-inf.
    key: the dotted config key, relative to the section (default: the name).
    config: ``False`` for a field the experiment sets (not a config key).

  Returns:
    A ``dataclasses.field`` carrying the declaration in its metadata.
  """
  parts: list[Constraint] = []
  if finite:
    parts.append(Finite())
  if low is not None or high is not None:
    parts.append(Range(lo=low, hi=high, lo_open=low_open, hi_open=high_open))
  if choices is not None:
    parts.append(OneOf(tuple(choices)))
  element = All(tuple(parts)) if parts else None
  if isinstance(default, (tuple, list)):
    outer: list[Constraint] = [Each(element or All(()), nonempty=nonempty)]
    if unique:
      outer.append(Unique())
    constraint: Optional[Constraint] = All(tuple(outer))
  else:
    constraint = element
  meta = Meta(doc=doc, constraint=constraint, key=key, config=config)
  if isinstance(default, list):
    default = tuple(default)
  return dataclasses.field(default=default, metadata={_META: meta})


class HparamError(ValueError):
  """Invalid hyperparameters; ``problems`` holds ``(field, message)`` pairs."""

  def __init__(self, owner: str, problems: Sequence[tuple[str, str]]):
    self.owner = owner
    self.problems = list(problems)
    super().__init__(
        f"invalid {owner}: " + "; ".join(f"{name}: {msg}" for name, msg in self.problems)
    )


class Hyperparameters:
  """Base of a frozen hyperparameter dataclass: validates on construction.

  Subclasses declare fields with :func:`field` and put cross-field checks in
  :meth:`checks` (yielding ``(field_name, message)``).
  """

  def __post_init__(self):
    problems = list(field_problems(self))
    if not problems:
      problems = list(self.checks())
    if problems:
      raise HparamError(type(self).__name__, problems)

  def checks(self) -> Iterable[tuple[str, str]]:
    """Cross-field checks: ``(field_name, message)`` for each problem."""
    return ()


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
  return typing.get_type_hints(cls)


def declared(cls_or_obj: Any) -> Iterator[tuple[dataclasses.Field, Meta]]:
  """``(field, meta)`` of every field declared with :func:`field`."""
  for f in dataclasses.fields(cls_or_obj):
    meta = f.metadata.get(_META)
    if meta is not None:
      yield f, meta


def _type_problem(value: Any, hint: Any) -> Optional[str]:
  origin = typing.get_origin(hint)
  if origin is tuple:
    if not isinstance(value, tuple):
      return f"{value!r} is not a tuple"
    args = typing.get_args(hint)
    inner = args[0] if args else Any
    for i, v in enumerate(value):
      msg = _type_problem(v, inner)
      if msg:
        return f"element {i}: {msg}"
    return None
  if hint is bool:
    ok = isinstance(value, (bool,)) or type(value).__name__ == "bool_"
  elif hint is int:
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
  elif hint is float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
  elif hint is str:
    ok = isinstance(value, str)
  else:
    return None
  return None if ok else f"{value!r} has type {type(value).__name__}; expected {hint.__name__}"


def field_problems(obj: Any) -> Iterator[tuple[str, str]]:
  """Type, range and choice problems of each declared field of ``obj``."""
  hints = _hints(type(obj))
  for f, meta in declared(obj):
    value = getattr(obj, f.name)
    msg = _type_problem(value, hints.get(f.name, Any))
    if msg is None and meta.constraint is not None:
      msg = meta.constraint.check(value)
    if msg:
      yield f.name, msg


def config_key(f: dataclasses.Field, meta: Meta) -> str:
  return meta.key or f.name


def to_config(cls: type) -> dict[str, Any]:
  """The config section of ``cls``: ``{key: default}`` nested by dotted keys."""
  out: dict[str, Any] = {}
  for f, meta in declared(cls):
    if not meta.config:
      continue
    *parents, leaf = config_key(f, meta).split(".")
    node = out
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = f.default
  return out


def _get(section: Any, dotted: str) -> Any:
  node = section
  for part in dotted.split("."):
    node = node[part]
  return node


def from_config(cls: type, section: Any, **fixed: Any) -> Any:
  """Builds ``cls`` from a config section (``fixed`` sets ``config=False`` fields)."""
  kwargs = dict(fixed)
  for f, meta in declared(cls):
    if meta.config and f.name not in kwargs:
      value = _get(section, config_key(f, meta))
      kwargs[f.name] = tuple(value) if isinstance(value, list) else value
  return cls(**kwargs)


def constraints(cls: type, prefix: str = "") -> dict[str, Constraint]:
  """``{full config key: constraint}`` of ``cls``'s config fields under ``prefix``."""
  out = {}
  for f, meta in declared(cls):
    if meta.config and meta.constraint is not None:
      out[join(prefix, config_key(f, meta))] = meta.constraint
  return out


def key_of(cls: type, name: str, prefix: str = "") -> str:
  """The full config key of field ``name`` (the field name if it is no config key)."""
  for f, meta in declared(cls):
    if f.name == name and meta.config:
      return join(prefix, config_key(f, meta))
  return join(prefix, name)


def docs(cls: type, prefix: str = "") -> list[tuple[str, Any, str, str]]:
  """``(key, default, allowed, doc)`` rows of ``cls``'s config fields."""
  rows = []
  for f, meta in declared(cls):
    if meta.config:
      allowed = meta.constraint.describe() if meta.constraint is not None else ""
      rows.append((join(prefix, config_key(f, meta)), f.default, allowed, meta.doc))
  return rows


def join(prefix: str, key: str) -> str:
  return f"{prefix}.{key}" if prefix else key
