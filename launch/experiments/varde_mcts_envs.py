"""The environments of ``varde_mcts`` and their configuration (declared once)."""

from __future__ import annotations

import dataclasses

import jax

from envs import mdps
from envs import trees
from methods.common import hparams


@dataclasses.dataclass(frozen=True)
class EnvConfig(hparams.Hyperparameters):
  """Sizes and noise of the tree-search environments."""

  tree_branching: int = hparams.field(4, "SyntheticTree actions per node k.", low=2)
  tree_depth: int = hparams.field(4, "SyntheticTree depth d (the search horizon).", low=1, high=8)
  tree_sigma_low: float = hparams.field(0.5, "Leaf return std of tree_low_noise.", low=0)
  tree_sigma_high: float = hparams.field(2.0, "Leaf return std of tree_high_noise.", low=0)
  grid_size: int = hparams.field(3, "Gridworld side (FrozenLake-style, slippery).", low=2, high=8)
  grid_horizon: int = hparams.field(8, "Gridworld search horizon H.", low=1)
  grid_reward_std: float = hparams.field(0.5, "Std of the goal reward.", low=0)
  mdp_states: int = hparams.field(10, "Random MDP states.", low=2)
  mdp_actions: int = hparams.field(3, "Random MDP actions.", low=2)
  mdp_horizon: int = hparams.field(4, "Random MDP search horizon H.", low=1)
  mdp_reward_std: float = hparams.field(1.0, "Random MDP reward std.", low=0)
  mdp_gamma: float = hparams.field(0.9, "Random MDP discount.", low=0, high=1)


def make_env(name: str, cfg: EnvConfig):
  """``(instance_key -> TabularMDP, horizon)`` of environment ``name``."""
  if name in ("tree_low_noise", "tree_high_noise"):
    sigma = cfg.tree_sigma_low if name == "tree_low_noise" else cfg.tree_sigma_high
    return (lambda k: trees.synthetic_tree(k, cfg.tree_branching, cfg.tree_depth, sigma)), cfg.tree_depth
  if name == "gridworld":
    grid = mdps.gridworld(cfg.grid_size, reward_std=cfg.grid_reward_std)
    return (lambda k: grid), cfg.grid_horizon
  if name == "random_mdp":
    return (lambda k: mdps.random_mdp(k, cfg.mdp_states, cfg.mdp_actions, gamma=cfg.mdp_gamma,
                                      reward_std=cfg.mdp_reward_std)), cfg.mdp_horizon
  raise ValueError(f"unknown environment {name!r}")


def num_instances(name: str, requested: int) -> int:
  """Fixed environments (the gridworld) have one instance."""
  return 1 if name == "gridworld" else requested


def instance_key(seed: int, env_index: int, instance: jax.Array) -> jax.Array:
  return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), env_index), instance)
