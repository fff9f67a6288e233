"""Small D4RL-format datasets for the tests of the offline-RL data path (a user's own HDF5 file)."""

import h5py
import numpy as np


def rows(n: int = 40, obs_dim: int = 5, act_dim: int = 2, seed: int = 0) -> dict:
  """``n`` random transitions in two episodes (a timeout closes each half), D4RL's keys and dtypes."""
  rng = np.random.default_rng(seed)
  out = {
      "observations": rng.standard_normal((n, obs_dim)).astype(np.float32),
      "actions": rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
      "rewards": rng.standard_normal(n).astype(np.float32),
      "terminals": np.zeros(n, bool),
      "timeouts": np.zeros(n, bool),
  }
  out["timeouts"][n // 2 - 1:: max(n // 2, 1)] = True
  return out


def write(path, data: dict) -> str:
  """``data``'s arrays as the datasets of an HDF5 file at ``path``; returns the path as a string."""
  with h5py.File(path, "w") as f:
    for k, v in data.items():
      f.create_dataset(k, data=v)
  return str(path)
