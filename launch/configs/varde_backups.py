r"""VarDE tree search: which backup, which temperature, UCT's ``c``, and the scale-free ``tau`` check.

Three stages on the environments of ``launch/configs/varde_mcts.py`` (same
``env.*`` keys: SyntheticTrees at two noise levels, the slippery gridworld,
random MDPs); the metric is the root simple regret ``V*(s0) - Q*(s0, a_hat)``
by dynamic programming.

1. **Tuning** on instances of seed ``seed + 1`` (``tune_instances`` x
   ``tune_runs``) at ``tune_budget`` simulations: UCT's ``c`` from ``uct_cs``
   per environment (``c`` is in value units), and per backup the setting
   ``(tau_scale, tau, floor_c)`` from ``tau_scales x taus x floors`` with the
   lowest regret relative to the tuned UCT, averaged over the environments
   (one setting for every environment: ``tau`` is scale-free).
2. **Evaluation** on fresh instances of seed ``seed + 2`` (``num_instances`` x
   ``runs_per_instance``; a fixed environment runs as many seeds): the
   default rule (``search.*``, fixed before any tuning), every backup at its
   tuned setting and UCT at its tuned ``c``, on the same instances with the
   same search keys, at every budget; paired differences to UCT with
   instance-clustered standard errors.
3. **Scale check** (instances of seed ``seed + 3``): the default rule on the
   gridworld and on a copy whose rewards are multiplied by ``scale_factor``
   (regret divided by it), same keys, with ``tau`` relative to the node's
   value scale and, for contrast, the same ``tau`` in value units.

Launch from the repository root:

  python -m launch.main --config=launch/configs/varde_backups.py:cpu --workdir=runs/varde_backups
  python -m launch.main --config=launch/configs/varde_backups.py:smoke --workdir=...
  python -m launch.main --config=launch/configs/varde_backups.py:paper --workdir=...   # one GPU

The ``cpu`` preset tunes over the ``return_std`` scale only (``tau`` x ``floor_c``
per backup, 64 instances x 4 runs in the evaluation; tens of minutes on 2 CPU
cores); the ``paper`` preset (both scales, a finer grid, 200 instances x 25
runs, budgets to 1024) is sized for one GPU.
"""

import dataclasses

import ml_collections

from launch.configs import common
from launch.configs import varde_mcts
from methods.common import hparams
from methods.varde import mcts
from methods.varde import tree_rules

F = hparams.field
ENVS = varde_mcts.ENVS


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys."""

  envs: tuple[str, ...] = F(ENVS, "Environments (those of varde_mcts).", choices=ENVS, nonempty=True, unique=True)
  backups: tuple[str, ...] = F(tree_rules.BACKUPS, "VarDE backups to tune and evaluate.", choices=tree_rules.BACKUPS,
                               nonempty=True, unique=True)
  budgets: tuple[int, ...] = F((16, 64, 256), "Simulations per search in the evaluation.", low=1, nonempty=True,
                               unique=True)
  tune_budget: int = F(256, "Simulations per search in the tuning.", low=1)
  taus: tuple[float, ...] = F((0.3, 1.0, 3.0), "VarDE tau grid (relative to the node's value scale).", low=0,
                              low_open=True, nonempty=True, unique=True)
  tau_scales: tuple[str, ...] = F(("return_std", "spread"), "Scale-free value scales in the grid.",
                                  choices=tree_rules.TAU_SCALES[:2], nonempty=True, unique=True)
  floors: tuple[float, ...] = F((0.0, 1.0), "VarDE forced-exploration floor_c grid.", low=0, nonempty=True,
                                unique=True)
  uct_cs: tuple[float, ...] = F((0.25, 0.5, 1.0, 2.0, 4.0), "UCT c grid (value units).", low=0, nonempty=True,
                                unique=True)
  tune_instances: int = F(32, "Random instances per environment in the tuning.", low=2)
  tune_runs: int = F(2, "Searches per tuning instance.", low=1)
  num_instances: int = F(64, "Random instances per environment in the evaluation.", low=2)
  runs_per_instance: int = F(4, "Searches per evaluation instance.", low=1)
  scale_factor: float = F(100.0, "Reward multiplier of the scale check's gridworld copy.", low=0, low_open=True)


SECTIONS = common.declare(
    "varde_backups",
    ("", Run),
    ("env", varde_mcts.EnvConfig),
    ("search", mcts.MCTSHparams),
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>"``."""
  opts = common.parse_arg(arg)
  config = SECTIONS.defaults(opts.preset)
  if opts.preset == "smoke":
    config.envs = ("tree_high_noise", "gridworld")
    config.backups = ("mean", "softmax_mean")
    config.budgets, config.tune_budget = (8, 32), 32
    config.taus, config.tau_scales, config.floors, config.uct_cs = (1.0,), ("return_std",), (1.0,), (0.5, 1.0)
    config.tune_instances, config.tune_runs = 4, 1
    config.num_instances, config.runs_per_instance = 4, 2
  elif opts.preset == "cpu":
    config.tau_scales = ("return_std",)
  elif opts.preset == "paper":
    config.budgets = (16, 64, 256, 1024)
    config.taus = (0.1, 0.3, 1.0, 3.0)
    config.floors = (0.0, 0.5, 1.0, 2.0)
    config.uct_cs = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    config.tune_instances, config.tune_runs = 100, 4
    config.num_instances, config.runs_per_instance = 200, 25
  return config
