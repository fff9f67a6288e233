"""Checks of a user's D4RL-format file that the REG experiment makes beyond the format's own (``d4rl.validate``), and
the float32 check of the scaled rewards of every source."""

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


def check_columns(rows: dict, source: str) -> None:
  """``observations`` and ``actions`` have at least one column (a file of any dimensions, ``hdf5_task=none``)."""
  for k in ("observations", "actions"):
    if np.shape(rows[k])[1] == 0:
      raise d4rl.D4RLFormatError(f"{source}: '{k}' has 0 columns (shape {np.shape(rows[k])}); each row needs at "
                                 f"least one {k[:-1]} value to train a policy")


def check_actions(rows: dict, source: str, tolerance: float = 1e-4) -> None:
  """Every action lies in ``[-1, 1]`` (up to ``tolerance``), the range the policies act in.

  The policies squash their actions with tanh, as D4RL's MuJoCo tasks expect,
  and the loader clips the dataset's actions to ``+-data.action_clip`` just
  inside that range; an action well outside it would be changed silently.
  """
  a = np.abs(np.asarray(rows["actions"]))
  if a.size and float(a.max()) > 1.0 + tolerance:
    row, col = np.unravel_index(int(np.argmax(a)), a.shape)
    raise d4rl.D4RLFormatError(
        f"{source}: 'actions' reach {float(rows['actions'][row, col]):g} (row {row}, column {col}); the policies act "
        "in [-1, 1] (tanh-squashed, as D4RL's MuJoCo tasks) and the loader would clip such actions silently: "
        "rescale them to [-1, 1]")


IQL_SCALE = "IQL's trajectory-return scale 1000 / (max - min episode return)"
IQL_FALLBACK = (f"{IQL_SCALE}, used by --config.data.reward_scale=reference when --config.data.hdf5_random_return "
                "and --config.data.hdf5_expert_return are both 0")


def scale_origin(config, name: str, random_return: float, expert_return: float) -> str:
  """Where ``data.reward_scale``'s scale of dataset ``name`` comes from, for errors."""
  mode = config.data.reward_scale
  if mode == "traj_return":
    return f"{IQL_SCALE}, --config.data.reward_scale=traj_return"
  if mode != "reference":
    return f"--config.data.reward_scale={mode}"
  if config.data.source == "d4rl_hdf5" and config.data.get("hdf5_file", ""):
    refs = "--config.data.hdf5_random_return and --config.data.hdf5_expert_return"
  elif config.data.source == "generated":
    refs = f"the reference returns generated with {name}"
  else:
    refs = f"D4RL's reference returns of {name}"
  return (f"1000 / |expert - random return| with random {random_return:g} and expert {expert_return:g} "
          f"({refs}), --config.data.reward_scale=reference")


def scaled_rewards(rewards: np.ndarray, scale: float, source: str, origin: str) -> np.ndarray:
  """``rewards * scale`` in float32, or an error naming the scale, where it comes from and the key to set instead."""
  with np.errstate(over="ignore", invalid="ignore"):
    out = (rewards * scale).astype(np.float32)
  bad = ~np.isfinite(out)
  if bad.any():
    i = int(np.argmax(bad))
    raise d4rl.D4RLFormatError(
        f"{source}: the reward scale {scale:.4g} ({origin}) makes {int(bad.sum())} of {len(out)} scaled 'rewards' "
        f"non-finite in float32 (the first: {float(rewards[i]):.4g} * {scale:.4g}); pass "
        "--config.data.reward_scale=none to train on the raw rewards")
  return out
