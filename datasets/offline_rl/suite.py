"""D4RL-style composition of collected episodes (NumPy).

D4RL's locomotion datasets (Fu et al., 2020, section 5): ``random`` (uniform
actions), ``medium`` (a policy at about a third of expert performance),
``expert``, ``medium-replay`` (the replay buffer of training up to the medium
policy: a curriculum from random to medium behaviour) and ``medium-expert``
(medium and expert rows concatenated). Collectors (JAX environments, MuJoCo)
give padded ``[E, T]`` episode arrays; :func:`episodes_to_rows` turns them
into D4RL rows and :func:`concat` joins row sets.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from datasets.offline_rl import d4rl


def episodes_to_rows(
    observations, actions, rewards, next_observations, terminals, timeouts, valid
) -> dict[str, np.ndarray]:
  """D4RL rows ``[N, ...]`` from padded ``[E, T, ...]`` episodes (``valid [E, T]`` marks real steps).

  Episodes are laid out one after another, in order; an episode cut short
  by the collection's step budget ends without a terminal or a timeout flag
  only if it is the last one.
  """
  valid = np.asarray(valid, bool)
  take = lambda x, dtype: np.asarray(x, dtype)[valid]  # noqa: E731  row-major: episode by episode
  return {
      "observations": take(observations, np.float32),
      "actions": take(actions, np.float32),
      "rewards": take(rewards, np.float32),
      "next_observations": take(next_observations, np.float32),
      "terminals": take(terminals, bool),
      "timeouts": take(timeouts, bool),
  }


def concat(parts: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
  """Row sets joined in order (``medium-expert`` = ``concat([medium, expert])``)."""
  keys = parts[0].keys()
  return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in keys}


def truncate(rows: Mapping[str, np.ndarray], num_rows: int) -> dict[str, np.ndarray]:
  """The first ``num_rows`` rows; the cut episode's last row is flagged as a timeout."""
  out = {k: np.asarray(v)[:num_rows].copy() for k, v in rows.items()}
  n = len(out["rewards"])
  if n and not (out["terminals"][-1] or out["timeouts"][-1]):
    out["timeouts"][-1] = True
  return out


def summary(rows: Mapping[str, np.ndarray], random_return: float, expert_return: float) -> dict:
  """Size and behaviour quality of a dataset (normalised returns of its episodes)."""
  ret = d4rl.episode_returns(rows)
  score = d4rl.normalized_score(ret, random_return, expert_return)
  return {
      "transitions": int(len(rows["rewards"])),
      "episodes": int(len(ret)),
      "terminals": int(np.sum(rows["terminals"])),
      "return_mean": float(ret.mean()),
      "normalized_return_mean": float(score.mean()),
      "normalized_return_min": float(score.min()),
      "normalized_return_max": float(score.max()),
  }
