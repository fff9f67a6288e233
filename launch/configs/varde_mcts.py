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
The experiment's own keys are :class:`Run`, the environments' :class:`EnvConfig`
(``env.*``); the tree policies' (``search.*``) are declared in ``methods/varde/mcts.py``.
"""

import dataclasses

import ml_collections

from envs import trees
from launch.configs import common
from methods.common import hparams
from methods.varde import mcts
from methods.varde import mctx_adapter

F = hparams.field
ENVS = ("tree_low_noise", "tree_high_noise", "gridworld", "random_mdp")
POLICIES = mcts.POLICIES + mctx_adapter.MCTX_POLICIES
ENV_SETS = {"all": ENVS, "tree": ENVS[:2], "mdp": ENVS[2:]}


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys."""

  envs: tuple[str, ...] = F(ENVS, "Environments to search in.", choices=ENVS, nonempty=True, unique=True)
  policies: tuple[str, ...] = F(POLICIES, "Tree policies (this project's and mctx's).", choices=POLICIES,
                                nonempty=True, unique=True)
  budgets: tuple[int, ...] = F((16, 64, 256), "Simulations per search (log-spaced).", low=1, nonempty=True,
                               unique=True)
  num_instances: int = F(64, "Random trees / MDPs per environment.", low=1)
  runs_per_instance: int = F(4, "Searches (seeds) per instance.", low=1)


MAX_TREE_NODES = 1 << 22  # SyntheticTree nodes per instance (its [nodes, k] arrays are built in full)


@dataclasses.dataclass(frozen=True)
class EnvConfig(hparams.Hyperparameters):
  """Sizes and noise of the tree-search environments (config section ``env``)."""

  tree_branching: int = F(4, "SyntheticTree actions per node k.", low=2)
  tree_depth: int = F(4, "SyntheticTree depth d (the search horizon).", low=1, high=8)
  tree_sigma_low: float = F(0.5, "Leaf return std of tree_low_noise.", low=0)
  tree_sigma_high: float = F(2.0, "Leaf return std of tree_high_noise.", low=0)
  grid_size: int = F(3, "Gridworld side (FrozenLake-style, slippery).", low=2, high=8)
  grid_horizon: int = F(8, "Gridworld search horizon H.", low=1)
  grid_reward_std: float = F(0.5, "Std of the goal reward.", low=0)
  mdp_states: int = F(10, "Random MDP states.", low=2)
  mdp_actions: int = F(3, "Random MDP actions.", low=2)
  mdp_horizon: int = F(4, "Random MDP search horizon H.", low=1)
  mdp_reward_std: float = F(1.0, "Random MDP reward std.", low=0)
  mdp_gamma: float = F(0.9, "Random MDP discount.", low=0, high=1)

  def checks(self):
    nodes = trees.num_nodes(self.tree_branching, self.tree_depth)
    if nodes > MAX_TREE_NODES:
      yield "tree_branching", (f"a SyntheticTree of {self.tree_branching} actions per node and depth "
                               f"{self.tree_depth} has {nodes:,} nodes, over the {MAX_TREE_NODES:,} one instance "
                               "may hold (every node's arrays are built); lower env.tree_branching or env.tree_depth")


SECTIONS = common.declare(
    "varde_mcts",
    ("", Run),
    ("env", EnvConfig),
    ("search", mcts.MCTSHparams),
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,envs=all|tree|mdp]"``."""
  opts = common.parse_arg(arg, envs="all")
  if opts.envs not in ENV_SETS:
    raise ValueError(f"envs={opts.envs!r}; allowed: {sorted(ENV_SETS)}")
  config = SECTIONS.defaults(opts.preset)
  config.envs = ENV_SETS[opts.envs]
  if opts.preset == "smoke":
    config.budgets = (8, 32)
    config.num_instances, config.runs_per_instance = 8, 2
  elif opts.preset == "paper":
    config.budgets = (16, 32, 64, 128, 256, 512, 1024, 2048)
    config.num_instances, config.runs_per_instance = 200, 25
  return config
