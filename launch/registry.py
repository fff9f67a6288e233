"""The registry of experiments: a fixed table, loaded lazily.

Importing this module loads no experiment; :func:`get` imports the one asked
for. To add an experiment: write ``launch/configs/<name>.py`` (its
``SECTIONS`` and ``get_config``) and a module in
``launch/experiments/<method>/`` defining ``EXPERIMENT``, then add one line
to :data:`MODULES`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from launch.runtime import Experiment

# Registry name -> the module that defines its ``EXPERIMENT``.
MODULES: dict[str, str] = {
    "varde_bai": "launch.experiments.varde.bai",
    "varde_mcts": "launch.experiments.varde.mcts",
    "varde_bpi": "launch.experiments.varde.bpi",
    "varde_backups": "launch.experiments.varde.backups",
    "varde_2048": "launch.experiments.varde.game2048",
    "model_smc": "launch.experiments.model_smc.experiment",
    "model_smc_calibration": "launch.experiments.model_smc.calibration",
    "model_smc_fit_panel": "launch.experiments.model_smc.fit_panel",
    "reg": "launch.experiments.reg.experiment",
    "graphpfn_prior": "launch.experiments.graphpfn.prior",
    "graphpfn": "launch.experiments.graphpfn.network",
    "flow_matching": "launch.experiments.flow_matching.experiment",
}
NAMES = tuple(MODULES)


def get(name: str) -> "Experiment":
  """The experiment registered as ``name`` (its module is imported on first use)."""
  if name not in MODULES:
    raise KeyError(f"unknown experiment {name!r}; registered: {sorted(MODULES)}")
  experiment = importlib.import_module(MODULES[name]).EXPERIMENT
  if experiment.name != name:
    raise RuntimeError(f"{MODULES[name]} defines experiment {experiment.name!r}, registered as {name!r}")
  return experiment
