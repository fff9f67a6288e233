"""D4RL HDF5 files, ``qlearning_dataset`` semantics and D4RL's score normalisation.

Everything here is NumPy + h5py. A D4RL file (``~/.d4rl/datasets/<name>.hdf5``,
what ``d4rl.get_dataset`` reads) has the keys ``observations``, ``actions``,
``rewards``, ``terminals``, ``timeouts`` (and ``next_observations``,
``infos/*``, ``metadata/*`` in the -v2 files). :func:`qlearning_dataset`
reproduces ``d4rl.qlearning_dataset``: the transition ``i`` is
``(obs[i], act[i], rew[i], obs[i + 1], terminals[i])``; the last transition of
a timed-out episode is dropped (its next observation belongs to another
episode) and ``done`` is set on terminals only (a timeout is not a terminal).

Normalisation: ``100 (R - R_random) / (R_expert - R_random)`` with the
constants of ``d4rl/infos.py`` (REF_MIN_SCORE / REF_MAX_SCORE).
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

import numpy as np

from datasets.offline_rl.errors import D4RLDimensionError
from datasets.offline_rl.errors import D4RLFileNotFoundError
from datasets.offline_rl.errors import D4RLFormatError

# d4rl/infos.py, REF_MIN_SCORE / REF_MAX_SCORE (all -v0/-v1/-v2 datasets of a task share them).
REF_MIN_SCORE = {"halfcheetah": -280.178953, "hopper": -20.272305, "walker2d": 1.629008, "ant": -325.6}
REF_MAX_SCORE = {"halfcheetah": 12135.0, "hopper": 3234.3, "walker2d": 4592.3, "ant": 3879.7}

REQUIRED_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts")
DATASET_KINDS = ("random", "medium", "expert", "medium-replay", "medium-expert", "full-replay")


def task_of(dataset_name: str) -> str:
  """``"halfcheetah-medium-v2" -> "halfcheetah"``."""
  return dataset_name.split("-")[0]


def ref_scores(dataset_name: str) -> tuple[float, float]:
  """D4RL's ``(random, expert)`` reference returns of a dataset's task."""
  task = task_of(dataset_name)
  if task not in REF_MIN_SCORE:
    raise KeyError(f"no D4RL reference scores for {dataset_name!r}; known tasks: {sorted(REF_MIN_SCORE)}")
  return REF_MIN_SCORE[task], REF_MAX_SCORE[task]


def normalized_score(returns, random_return: float, expert_return: float) -> np.ndarray:
  """``100 (R - R_random) / (R_expert - R_random)`` (D4RL's ``get_normalized_score`` x 100).

  Raises:
    ValueError: the two reference returns are equal (the score is undefined), naming them.
  """
  if float(expert_return) == float(random_return):
    raise ValueError(f"the random and expert reference returns are both {float(random_return):g}: the normalised "
                     "score 100 (R - random) / (expert - random) is undefined; give two different returns")
  return 100.0 * (np.asarray(returns, np.float64) - random_return) / (expert_return - random_return)


def d4rl_normalized_score(dataset_name: str, returns) -> np.ndarray:
  """Normalised score of ``returns`` on a D4RL dataset's task, with D4RL's exact constants."""
  return normalized_score(returns, *ref_scores(dataset_name))


def validate(data: Mapping[str, np.ndarray], source: str = "dataset", *, dims: Optional[tuple[int, int]] = None,
             env: str = "the environment") -> None:
  """Raises :class:`D4RLFormatError` naming missing keys, bad ranks or dimensions, or non-finite values.

  Args:
    data: D4RL arrays.
    source: what to name in errors (a file path).
    dims: ``(observation_dim, action_dim)`` of the environment ``env``, if known.
    env: the environment's name, for errors.
  """
  missing = [k for k in REQUIRED_KEYS if k not in data]
  if missing:
    raise D4RLFormatError(f"{source}: missing keys {missing}; a D4RL dataset has {list(REQUIRED_KEYS)}")
  arrays = REQUIRED_KEYS + (("next_observations",) if "next_observations" in data else ())
  for k in arrays:
    kind = np.asarray(data[k]).dtype  # h5py reads strings as bytes (dtype S) or bytes objects (dtype O)
    if kind.kind not in "biuf":
      raise D4RLFormatError(f"{source}: '{k}' has dtype {kind} ({'strings' if kind.kind in 'OSU' else 'not numbers'});"
                            " a D4RL array holds numbers")
    if np.ndim(data[k]) == 0:
      raise D4RLFormatError(f"{source}: '{k}' must have one row per step, got a scalar")
  n = len(data["observations"])
  for k in arrays:
    if len(data[k]) != n:
      raise D4RLFormatError(f"{source}: '{k}' has {len(data[k])} rows, 'observations' has {n}")
  for k in ("observations", "actions"):
    if np.ndim(data[k]) != 2:
      raise D4RLFormatError(f"{source}: '{k}' must be [N, dim], got shape {np.shape(data[k])}")
  if "next_observations" in data and np.shape(data["next_observations"]) != np.shape(data["observations"]):
    raise D4RLFormatError(f"{source}: 'next_observations' has shape {np.shape(data['next_observations'])}, "
                          f"'observations' {np.shape(data['observations'])}")
  for k in ("rewards", "terminals", "timeouts"):
    if np.ndim(data[k]) != 1:
      raise D4RLFormatError(f"{source}: '{k}' must be [N], got shape {np.shape(data[k])}")
  if dims is not None:
    for k, want, what in (("observations", dims[0], "observations"), ("actions", dims[1], "actions")):
      if np.shape(data[k])[1] != want:
        raise D4RLDimensionError(f"{source}: '{k}' has {np.shape(data[k])[1]} columns; {env} {what} have {want}")
  if n < 2:
    raise D4RLFormatError(f"{source}: {n} row{'' if n == 1 else 's'}; at least 2 are needed (one transition)")
  for k in ("observations", "actions", "rewards") + arrays[len(REQUIRED_KEYS):]:
    check_float32(data[k], source, k)


def check_float32(x, source: str, name: str) -> None:
  """Raises :class:`D4RLFormatError` naming the first value of ``x`` that is not finite in float32.

  Rows are trained on in float32: a value that is finite in the file's dtype
  but overflows float32 (``|x| > 3.4e38``) is refused like NaN and Inf.
  """
  x = np.asarray(x)
  with np.errstate(over="ignore", invalid="ignore"):
    bad = ~np.isfinite(x.astype(np.float32))
  if bad.any():
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    value = float(x[idx])
    if not np.isfinite(value):
      raise D4RLFormatError(f"{source}: '{name}' has NaN or Inf values (the first at index {idx}: {value!r})")
    raise D4RLFormatError(f"{source}: '{name}' at index {idx} holds {value!r}, which overflows float32 "
                          "(|x| <= 3.4e38), the dtype it is trained in")


def load_hdf5(path: str, *, dims: Optional[tuple[int, int]] = None, env: str = "the environment",
              missing_hint: str = "") -> dict[str, np.ndarray]:
  """The arrays of a D4RL HDF5 file (top-level datasets; groups ``infos``/``metadata`` skipped).

  Args:
    path: the file (any name).
    dims: ``(observation_dim, action_dim)`` the arrays must have (see :func:`validate`).
    env: the environment's name, for errors.
    missing_hint: how to point at the file, said when it does not exist.

  Raises:
    D4RLFileNotFoundError: no such file (also a ``FileNotFoundError``).
    D4RLFormatError: not an HDF5 file, not a D4RL dataset, the wrong
      dimensions, or fewer than 2 rows.
  """
  import h5py  # pylint: disable=g-import-not-at-top

  if not os.path.exists(path):
    raise D4RLFileNotFoundError(
        f"D4RL file {path} does not exist; download it where a network is available "
        f"(d4rl.get_dataset or the D4RL dataset URLs){missing_hint or ' and pass --config.data.d4rl_dir=<its folder>'}"
    )
  try:
    with h5py.File(path, "r") as f:
      data = {k: f[k][()] for k in f.keys() if isinstance(f[k], h5py.Dataset)}
  except OSError as e:
    raise D4RLFormatError(f"{path} is not a readable HDF5 file ({e})") from e
  validate(data, path, dims=dims, env=env)
  return data


def qlearning_dataset(data: Mapping[str, np.ndarray], terminate_on_end: bool = False, *,
                      source: str = "dataset", validated: bool = False) -> dict[str, np.ndarray]:
  """``d4rl.qlearning_dataset``: ``(s, a, r, s', done)`` arrays from D4RL rows.

  Args:
    data: D4RL arrays (``observations [N, S]``, ``actions [N, A]``,
      ``rewards [N]``, ``terminals [N]``, ``timeouts [N]``).
    terminate_on_end: keep the last transition of timed-out episodes (D4RL's
      flag; its ``done`` stays 0).
    source: what to name in errors (a file path).

  Returns:
    ``observations [M, S]``, ``actions [M, A]``, ``next_observations [M, S]``,
    ``rewards [M]``, ``terminals [M]`` (float32; 1 only on true terminals),
    with ``M <= N - 1`` (row ``N - 1`` has no successor, as in D4RL).
  """
  if not validated:
    validate(data, source)
  n = len(data["rewards"])
  timeouts = np.asarray(data["timeouts"][: n - 1], bool)
  keep = np.ones(n - 1, bool) if terminate_on_end else ~timeouts
  idx = np.nonzero(keep)[0]
  if not len(idx):
    raise D4RLFormatError(f"{source}: {n} rows but no transition (every row ends a timed-out episode)")
  return {
      "observations": np.asarray(data["observations"][idx], np.float32),
      "actions": np.asarray(data["actions"][idx], np.float32),
      "next_observations": np.asarray(data["observations"][idx + 1], np.float32),
      "rewards": np.asarray(data["rewards"][idx], np.float32),
      "terminals": np.asarray(data["terminals"][idx], bool).astype(np.float32),
  }


def episode_returns(data: Mapping[str, np.ndarray]) -> np.ndarray:
  """Undiscounted returns of the episodes in D4RL rows (split after terminals and timeouts).

  A trailing unfinished episode counts as one (as in IQL's ``split_into_trajectories``).
  """
  ends = np.asarray(data["terminals"], bool) | np.asarray(data["timeouts"], bool)
  ends[-1] = True
  episode = np.concatenate([[0], np.cumsum(ends)[:-1]])
  return np.bincount(episode, weights=np.asarray(data["rewards"], np.float64))


def reward_scale(data: Mapping[str, np.ndarray]) -> float:
  """IQL's locomotion reward scale ``1000 / (max_traj_return - min_traj_return)``."""
  r = episode_returns(data)
  spread = float(r.max() - r.min())
  if spread <= 0:
    raise D4RLFormatError(f"all {len(r)} episodes have the same return {r[0]:.3f}; cannot scale rewards")
  return 1000.0 / spread
