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

from launch import errors
from methods.common import hparams


class ConfigError(errors.UserError, ValueError):
  """A config that cannot run; the message lists every problem found."""

  exit_code = 2

  def __init__(self, problems: Sequence[str]):
    self.problems = list(problems)
    super().__init__(
        "invalid config:\n" + "\n".join(f"  - {p}" for p in self.problems)
    )


# The value constraints are the ones hyperparameter declarations use.
Constraint = hparams.Constraint
Finite = hparams.Finite
OneOf = hparams.OneOf
Range = hparams.Range
Each = hparams.Each
Unique = hparams.Unique
positive = hparams.positive
probability = hparams.probability


# A cross-field check: config -> list of (key, message).
Check = Callable[[ml_collections.ConfigDict], Iterable[tuple[str, str]]]


@dataclasses.dataclass(frozen=True)
class Section:
  """A config section declared by a hyperparameter dataclass.

  Attributes:
    prefix: the section's key in the config (``""``: the config's root).
    cls: a :class:`methods.common.hparams.Hyperparameters` dataclass; its
      fields' types, ranges and choices become the section's constraints.
    build: ``config -> iterable of instances`` whose construction runs the
      dataclass's cross-field checks (default: ``from_config`` of the
      section); problems are reported with the config key's full path.
  """

  prefix: str
  cls: type
  build: Optional[Callable[[ml_collections.ConfigDict], Iterable[Any]]] = None

  def problems(self, config: ml_collections.ConfigDict) -> list[tuple[str, str]]:
    section = config if not self.prefix else config[self.prefix]
    build = self.build or (lambda _: [hparams.from_config(self.cls, section)])
    try:
      for _ in build(config):
        pass
    except hparams.HparamError as e:
      return [(hparams.key_of(self.cls, name, self.prefix), msg) for name, msg in e.problems]
    return []


@dataclasses.dataclass(frozen=True)
class Schema:
  """What a valid config of one experiment looks like.

  Every float key must be finite unless it is listed in ``infinite_ok``.
  """

  reference: ml_collections.ConfigDict
  constraints: Mapping[str, Constraint] = dataclasses.field(default_factory=dict)
  checks: Sequence[Check] = ()
  sections: Sequence[Section] = ()
  infinite_ok: frozenset = frozenset()

  def all_constraints(self) -> dict[str, Constraint]:
    out: dict[str, Constraint] = {}
    for section in self.sections:
      out.update(hparams.constraints(section.cls, section.prefix))
    out.update(self.constraints)
    return out


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


def _finite_problem(value: Any) -> Optional[str]:
  values = value if isinstance(value, (tuple, list)) else (value,)
  for i, v in enumerate(values):
    msg = Finite().check(v)
    if msg:
      return msg if values is not value else f"element {i}: {msg}"
  return None


def validate(config: ml_collections.ConfigDict, schema: Schema) -> None:
  """Raises :class:`ConfigError` listing every problem of ``config``."""
  got, ref = flatten(config), flatten(schema.reference)
  constraints = schema.all_constraints()
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
    if key not in schema.infinite_ok:
      msg = _finite_problem(value)
      if msg:
        problems.append(f"'{key}': {msg}")
        continue
    constraint = constraints.get(key)
    if constraint is not None:
      msg = constraint.check(value)
      if msg:
        problems.append(f"'{key}': {msg}")
  if not problems:
    for section in schema.sections:
      problems += [f"'{key}': {msg}" for key, msg in section.problems(config)]
  if not problems:
    for check in schema.checks:
      problems += [f"'{key}': {msg}" for key, msg in check(config)]
  if problems:
    raise ConfigError(problems)
