r"""ModelSMC fit quality: the project's fit against SciPy multi-start L-BFGS-B on a fixed panel of structures.

  python -m launch.main --config=launch/configs/model_smc_fit_panel.py:cpu --workdir=runs/model_smc_fit_panel
  python -m launch.experiments.model_smc_fit_panel --out=runs/fit_panel

Each task's fit keys are the ``model_smc`` config's at the same preset
(``launch/configs/model_smc.py``); the ``panel`` section is built from
``launch.experiments.model_smc_fit_panel.Panel``.
"""

import ml_collections

from launch.configs import common
from methods.common import hparams


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>"``; smoke (``make demo``): two pelts structures, 3 SciPy starts."""
  from launch.experiments import model_smc_fit_panel as panel  # pylint: disable=g-import-not-at-top
  opts = common.parse_arg(arg)
  config = common.base_config("model_smc_fit_panel", opts.preset)
  config.panel = ml_collections.ConfigDict(hparams.to_config(panel.Panel))
  if opts.preset == "smoke":
    config.panel.tasks = ("pelts",)
    config.panel.structures_per_task = 2
    config.panel.scipy_starts = 3
    config.panel.compare_adam = False
  elif opts.preset == "paper":
    config.panel.structures_per_task = 40
  return config
