r"""Calibration of ModelSMC's parameter intervals (true structure fixed, many simulated datasets).

For each simulated system the true structure is fitted to ``num_datasets``
datasets (same true parameters, different noise) with the problem and fit
settings of ``launch/configs/model_smc.py`` (preset ``model_preset``,
``task=sim``); the Laplace and MALA intervals of every parameter are checked
against the truth. Launch from the repository root:

  python -m launch.experiments.model_smc_calibration --out=runs/calibration
  python -m launch.main --config=launch/configs/model_smc_calibration.py:cpu \
      --workdir=runs/model_smc_calibration

Any key can be overridden, e.g. ``--config.num_datasets=200``,
``--config.systems='("sir",)'``, ``--config.posterior.num_samples=1000``.
"""

import ml_collections

from launch.configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>"``."""
  from launch.experiments import model_smc_calibration as cal  # pylint: disable=g-import-not-at-top

  opts = common.parse_arg(arg)
  config = common.base_config("model_smc_calibration", opts.preset)
  for prefix, cls in cal.SECTIONS:
    common.add_section(config, cls, prefix)
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
