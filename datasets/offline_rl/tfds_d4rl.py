"""The TFDS catalog's D4RL datasets (``d4rl_mujoco_{halfcheetah,hopper,walker2d}``) as transitions.

The catalog builders (``tensorflow_datasets/d4rl``) store RLDS episodes:
``steps`` with ``observation, action, reward, discount, is_first, is_last,
is_terminal``. When an episode ends in a terminal, or the HDF5 file has
``next_observations`` (the -v2 files), the builder appends one extra step
holding the final observation (``is_last``; dummy action and reward; discount
0); otherwise the last stored step is marked ``is_last``.
:func:`episode_to_transitions` inverts that layout with ``qlearning_dataset``
semantics: ``done`` only on terminals, and the last transition of an episode
that ended by timeout dropped, so the catalog path and the HDF5 path
(:mod:`datasets.offline_rl.d4rl`) give the same transitions.

TensorFlow is not installed here: the catalog builder's feature spec names
``tf.bool``/``tf.int32``/``tf.string`` and its HDF5 reader ``tf.io.gfile``.
:func:`tf_free` substitutes NumPy dtypes and ``open`` for them when
TensorFlow is missing (with TensorFlow installed nothing is replaced), so the
real builder code runs and writes array_record files that
``tfds.data_source`` reads.
"""

from __future__ import annotations

import contextlib
import importlib.util
import types
from typing import Any, Iterable, Mapping

import numpy as np

from datasets.offline_rl import d4rl

TASKS = ("halfcheetah", "hopper", "walker2d")
CONFIGS = ("v2-random", "v2-medium", "v2-expert", "v2-medium-replay", "v2-medium-expert", "v2-full-replay")


def catalog_name(task: str, config: str) -> str:
  """``("halfcheetah", "v2-medium") -> "d4rl_mujoco_halfcheetah/v2-medium"``."""
  if task not in TASKS:
    raise ValueError(f"d4rl_mujoco has no task {task!r}; allowed: {TASKS}")
  return f"d4rl_mujoco_{task}/{config}"


@contextlib.contextmanager
def tf_free():
  """Lets the catalog's D4RL builder run without TensorFlow (a no-op when it is installed)."""
  if importlib.util.find_spec("tensorflow") is not None:
    yield
    return
  from tensorflow_datasets.d4rl import dataset_builder, dataset_utils  # pylint: disable=g-import-not-at-top

  shim = types.SimpleNamespace(
      bool=np.bool_, int32=np.int32, int64=np.int64, float32=np.float32, float64=np.float64,
      string=np.object_, io=types.SimpleNamespace(gfile=types.SimpleNamespace(GFile=open)),
  )
  saved = (dataset_builder.tf, dataset_utils.tf)
  dataset_builder.tf = dataset_utils.tf = shim
  try:
    yield
  finally:
    dataset_builder.tf, dataset_utils.tf = saved


def episode_to_transitions(steps: Mapping[str, Any], terminate_on_end: bool = False) -> dict[str, np.ndarray]:
  """``qlearning_dataset``-style transitions of one RLDS episode.

  Args:
    steps: the episode's ``steps`` (``observation [T, S]``, ``action [T, A]``,
      ``reward [T]``, ``discount [T]``, ``is_terminal [T]``, ``is_last [T]``).
    terminate_on_end: keep the last transition of an episode that timed out.

  Returns:
    ``observations, actions, next_observations [M, ...]``, ``rewards,
    terminals [M]`` (float32).
  """
  obs = np.asarray(steps["observation"], np.float32)
  act = np.asarray(steps["action"], np.float32)
  rew = np.asarray(steps["reward"], np.float32).reshape(-1)
  term = np.asarray(steps["is_terminal"], bool).reshape(-1)
  disc = np.asarray(steps["discount"], np.float32).reshape(-1)
  t = len(rew)
  empty = {
      "observations": obs[:0], "actions": act[:0], "next_observations": obs[:0],
      "rewards": rew[:0], "terminals": rew[:0],
  }
  if t < 2:
    return empty
  # An appended final step (terminal, or next observation known) has discount 0 and
  # follows the last real transition; without it the last stored step has no successor.
  extra = bool(disc[-1] == 0.0)
  m = t - 1
  done = np.zeros(m, np.float32)
  if extra and term[-1]:
    done[-1] = 1.0
  elif extra and not terminate_on_end:
    m -= 1  # the last transition of a timed-out episode (qlearning_dataset drops it)
  return {
      "observations": obs[:m], "actions": act[:m], "next_observations": obs[1:m + 1],
      "rewards": rew[:m], "terminals": done[:m],
  }


def episodes_to_transitions(episodes: Iterable[Mapping[str, Any]], terminate_on_end: bool = False) -> dict[str, np.ndarray]:
  """Transitions of many RLDS episodes (each a dict with ``steps``), concatenated in order."""
  parts = [episode_to_transitions(e["steps"], terminate_on_end) for e in episodes]
  if not parts:
    raise d4rl.D4RLFormatError("the dataset has no episodes")
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def episode_return(steps: Mapping[str, Any]) -> float:
  """Undiscounted return of an RLDS episode (the appended final step's reward is 0)."""
  return float(np.sum(np.asarray(steps["reward"], np.float64)))


def load(task: str, config: str, data_dir: str | None = None, download: bool = False):
  """Transitions of ``d4rl_mujoco_<task>/<config>`` and the episodes' returns, through ``tfds.data_source``.

  Returns:
    ``(transitions, episode_returns [E])``.

  Args:
    task: ``halfcheetah``, ``hopper`` or ``walker2d``.
    config: e.g. ``v2-medium``.
    data_dir: TFDS data directory (``None``: TFDS's default).
    download: download and prepare if missing (needs the network).
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  with tf_free():
    source = tfds.data_source(catalog_name(task, config), split="train", data_dir=data_dir, download=download)
    episodes = [source[i] for i in range(len(source))]
  return episodes_to_transitions(episodes), np.array([episode_return(e["steps"]) for e in episodes])
