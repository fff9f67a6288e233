r"""VarDE tree search in stochastic environments against UCT, MENTS, Power-UCT and mctx.

Root simple regret ``V*(s0) - Q*(s0, a_hat)`` (exact, by dynamic programming) and
the probability of a wrong root action against the simulation budget, on random
SyntheticTrees at two noise levels, a slippery gridworld and random MDPs. All
policies of one (environment, budget) run in one jitted call whose run axis is
sharded over the devices. Launch from the repository root:

  python -m launch.main --config=launch/configs/varde_mcts.py:cpu --workdir=runs/varde_mcts
  python -m launch.main --config=launch/configs/varde_mcts.py:smoke --workdir=...
  python -m launch.main --config=launch/configs/varde_mcts.py:cpu,envs=tree --workdir=...

``envs=tree`` runs the two SyntheticTree noise levels only, ``envs=mdp`` the
gridworld and the random MDPs. Any key can be
overridden, e.g. ``--config.search.tau=0.3`` or ``--config.budgets='(16,64)'``.
"""

import ml_collections

from launch.configs import common
from methods.common import hparams
from methods.varde import mcts
from methods.varde import mctx_adapter

ENVS = ("tree_low_noise", "tree_high_noise", "gridworld", "random_mdp")
POLICIES = mcts.POLICIES + mctx_adapter.MCTX_POLICIES
ENV_SETS = {"all": ENVS, "tree": ENVS[:2], "mdp": ENVS[2:]}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,envs=all|tree|mdp]"``."""
  opts = common.parse_arg(arg, envs="all")
  if opts.envs not in ENV_SETS:
    raise ValueError(f"envs={opts.envs!r}; allowed: {sorted(ENV_SETS)}")
  config = common.base_config("varde_mcts", opts.preset)
  config.envs = ENV_SETS[opts.envs]
  config.policies = POLICIES
  config.budgets = (16, 64, 256)  # simulations per search (log-spaced)
  config.num_instances = 64  # random trees / MDPs per environment
  config.runs_per_instance = 4  # searches (seeds) per instance
  # Environments (launch/experiments/varde_mcts.py: EnvConfig).
  from launch.experiments import varde_mcts_envs  # pylint: disable=g-import-not-at-top

  config.env = ml_collections.ConfigDict(hparams.to_config(varde_mcts_envs.EnvConfig))
  # Tree-policy hyperparameters: declared once in methods/varde/mcts.py.
  config.search = ml_collections.ConfigDict(hparams.to_config(mcts.MCTSHparams))
  if opts.preset == "smoke":
    config.budgets = (8, 32)
    config.num_instances, config.runs_per_instance = 8, 2
  elif opts.preset == "paper":
    config.budgets = (16, 32, 64, 128, 256, 512, 1024, 2048)
    config.num_instances, config.runs_per_instance = 200, 25
  return config
