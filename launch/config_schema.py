"""Validation of experiment configs before any compute.

An experiment declares a *reference* config (its ``get_config()`` default),
which fixes the set of keys and their types, plus per-key constraints and
cross-field checks. :func:`validate` collects every problem -- an unknown or
misspelled key (with the closest allowed names), a missing key, a wrong type,
a value outside its allowed set or range -- and raises one
:class:`ConfigError` that names each key and what it allows.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import ml_collections


class ConfigError(ValueError):
  """A config that cannot run; the message lists every problem found."""

  def __init__(self, problems: Sequence[str]):
    self.problems = list(problems)
    super().__init__(
        "invalid config:\n" + "\n".join(f"  - {p}" for p in self.problems)
    )


class Constraint:
  """A check of one value; returns an error message or ``None``."""

  def check(self, value: Any) -> Optional[str]:
    raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class OneOf(Constraint):
  values: tuple

  def check(self, value):
    if value not in self.values:
      return f"{value!r} is not allowed; allowed values: {list(self.values)}"
    return None


@dataclasses.dataclass(frozen=True)
class Range(Constraint):
  """``lo <= value <= hi`` (``lo < value`` with ``lo_open``, etc.)."""

  lo: Optional[float] = None
  hi: Optional[float] = None
  lo_open: bool = False
  hi_open: bool = False

  def describe(self) -> str:
    lo = "-inf" if self.lo is None else self.lo
    hi = "inf" if self.hi is None else self.hi
    return f"{'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"

  def check(self, value):
    bad_lo = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
    bad_hi = self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi)
    if bad_lo or bad_hi:
      return f"{value!r} is out of range; allowed: {self.describe()}"
    return None


def positive() -> Range:
  return Range(lo=0, lo_open=True)


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


@dataclasses.dataclass(frozen=True)
class Unique(Constraint):
  def check(self, value):
    dup = sorted({v for v in value if list(value).count(v) > 1})
    return f"duplicate entries {dup}" if dup else None


# A cross-field check: config -> list of (key, message).
Check = Callable[[ml_collections.ConfigDict], Iterable[tuple[str, str]]]


@dataclasses.dataclass(frozen=True)
class Schema:
  """What a valid config of one experiment looks like."""

  reference: ml_collections.ConfigDict
  constraints: Mapping[str, Constraint] = dataclasses.field(default_factory=dict)
  checks: Sequence[Check] = ()


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
  """``{"a.b": value}`` for every leaf of a (nested) ConfigDict or mapping."""
  out = {}
  items = config.items() if hasattr(config, "items") else []
  for k, v in items:
    key = f"{prefix}{k}"
    if isinstance(v, (ml_collections.ConfigDict, dict)):
      out[key] = _SUBTREE
      out.update(flatten(v, key + "."))
    else:
      out[key] = v
  return out


_SUBTREE = object()


def _type_ok(value: Any, ref: Any) -> bool:
  if ref is None:
    return True
  if isinstance(ref, bool):
    return isinstance(value, bool)
  if isinstance(ref, int):
    return isinstance(value, int) and not isinstance(value, bool)
  if isinstance(ref, float):
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if isinstance(ref, (tuple, list)):
    if not isinstance(value, (tuple, list)):
      return False
    if ref and value:
      return all(_type_ok(v, ref[0]) for v in value)
    return True
  return isinstance(value, type(ref))


def _type_name(ref: Any) -> str:
  if isinstance(ref, (tuple, list)):
    inner = _type_name(ref[0]) if ref else "any"
    return f"sequence of {inner}"
  return type(ref).__name__


def validate(config: ml_collections.ConfigDict, schema: Schema) -> None:
  """Raises :class:`ConfigError` listing every problem of ``config``."""
  got, ref = flatten(config), flatten(schema.reference)
  problems = []
  for key in sorted(set(got) - set(ref)):
    parent = key.rpartition(".")[0]
    siblings = sorted(
        k.rpartition(".")[2] for k in ref if k.rpartition(".")[0] == parent
    )
    close = difflib.get_close_matches(key.rpartition(".")[2], siblings, n=3)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    problems.append(f"unknown key '{key}'{hint} allowed keys here: {siblings}")
  for key in sorted(set(ref) - set(got)):
    problems.append(f"missing key '{key}'")
  for key in sorted(set(got) & set(ref)):
    value, expected = got[key], ref[key]
    if (value is _SUBTREE) != (expected is _SUBTREE):
      problems.append(f"'{key}' must be {'a group of keys' if expected is _SUBTREE else _type_name(expected)}")
      continue
    if value is _SUBTREE:
      continue
    if not _type_ok(value, expected):
      problems.append(
          f"'{key}' = {value!r} has type {type(value).__name__}; expected {_type_name(expected)}"
      )
      continue
    constraint = schema.constraints.get(key)
    if constraint is not None:
      msg = constraint.check(value)
      if msg:
        problems.append(f"'{key}': {msg}")
  if not problems:
    for check in schema.checks:
      problems += [f"'{key}': {msg}" for key, msg in check(config)]
  if problems:
    raise ConfigError(problems)
