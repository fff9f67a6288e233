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

PROBLEMS = ("E1", "E2", "E3", "E4")
ALGORITHMS = (
    "varde",
    "varde_uniform_weights",
    "varde_known_variance",
    "uniform",
    "successive_rejects",
    "sequential_halving",
    "ucbe",
    "ugape",
    "gapev",
    "shvar",
    "shadavar",
    "ttts",
    "ocba",
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,problem=E1|E2|E3|E4]"``."""
  opts = common.parse_arg(arg, problem="E1")
  config = common.base_config("varde_bai", opts.preset)
  config.problem = opts.problem
  # Budgets T to run. () means the problem's grid for this preset: the paper's
  # budgets plus more for the error-against-budget figure
  # (launch/experiments/varde_bai.py: BUDGET_GRIDS).
  config.budgets = ()
  config.num_seeds = 20_000
  config.chunk_size = 5_000  # seeds per jitted call (one checkpoint each)
  config.std_mode = "shuffled"  # std = a per-run permutation of the means
  config.noise = "gaussian"  # or "student_t" (heavy tails, variance kept)
  config.df = 3.0  # Student-t degrees of freedom
  config.algorithms = ALGORITHMS
  config.reference = "varde_tau0.1"  # paired comparisons are against this

  config.varde = ml_collections.ConfigDict()
  config.varde.taus = (0.05, 0.1, 0.15)
  config.varde.ablation_tau = 0.1  # tau of the known-variance ablation
  config.varde.warm_start = 2
  config.varde.var_floor = 0.01

  config.baselines = ml_collections.ConfigDict()
  config.baselines.ucbe_c = (2.0, 4.0, 8.0)
  config.baselines.ugape_c = 1.0
  config.baselines.gapev_c = 1.0
  config.baselines.rate_scale = "hardness"  # a = c (T - warm) / H, or "raw": a = c
  config.baselines.sh_reuse_samples = False
  config.baselines.shadavar_delta = 0.05
  config.baselines.ttts_beta = 0.5
  config.baselines.warm_start = 2  # TTTS and OCBA
  config.baselines.var_floor = 0.01

  if opts.preset == "smoke":
    config.num_seeds = 512
    config.chunk_size = 256
  elif opts.preset == "paper":
    config.chunk_size = 20_000
  return config
