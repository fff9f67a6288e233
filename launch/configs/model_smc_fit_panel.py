r"""ModelSMC fit quality: the project's fit against SciPy multi-start L-BFGS-B on a fixed panel of structures.

  python -m launch.main --config=launch/configs/model_smc_fit_panel.py:cpu --workdir=runs/model_smc_fit_panel

Each task's fit keys are the ``model_smc`` config's at the same preset
(``launch/configs/model_smc.py``); the panel's own keys are section ``panel``
(:class:`Panel`).
"""

import dataclasses

import ml_collections

from launch.configs import common
from methods.common import hparams

F = hparams.field
# Panel entry -> the model_smc config argument (after the preset) of its task.
PANEL_TASKS = {
    "pelts": "task=pelts",
    "lv_sim": "task=lv_sim",
    "flu": "task=flu",
    "toggle_switch": "task=sim,system=toggle_switch",
    "monod_uptake": "task=sim,system=monod_uptake",
}


@dataclasses.dataclass(frozen=True)
class Panel(hparams.Hyperparameters):
  """The panel's own keys (config section ``panel``); each task's fit keys are model_smc's at the same preset."""

  tasks: tuple[str, ...] = F(tuple(PANEL_TASKS), "Tasks of the panel.", choices=tuple(PANEL_TASKS), unique=True,
                             nonempty=True)
  structures_per_task: int = F(10, "Structures per task: the true or textbook one, then prior draws.", low=1)
  p_include: float = F(0.3, "Inclusion probability of each term in the prior draws.", low=0, high=1, low_open=True)
  scipy_starts: int = F(20, "L-BFGS-B starts of the SciPy peer per structure.", low=1)
  tol: float = F(0.5, "A fit is at the optimum when its objective is within tol nats of the better one.", low=0)
  max_gap: float = F(2.0, "The criterion fails if any fit is more than max_gap nats above the better one.", low=0)
  min_share: float = F(0.95, "Share of structures that must be within tol.", low=0, high=1)
  compare_adam: bool = F(False, "Also fit every structure with the Adam fit (fit.optimizer='adam', at most 4 "
                         "restarts, no knockout starts; off by default: on 2 CPU devices its batch on the toggle "
                         "switch is slow).")


SECTIONS = common.declare("model_smc_fit_panel", ("panel", Panel))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>"``; smoke (``make demo``): two pelts structures, 3 SciPy starts."""
  opts = common.parse_arg(arg)
  config = SECTIONS.defaults(opts.preset)
  if opts.preset == "smoke":
    config.panel.tasks = ("pelts",)
    config.panel.structures_per_task = 2
    config.panel.scipy_starts = 3
    config.panel.compare_adam = False
  elif opts.preset == "paper":
    config.panel.structures_per_task = 40
  return config
