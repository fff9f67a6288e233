r"""VarDE best-policy identification with a generative model (a reconstruction).

Policy regret ``V*(s0) - V^pi_hat(s0)`` (exact, by dynamic programming on the
true MDP) against the sample budget, for VarDE's occupancy-weighted variance
allocation, uniform sampling, MDP-GapE and a BESPOKE-style allocation, on
RiverSwim and Garnet MDPs with high-variance or heavy-tailed rewards. Launch
from the repository root:

  python -m launch.main --config=launch/configs/varde_bpi.py:cpu --workdir=runs/varde_bpi
  python -m launch.main --config=launch/configs/varde_bpi.py:smoke --workdir=...

Your own MDP: a ``.npz`` file with arrays ``P [S, A, S]``, ``reward_mean`` and
``reward_std`` ``[S, A]`` and a scalar ``discount`` (checked on load):

  python -m launch.main --config=launch/configs/varde_bpi.py:cpu,envs=file \
      --config.mdp_file=my_mdp.npz --workdir=...
"""

import ml_collections

from launch.configs import common
from methods.common import hparams
from methods.varde import bpi

ENVS = ("riverswim", "garnet_high_variance", "garnet_heavy_tailed", "file")
ENV_SETS = {"all": ENVS[:3], "file": ("file",)}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,envs=all|file]"``."""
  opts = common.parse_arg(arg, envs="all")
  if opts.envs not in ENV_SETS:
    raise ValueError(f"envs={opts.envs!r}; allowed: {sorted(ENV_SETS)}")
  config = common.base_config("varde_bpi", opts.preset)
  config.envs = ENV_SETS[opts.envs]
  config.algorithms = bpi.ALGORITHMS
  config.budgets = (256, 512, 1024, 2048, 4096)  # generative-model samples (log-spaced)
  config.num_instances = 32  # random Garnet MDPs per environment
  config.runs_per_instance = 4  # seeds per instance
  config.mdp_file = ""  # envs=file: a .npz with P, reward_mean, reward_std, discount
  config.start_state = 0  # envs=file: s0
  from launch.experiments import varde_bpi_envs  # pylint: disable=g-import-not-at-top

  config.env = ml_collections.ConfigDict(hparams.to_config(varde_bpi_envs.EnvConfig))
  # Allocation hyperparameters: declared once in methods/varde/bpi.py.
  config.bpi = ml_collections.ConfigDict(hparams.to_config(bpi.BPIHparams))
  if opts.preset == "smoke":
    config.budgets = (128, 512)
    config.num_instances, config.runs_per_instance = 4, 2
  elif opts.preset == "paper":
    config.budgets = (256, 512, 1024, 2048, 4096, 8192, 16384)
    config.num_instances, config.runs_per_instance = 200, 10
  return config
