r"""VarDE fixed-budget best-arm identification: experiments E1-E4 of the paper.

Every algorithm runs on the same seeds with common random numbers; the whole
sweep (all seeds x all algorithms) is one jitted function, vmapped over seeds
and sharded over all devices. Launch from the repository root:

  python -m launch.main --config=launch/configs/varde_bai.py:cpu \
      --workdir=runs/varde_bai_e1

  # Another problem, a smoke-size run, or the paper's scale:
  python -m launch.main --config=launch/configs/varde_bai.py:cpu,problem=E2 --workdir=...
  python -m launch.main --config=launch/configs/varde_bai.py:smoke --workdir=...
  python -m launch.main --config=launch/configs/varde_bai.py:paper,problem=E3 --workdir=...

Any key can be overridden, e.g. ``--config.num_seeds=5000``;
``--config.varde.taus='(0.1,)'``.
"""

import ml_collections

from launch.configs import common
from methods import varde
from methods.common import hparams

PROBLEMS = ("E1", "E2", "E3", "E4")  # the paper's; or "custom": your own means/stds
# Suite names; each expands into one or more algorithms (methods.varde.ALGORITHMS).
ALGORITHMS = tuple(varde.ALGORITHMS)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,problem=E1|E2|E3|E4|custom]"``."""
  opts = common.parse_arg(arg, problem="E1")
  config = common.base_config("varde_bai", opts.preset)
  config.problem = opts.problem
  # Budgets T to run. () means the problem's grid for this preset: the paper's
  # budgets plus more for the error-against-budget figure
  # (launch/experiments/varde_bai.py: BUDGET_GRIDS).
  config.budgets = ()
  # Your own bandit (problem=custom): arm means and, optionally, their stds
  # (empty: the stds are the means, per std_mode), e.g.
  # --config.means='(0.5,0.45,0.3)' --config.stds='(1.0,0.5,0.2)' --config.budgets='(300,)'
  config.means = ()
  config.stds = ()
  config.num_seeds = 20_000
  config.chunk_size = 5_000  # seeds per jitted call (one checkpoint each)
  config.std_mode = "shuffled"  # std = a per-run permutation of the means (or stds); "fixed", "equal_mean"
  config.noise = "gaussian"  # or "student_t" (heavy tails, variance kept)
  config.df = 3.0  # Student-t degrees of freedom
  config.algorithms = ALGORITHMS
  config.reference = "varde_tau0.1"  # paired comparisons are against this

  # Method hyperparameters: declared once in methods/varde/suite.py.
  config.varde = ml_collections.ConfigDict(hparams.to_config(varde.VarDEHparams))
  config.baselines = ml_collections.ConfigDict(hparams.to_config(varde.BaselineHparams))

  if opts.preset == "smoke":
    config.num_seeds = 512
    config.chunk_size = 256
  elif opts.preset == "paper":
    config.chunk_size = 20_000
  return config
