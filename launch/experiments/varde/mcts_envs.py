"""The environments of ``varde_mcts``, built from the config's ``env`` section.

Their sizes and noise levels are declared once, in
:class:`launch.configs.varde_mcts.EnvConfig`.
"""

from __future__ import annotations

from envs import mdps
from envs import trees
from launch.configs import varde_mcts as mcts_config


def make_env(name: str, cfg: mcts_config.EnvConfig):
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
