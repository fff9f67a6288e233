"""The environments of ``varde_bpi``, built from the config's ``env`` section.

Their sizes and noise levels are declared once, in
:class:`launch.configs.varde_bpi.EnvConfig`.
"""

from __future__ import annotations

from envs import mdp_files
from envs import mdps
from launch.configs import varde_bpi as bpi_config


def make_env(name: str, cfg: bpi_config.EnvConfig, mdp_file: str = "", start_state: int = 0):
  """``instance_key -> TabularMDP`` of environment ``name``."""
  if name == "riverswim":
    river = mdps.riverswim(cfg.riverswim_states, gamma=cfg.riverswim_gamma, reward_std=cfg.riverswim_reward_std)
    return lambda k: river
  if name == "gridworld":
    grid = mdps.gridworld(cfg.grid_size, reward_std=cfg.grid_reward_std, gamma=cfg.grid_gamma)
    return lambda k: grid
  if name in ("garnet_high_variance", "garnet_heavy_tailed"):
    df = cfg.heavy_df if name == "garnet_heavy_tailed" else float("inf")
    return lambda k: mdps.garnet(k, cfg.garnet_states, cfg.garnet_actions, cfg.garnet_branching,
                                 gamma=cfg.garnet_gamma, reward_std=(0.1, cfg.garnet_std_high), df=df)
  if name == "file":
    mdp = mdp_files.load_npz(mdp_file, s0=start_state)
    return lambda k: mdp
  raise ValueError(f"unknown environment {name!r}")


def num_instances(name: str, requested: int) -> int:
  """Fixed environments (RiverSwim, the gridworld, a file) have one instance."""
  return requested if name.startswith("garnet") else 1
