"""The environments of ``varde_bpi``, built from the config's ``env`` section.

Their sizes and noise levels are declared once, in
:class:`launch.configs.varde_bpi.EnvConfig`.
"""

from __future__ import annotations

from datasets import npz_files
from envs import mdp_files
from envs import mdps
from envs.errors import MDPFileError
from launch.configs import varde_bpi as bpi_config


def load_mdp_file(path: str, *, s0: int = 0, samples: int = 1) -> mdps.TabularMDP:
  """A user's MDP from an ``.npz`` archive of :data:`envs.mdp_files.ARRAYS`, checked before any compute.

  The archive is read by :func:`datasets.npz_files.read_arrays` and the arrays
  are checked and built by :func:`envs.mdp_files.from_arrays`; ``samples`` (the
  largest budget) bounds the rewards.

  Raises:
    MDPFileError: naming the file, and the array and index where there is one
      (an unreadable archive's error is its cause).
  """
  try:
    arrays = npz_files.read_arrays(path, mdp_files.ARRAYS, how=mdp_files.HOW)
  except npz_files.NpzFileError as e:
    raise MDPFileError(str(e)) from e
  return mdp_files.from_arrays(arrays, where=path, s0=s0, samples=samples)


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
    mdp = load_mdp_file(mdp_file, s0=start_state)
    return lambda k: mdp
  raise ValueError(f"unknown environment {name!r}")


def num_instances(name: str, requested: int) -> int:
  """Fixed environments (RiverSwim, the gridworld, a file) have one instance."""
  return requested if name.startswith("garnet") else 1
