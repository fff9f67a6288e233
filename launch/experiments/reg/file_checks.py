"""Checks of a user's D4RL-format file that the REG experiment makes beyond the format's own (``d4rl.validate``)."""

from __future__ import annotations

import numpy as np

from datasets.offline_rl import d4rl


def check_flags(rows: dict, source: str) -> None:
  """``terminals`` and ``timeouts`` hold 0 and 1 only (a NaN or a 0.5 would be read as True)."""
  for k in ("terminals", "timeouts"):
    x = np.asarray(rows[k])
    bad = np.flatnonzero(~((x == 0) | (x == 1)))
    if len(bad):
      raise d4rl.D4RLFormatError(f"{source}: '{k}' holds {x[bad[0]].item()!r} at index {int(bad[0])} "
                                 f"({len(bad)} such rows); a flag is 0 or 1")


def user_reward_scale(rows: dict, source: str) -> float:
  """IQL's trajectory-return scale of a user's file, or an error that says which key to set instead."""
  try:
    return d4rl.reward_scale(rows)
  except d4rl.D4RLFormatError as e:
    raise d4rl.D4RLFormatError(
        f"{source}: {e} (IQL's scale 1000 / (max - min episode return) needs two episodes of different returns; "
        "episodes end at 'terminals' or 'timeouts'): pass --config.data.reward_scale=none to train on the raw "
        "rewards, or --config.data.hdf5_random_return / hdf5_expert_return with reward_scale=reference") from e
