"""Pieces shared by every experiment config.

Config files follow big_vision: ``get_config(arg)`` returns an
``ml_collections.ConfigDict``; ``arg`` is a comma-separated list of a preset
name and ``key=value`` options, e.g. ``"smoke"`` or ``"cpu,problem=E2"``.
Presets:

* ``smoke``: seconds; used by the tests, the colabs and ``make demo`` smoke runs.
* ``cpu``: minutes on a laptop CPU; the default.
* ``paper``: the paper's full scale, for a GPU/TPU host or cluster.
"""

from __future__ import annotations

import ast
from typing import Any

import ml_collections

from launch import config_schema
from methods.common import hparams

PRESETS = ("smoke", "cpu", "paper")


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


def base_config(experiment: str, preset: str) -> ml_collections.ConfigDict:
  """Keys every experiment has: its registry name, seed, mesh, checkpointing."""
  config = ml_collections.ConfigDict()
  config.experiment = experiment
  config.preset = preset
  config.seed = 0
  # Devices on the mesh's data axis (-1: all devices of all processes).
  config.mesh = ml_collections.ConfigDict({"data": -1})
  config.checkpoint = ml_collections.ConfigDict(
      {"enabled": True, "every": 1, "max_to_keep": 2}
  )
  return config


BASE_CONSTRAINTS = {
    "preset": config_schema.OneOf(PRESETS),
    "seed": config_schema.Range(lo=0),
    "checkpoint.every": config_schema.Range(lo=1),
    "checkpoint.max_to_keep": config_schema.Range(lo=1),
}


def mesh_check(config: ml_collections.ConfigDict):
  """``mesh.data`` is -1 (all devices) or a positive device count."""
  if config.mesh.data != -1 and config.mesh.data < 1:
    yield "mesh.data", f"{config.mesh.data} is not allowed; use -1 (all devices) or a positive count"


def add_section(config: ml_collections.ConfigDict, cls: type, prefix: str = "") -> ml_collections.ConfigDict:
  """Adds the config fields of the hyperparameter dataclass ``cls`` (defaults) under ``prefix``.

  The dataclass is the single declaration of these keys: the schema derives
  their checks from it (:class:`launch.config_schema.Section`) and the
  experiment builds it back with :func:`methods.common.hparams.from_config`.
  """

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
