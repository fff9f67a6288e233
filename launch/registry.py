"""The explicit registry of experiments (no import-by-string).

To add an experiment: write ``launch/configs/<name>.py`` and
``launch/experiments/<name>.py`` (defining ``EXPERIMENT``), then add it to
:data:`EXPERIMENTS` below.
"""

from __future__ import annotations

from launch.experiments import flow_matching
from launch.experiments import graphpfn_prior
from launch.experiments import model_smc
from launch.experiments import model_smc_calibration
from launch.experiments import model_smc_fit_panel
from launch.experiments import reg
from launch.experiments import varde_bai
from launch.experiments import varde_bpi
from launch.experiments import varde_mcts
from launch.runtime import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        varde_bai.EXPERIMENT,
        varde_mcts.EXPERIMENT,
        varde_bpi.EXPERIMENT,
        model_smc.EXPERIMENT,
        model_smc_calibration.EXPERIMENT,
        model_smc_fit_panel.EXPERIMENT,
        reg.EXPERIMENT,
        graphpfn_prior.EXPERIMENT,
        flow_matching.EXPERIMENT,
    )
}


def get(name: str) -> Experiment:
  """The experiment registered as ``name``."""
  if name not in EXPERIMENTS:
    raise KeyError(f"unknown experiment {name!r}; registered: {sorted(EXPERIMENTS)}")
  return EXPERIMENTS[name]
