"""A user's tabular MDP from its arrays, checked before any compute.

:func:`from_arrays` takes ``P [S, A, S]``, ``reward_mean`` and
``reward_std`` ``[S, A]`` and a scalar ``discount`` (read from an ``.npz``
file by :func:`datasets.npz_files.read_arrays`, which names every way the
archive itself can be unreadable) and builds the simulator with
:func:`envs.mdps.from_dense`. Every way the arrays can be wrong (a missing or
non-numeric array, a shape, a negative probability, a row of ``P`` that does
not sum to 1, a value that is not finite in float32, rewards whose float32
sums would overflow) is an :class:`MDPFileError` (defined in
:mod:`envs.errors`) naming the file, the array and, where there is one, the
index.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from envs import mdps
from envs.errors import MDPFileError
from envs.limits import FLOAT32_MAX
from envs.limits import REWARD_SDS


ARRAYS = ("P", "reward_mean", "reward_std", "discount")
HOW = "write it with np.savez(path, P=..., reward_mean=..., reward_std=..., discount=...)"
ROW_SUM_TOL = 1e-5  # how far a row of P may sum from 1 (rows are renormalised by envs.mdps.from_dense)


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


def from_arrays(arrays: Mapping[str, np.ndarray], *, where: str = "", s0: int = 0, df: float = math.inf,
                samples: int = 1) -> mdps.TabularMDP:
  """A user's MDP from arrays ``P [S,A,S]``, ``reward_mean``, ``reward_std`` ``[S,A]`` and ``discount``.

  ``arrays`` is what a reader returns for :data:`ARRAYS` (for an ``.npz``
  archive, :func:`datasets.npz_files.read_arrays`; the launcher's
  ``launch.experiments.varde.bpi_envs.load_mdp_file`` composes the two).
  Every array must hold numbers that are finite in float32 (the dtype the MDP
  is computed in); ``samples`` (the largest budget) bounds the rewards through
  :func:`check_scale`.

  Raises:
    MDPFileError: naming ``where`` (the file), and the array and index where there is one.
  """
  missing = [k for k in ARRAYS if k not in arrays]
  if missing:
    raise MDPFileError(f"{where or 'the MDP'}: missing arrays {missing}; found {sorted(arrays)}; {HOW}")
  p, rm, rs, g = (arrays[k] for k in ARRAYS)
  check_arrays(p, rm, rs, g, where=where, samples=samples)
  s = np.shape(p)[0]
  if not 0 <= s0 < s:
    raise MDPFileError(f"{where or 'the MDP'}: start state {s0} is not a state of 'P' (S = {s})")
  return mdps.from_dense(p, rm, rs, float(g), s0=s0, df=df)
