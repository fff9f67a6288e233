"""A user's tabular MDP from an ``.npz`` file, checked before any compute.

:func:`load_npz` reads ``P [S, A, S]``, ``reward_mean`` and ``reward_std``
``[S, A]`` and a scalar ``discount``, and builds the simulator with
:func:`envs.mdps.from_dense`. Every way the file can be wrong (not an archive,
compressed data that is corrupt, a missing or non-numeric array, a shape, a
negative probability, a row of ``P`` that does not sum to 1, a value that is
not finite in float32, rewards whose float32 sums would overflow) is an
:class:`MDPFileError` (defined in :mod:`envs.errors`) naming the file, the
array and, where there is one, the index.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib

import numpy as np

from envs import mdps
from envs.errors import MDPFileError
from envs.limits import FLOAT32_MAX
from envs.limits import REWARD_SDS


ARRAYS = ("P", "reward_mean", "reward_std", "discount")
ROW_SUM_TOL = 1e-5  # how far a row of P may sum from 1 (rows are renormalised by envs.mdps.from_dense)
_NPY_MAGIC = b"\x93NUMPY"


def _numbers(name: str, x, pre: str) -> np.ndarray:
  """``x`` as float64; refuses strings, objects and other non-numeric dtypes, naming the array."""
  x = np.asarray(x)
  if x.dtype.kind not in "biuf":
    raise MDPFileError(f"{pre}array {name!r} has dtype {x.dtype}; numbers are needed")
  return x.astype(np.float64)


def _check_float32(name: str, x: np.ndarray, pre: str) -> None:
  """Refuses a NaN or inf, or a value that overflows float32 (the dtype the MDP is computed in), naming its index."""
  with np.errstate(over="ignore"):
    bad = ~np.isfinite(x.astype(np.float32))
  if bad.any():
    idx = tuple(int(i) for i in np.argwhere(bad)[0]) if x.ndim else ()
    value = x[idx] if x.ndim else x
    what = "contains NaN or inf" if not np.isfinite(value) else "overflows float32 (|x| <= 3.4e38, the dtype it is computed in)"
    raise MDPFileError(f"{pre}array {name!r} {what} at index {idx}: {float(value)!r}")


def _check_nonnegative(name: str, x: np.ndarray, pre: str) -> None:
  """Refuses a negative entry, naming the first one's index and value."""
  neg = x < 0
  if neg.any():
    idx = tuple(int(i) for i in np.argwhere(neg)[0])
    n = int(neg.sum())
    raise MDPFileError(f"{pre}array {name!r} has {n} negative entr{'y' if n == 1 else 'ies'}; the first at index "
                       f"{idx}: {float(x[idx])!r}")


def check_scale(reward_mean, reward_std, gamma, samples: int = 1, where: str = "") -> None:
  """Refuses rewards too large for the float32 sums an allocation computes.

  Per pair, BPI sums up to ``samples`` squared rewards and squares values up to
  ``B / (1 - gamma)``, with ``B = max(|reward_mean| + REWARD_SDS * reward_std)``;
  both must stay finite in float32.

  Args:
    reward_mean: ``[S, A]`` mean rewards.
    reward_std: ``[S, A]`` reward standard deviations.
    gamma: the discount.
    samples: the most samples of one pair (the largest budget).
    where: what to name in errors (a file path).
  """
  pre = f"{where}: " if where else ""
  rm, rs = np.asarray(reward_mean, np.float64), np.asarray(reward_std, np.float64)
  if not rm.size:
    return
  bound = float(np.max(np.abs(rm) + REWARD_SDS * rs))
  limit = min(math.sqrt(FLOAT32_MAX / max(samples, 1)), math.sqrt(FLOAT32_MAX) * (1.0 - float(gamma)))
  if bound > limit:
    raise MDPFileError(
        f"{pre}rewards up to |reward_mean| + {REWARD_SDS:g} reward_std = {bound:.3g} overflow the float32 sums of "
        f"squared rewards ({samples} samples) and values (discount {float(gamma):g}); at most {limit:.3g} is "
        "allowed: rescale the rewards")


def check_arrays(p, reward_mean, reward_std, gamma, where: str = "", samples: int = 1) -> None:
  """Validates a dense tabular MDP; raises :class:`MDPFileError` naming the array (and the index).

  ``samples`` (the most samples of one pair) bounds the rewards through :func:`check_scale`.
  """
  pre = f"{where}: " if where else ""
  p_float16 = np.asarray(p).dtype == np.float16
  p, rm, rs, g = (_numbers(n, x, pre) for n, x in zip(ARRAYS, (p, reward_mean, reward_std, gamma)))
  for name, x in zip(ARRAYS, (p, rm, rs, g)):
    _check_float32(name, x, pre)
  if p.ndim != 3 or p.shape[0] != p.shape[2]:
    raise MDPFileError(f"{pre}array 'P' must have shape [S, A, S]; got {p.shape}")
  s, a, _ = p.shape
  if not s or not a:
    raise MDPFileError(f"{pre}array 'P' has shape {p.shape}: an MDP needs at least one state and one action")
  for name, x in (("reward_mean", rm), ("reward_std", rs)):
    if x.shape != (s, a):
      raise MDPFileError(f"{pre}array {name!r} must have shape [S, A] = {(s, a)}; got {x.shape}")
  _check_nonnegative("P", p, pre)
  row_sums = p.sum(-1)
  rows = np.abs(row_sums - 1.0) > ROW_SUM_TOL
  if rows.any():
    bad = [tuple(int(i) for i in ix) for ix in np.argwhere(rows)[:5]]
    sums = [float(row_sums[ix]) for ix in bad]
    hint = ""
    if p_float16 and max(abs(x - 1.0) for x in sums) < 1e-2:
      hint = "; it is stored as float16, whose rounding (about 1e-3) exceeds that: store it as float32 or float64"
    raise MDPFileError(f"{pre}array 'P': rows (s, a) = {bad} sum to {[f'{x:.7g}' for x in sums]}, not 1 "
                       f"(within {ROW_SUM_TOL:g}){hint}")
  _check_nonnegative("reward_std", rs, pre)
  if g.ndim != 0 or not 0 <= float(g) < 1:
    raise MDPFileError(f"{pre}array 'discount' must be a scalar in [0, 1); got {gamma!r}")
  if float(np.float32(g)) >= 1:  # values are computed in float32, where 1 / (1 - discount) would be infinite
    raise MDPFileError(f"{pre}array 'discount' {float(g)!r} rounds to 1.0 in float32 (the dtype the MDP is "
                       f"computed in); at most {float(np.nextafter(np.float32(1), np.float32(0)))!r}")
  check_scale(rm, rs, float(g), samples, where)


def _read_npz(path: str) -> dict[str, np.ndarray]:
  """The four arrays of an ``.npz`` file; every way it can be unreadable is an :class:`MDPFileError`."""
  how = "write it with np.savez(path, P=..., reward_mean=..., reward_std=..., discount=...)"
  if os.path.isdir(path):
    raise MDPFileError(f"{path} is a directory, not an .npz file; {how}")
  try:
    with open(path, "rb") as fh:
      head = fh.read(len(_NPY_MAGIC))
  except OSError as e:
    raise MDPFileError(f"{path} cannot be read ({e.strerror or e})") from e
  if head == _NPY_MAGIC:
    raise MDPFileError(f"{path} holds a single array (an .npy file), not an .npz archive of named arrays; {how}")
  if not zipfile.is_zipfile(path):
    raise MDPFileError(f"{path} is not an .npz archive (not a zip file of arrays); {how}")
  try:
    f = np.load(path, allow_pickle=False)
  except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    raise MDPFileError(f"{path} is not a readable .npz archive ({type(e).__name__}: "
                       f"{' '.join(str(e).split())[:120]}); {how}") from e
  with f:
    missing = [k for k in ARRAYS if k not in f.files]
    if missing:
      raise MDPFileError(f"{path}: missing arrays {missing}; found {sorted(f.files)}")
    arrays = {}
    for k in ARRAYS:
      try:
        arrays[k] = f[k]
      except ValueError as e:  # object arrays need pickle, which is never enabled
        raise MDPFileError(f"{path}: array {k!r} holds Python objects (dtype object); numbers are needed") from e
      except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:  # zlib: np.savez_compressed data
        raise MDPFileError(f"{path}: array {k!r} cannot be read ({type(e).__name__}: {e}); {how}") from e
  return arrays


def load_npz(path: str, *, s0: int = 0, df: float = math.inf, samples: int = 1) -> mdps.TabularMDP:
  """A user's MDP from ``.npz`` arrays ``P [S,A,S]``, ``reward_mean``, ``reward_std`` ``[S,A]``, ``discount``.

  Every array must hold numbers that are finite in float32 (the dtype the
  MDP is computed in); ``samples`` (the largest budget) bounds the rewards
  through :func:`check_scale`.

  Raises:
    MDPFileError: naming the file, and the array and index where there is one.
  """
  arrays = _read_npz(path)
  check_arrays(arrays["P"], arrays["reward_mean"], arrays["reward_std"], arrays["discount"], where=path,
               samples=samples)
  if not 0 <= s0 < arrays["P"].shape[0]:
    raise MDPFileError(f"{path}: start state {s0} is not a state of 'P' (S = {arrays['P'].shape[0]})")
  return mdps.from_dense(arrays["P"], arrays["reward_mean"], arrays["reward_std"], float(arrays["discount"]), s0=s0, df=df)
