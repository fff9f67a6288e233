r"""Calibration of ModelSMC's parameter intervals (true structure fixed, many simulated datasets).

For each simulated system the true structure is fitted to ``num_datasets``
datasets (same true parameters, different noise) with the problem and fit
settings of ``launch/configs/model_smc.py`` (preset ``model_preset``,
``task=sim``); the Laplace and MALA intervals of every parameter are checked
against the truth. Launch from the repository root:

  python -m launch.main --config=launch/configs/model_smc_calibration.py:cpu \
      --workdir=runs/model_smc_calibration

Any key can be overridden, e.g. ``--config.num_datasets=200``,
``--config.systems='("sir",)'``, ``--config.posterior.num_samples=1000``.
"""

import dataclasses

import ml_collections

from envs import ode_systems
from launch.configs import common
from methods.common import hparams
from methods.model_smc import posterior

F = hparams.field


@dataclasses.dataclass(frozen=True)
class RunConfig(hparams.Hyperparameters):
  """The study's own keys (the intervals' are section ``posterior``)."""

  systems: tuple[str, ...] = F(("lotka_volterra", "sir", "damped_oscillator", "toggle_switch", "monod_uptake"),
                               "Simulated systems (keys of envs.ode_systems.SYSTEMS).",
                               choices=tuple(ode_systems.SYSTEMS), nonempty=True, unique=True)
  num_datasets: int = F(64, "Simulated datasets per system (true parameters fixed, noise redrawn).", low=2)
  levels: tuple[float, ...] = F((0.5, 0.9), "Central interval levels.", low=0, high=1, low_open=True,
                                high_open=True, nonempty=True, unique=True)
  model_preset: str = F("cpu", "Preset of launch/configs/model_smc.py whose problem and fit sections are used.",
                        choices=common.PRESETS)
  chunk_size: int = F(32, "Datasets per compiled call (the last chunk is padded).", low=1)
  num_se: float = F(4.0, "A coverage is calibrated when within this many standard errors of nominal.",
                    low=0, low_open=True)


SECTIONS = common.declare("model_smc_calibration", ("", RunConfig), ("posterior", posterior.PosteriorConfig))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>"``."""
  opts = common.parse_arg(arg)
  config = SECTIONS.defaults(opts.preset)
  if opts.preset == "smoke":
    config.systems = ("damped_oscillator",)
    config.num_datasets = 8
    config.model_preset = "smoke"
    config.posterior.num_chains = 2
    config.posterior.num_warmup = 60
    config.posterior.num_samples = 100
  elif opts.preset == "paper":
    config.num_datasets = 400
    config.posterior.num_chains = 4
    config.posterior.num_warmup = 1000
    config.posterior.num_samples = 2000
  return config
