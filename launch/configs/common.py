"""Pieces shared by every experiment config: presets, the base keys, one declaration.

Config files follow big_vision: ``get_config(arg)`` returns an
``ml_collections.ConfigDict``; ``arg`` is a comma-separated list of a preset
name and ``key=value`` options, e.g. ``"smoke"`` or ``"cpu,problem=E2"``.
Presets:

* ``smoke``: seconds; used by the tests, the colabs and ``make demo`` smoke runs.
* ``cpu``: minutes on a laptop CPU; the default.
* ``paper``: the paper's full scale, for a GPU/TPU host or cluster.

Each config module declares its keys once, as :data:`SECTIONS` built by
:func:`declare` from hyperparameter dataclasses (:mod:`methods.common.hparams`)::

  SECTIONS = common.declare("foo", ("", Run), ("foo", methods.foo.Hparams))

  def get_config(arg=None):
    opts = common.parse_arg(arg)
    config = SECTIONS.defaults(opts.preset)   # every section's defaults
    if opts.preset == "smoke":
      config.foo.width = 8                    # presets change values only
    return config

The same declaration gives the schema the launcher validates against
(:meth:`Declaration.schema`) and the instances the experiment runs with
(:meth:`Declaration.build`). A config module never imports an experiment.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any, Callable, Iterable, Optional, Sequence

import ml_collections

from launch import config_schema
from methods.common import hparams

PRESETS = ("smoke", "cpu", "paper")
F = hparams.field

# Seeds are folded into uint32 PRNG keys: larger values cannot be represented.
MAX_SEED = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Base(hparams.Hyperparameters):
  """Keys every experiment has: its preset, seed, mesh and checkpointing."""

  preset: str = F("cpu", "Preset the config was built from (smoke | cpu | paper).", choices=PRESETS)
  seed: int = F(0, "Root seed of the run (every random key is folded from it).", low=0, high=MAX_SEED)
  mesh_data: int = F(-1, "Devices on the mesh's data axis (-1: all devices of all processes).", key="mesh.data",
                     low=-1)
  checkpoint_enabled: bool = F(True, "Write checkpoints (and resume from them).", key="checkpoint.enabled")
  checkpoint_every: int = F(1, "Checkpoint every this many steps of the experiment.", key="checkpoint.every", low=1)
  checkpoint_max_to_keep: int = F(2, "Checkpoint steps kept.", key="checkpoint.max_to_keep", low=1)

  def checks(self):
    if self.mesh_data == 0:
      yield "mesh_data", "0 is not allowed; use -1 (all devices) or a positive count"


def parse_arg(arg: str | None, **options: Any) -> ml_collections.ConfigDict:
  """Parses ``get_config``'s argument.

  Args:
    arg: ``None``/``""`` or comma-separated tokens: one preset name and any
      ``key=value`` pairs for the declared ``options``.
    **options: the option names with their defaults (which fix their types).

  Returns:
    A ConfigDict with ``preset`` and every option.

  Raises:
    ValueError: naming the unknown token and what is allowed.
  """
  out = ml_collections.ConfigDict({"preset": "cpu", **options})
  for token in filter(None, (t.strip() for t in (arg or "").split(","))):
    if "=" in token:
      key, _, raw = token.partition("=")
      if key not in options:
        raise ValueError(
            f"unknown config option {key!r} in {arg!r}; allowed options: {sorted(options)}"
        )
      default = options[key]
      try:
        value = type(default)(ast.literal_eval(raw)) if not isinstance(default, str) else raw
      except (ValueError, SyntaxError) as e:
        raise ValueError(f"option {key}={raw!r}: expected {type(default).__name__}") from e
      out[key] = value
    elif token in PRESETS:
      out.preset = token
    else:
      raise ValueError(
          f"unknown preset {token!r} in {arg!r}; allowed presets: {list(PRESETS)}, "
          f"options: {sorted(options)} (as key=value)"
      )
  return out


def add_section(config: ml_collections.ConfigDict, cls: type, prefix: str = "") -> ml_collections.ConfigDict:
  """Adds the config fields of the hyperparameter dataclass ``cls`` (defaults) under ``prefix``."""

  def merge(node: ml_collections.ConfigDict, values: dict) -> None:
    for key, value in values.items():
      if isinstance(value, dict):
        if key not in node:
          node[key] = ml_collections.ConfigDict()
        merge(node[key], value)
      else:
        node[key] = value

  target = config
  for part in filter(None, prefix.split(".")):
    if part not in target:
      target[part] = ml_collections.ConfigDict()
    target = target[part]
  merge(target, hparams.to_config(cls))
  return config


# A cross-section check: config -> iterable of (key, message).
Check = Callable[[ml_collections.ConfigDict], Iterable[tuple[str, str]]]
Section = config_schema.Section


@dataclasses.dataclass(frozen=True)
class Declaration:
  """An experiment's config, declared once.

  Attributes:
    name: the experiment's registry name (``config.experiment``).
    sections: the hyperparameter dataclasses by config prefix (the root
      ``""`` may hold several); :class:`Base` is always included.
    checks: cross-section checks that need only the config.
    infinite_ok: float keys that may be ``+-inf``.
  """

  name: str
  sections: tuple[config_schema.Section, ...]
  checks: tuple[Check, ...] = ()
  infinite_ok: frozenset = frozenset()

  def defaults(self, preset: str = "cpu") -> ml_collections.ConfigDict:
    """The config with every section's defaults, ``experiment`` and ``preset`` set."""
    config = ml_collections.ConfigDict()
    config.experiment = self.name
    for section in self.sections:
      add_section(config, section.cls, section.prefix)
    config.preset = preset
    return config

  def schema(self, reference: ml_collections.ConfigDict, extra_checks: Sequence[Check] = ()) -> config_schema.Schema:
    """The schema of ``reference`` (a ``get_config`` result): types, ranges, choices and checks."""
    return config_schema.Schema(
        reference,
        {"experiment": config_schema.OneOf((self.name,))},
        checks=tuple(self.checks) + tuple(extra_checks),
        sections=self.sections,
        infinite_ok=self.infinite_ok,
    )

  def build(self, config: ml_collections.ConfigDict, cls: type, **fixed: Any) -> Any:
    """The instance of the declared section class ``cls`` (``fixed``: its ``config=False`` fields)."""
    for section in self.sections:
      if section.cls is cls:
        node = config if not section.prefix else config[section.prefix]
        return hparams.from_config(cls, node, **fixed)
    raise KeyError(f"{cls.__name__} is not a section of {self.name}")


def declare(name: str, *sections: tuple[str, type] | config_schema.Section, checks: Sequence[Check] = (),
            infinite_ok: Optional[Iterable[str]] = None) -> Declaration:
  """The :class:`Declaration` of experiment ``name``: ``(prefix, cls)`` pairs or :class:`Section`s."""
  built = [config_schema.Section("", Base)]
  for s in sections:
    built.append(s if isinstance(s, config_schema.Section) else config_schema.Section(*s))
  return Declaration(name, tuple(built), tuple(checks), frozenset(infinite_ok or ()))
