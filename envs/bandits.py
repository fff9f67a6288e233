"""Stochastic multi-armed bandit environments as pure JAX functions.

Rewards use *common random numbers*: the ``n``-th pull of arm ``k`` in a run
keyed by ``key`` always returns the same value, whichever algorithm asks for it
and whatever it pulled before. Algorithms compared on the same key therefore
see the same reward tables, which is what makes paired comparisons between
algorithms (``launch/experiments/varde/bai.py``) sharp.

The problem instances E1-E4 are those of the VarDE paper (Luong et al., ICML
2026, Section 5, experiments E1-E4): Gaussian arms whose standard deviations equal
the means, with the standard deviations randomly permuted across arms in every
run, so that noise level and quality are not aligned.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from flax import struct
import jax
import jax.numpy as jnp
import numpy as np

from envs.limits import FLOAT32_MAX
from envs.limits import REWARD_SDS

STD_MODES = ("shuffled", "equal_mean", "fixed")
NOISE_KINDS = ("gaussian", "student_t")


@struct.dataclass
class Arms:
  """One bandit instance.

  Attributes:
    means: ``[K]`` arm means.
    stds: ``[K]`` arm standard deviations (the reward noise scale).
    df: static degrees of freedom of the Student-t noise; ``math.inf`` means
      Gaussian noise. The t noise is rescaled to have standard deviation
      ``stds`` exactly (requires ``df > 2``).
  """

  means: jax.Array  # [K]
  stds: jax.Array  # [K]
  df: float = struct.field(pytree_node=False, default=math.inf)


class Problem(NamedTuple):
  """A named problem: the arm means and the budgets the paper uses."""

  means: tuple[float, ...]
  budgets: tuple[int, ...]


def _e4_means() -> tuple[float, ...]:
  return (0.4,) + tuple(0.4 - 0.9**i for i in range(10, 23))


PROBLEMS: dict[str, Problem] = {
    "E1": Problem((0.3, 0.22, 0.22, 0.22, 0.2, 0.2, 0.2, 0.15, 0.15, 0.15), (150,)),
    "E2": Problem(tuple(0.4 - 0.025 * i for i in range(15)), (500, 2000)),
    "E3": Problem((0.3, 0.28) + (0.17,) * 18, (2000,)),
    "E4": Problem(_e4_means(), (200,)),
}


def make_arms(
    key: jax.Array,
    means: jax.Array,
    *,
    std_mode: str = "shuffled",
    noise: str = "gaussian",
    df: float = 3.0,
    stds: jax.Array | None = None,
) -> Arms:
  """Builds one bandit instance.

  Args:
    key: PRNG key, used only to permute the standard deviations
      (``std_mode="shuffled"``).
    means: ``[K]`` arm means; they must be positive, since the standard
      deviations are taken equal to them.
    std_mode: ``"shuffled"`` (std = a random permutation of the means, the
      paper's setting), ``"equal_mean"`` (std_k = mean_k) or ``"fixed"``
      (std_k = stds_k, or mean_k without ``stds``).
    noise: ``"gaussian"`` or ``"student_t"`` (heavy tails, unit-variance
      rescaled Student-t with ``df`` degrees of freedom).
    df: degrees of freedom for ``noise="student_t"``; must exceed 2.
    stds: optional ``[K]`` standard deviations to use instead of the means
      (a user's own problem): ``"shuffled"`` permutes them, ``"fixed"``
      keeps them; ``"equal_mean"`` does not accept them.

  Returns:
    The instance.
  """
  if std_mode not in STD_MODES:
    raise ValueError(f"std_mode={std_mode!r}; allowed: {STD_MODES}")
  if noise not in NOISE_KINDS:
    raise ValueError(f"noise={noise!r}; allowed: {NOISE_KINDS}")
  if noise == "student_t" and not df > 2:
    raise ValueError(f"df={df} must be > 2 for a finite variance")
  if stds is not None and std_mode == "equal_mean":
    raise ValueError('std_mode="equal_mean" takes the stds from the means; stds were given')
  means = jnp.asarray(means, jnp.float32)
  base = means if stds is None else jnp.asarray(stds, jnp.float32)
  stds = jax.random.permutation(key, base) if std_mode == "shuffled" else base
  return Arms(means=means, stds=stds, df=float(df) if noise == "student_t" else math.inf)


def pull(arms: Arms, key: jax.Array, arm: jax.Array, index: jax.Array) -> jax.Array:
  """Reward of the ``index``-th pull (0-based) of ``arm``.

  Args:
    arms: the instance.
    key: the run's reward key; the noise is a pure function of
      ``(key, arm, index)`` (common random numbers).
    arm: scalar int, the arm pulled.
    index: scalar int, how many times ``arm`` was pulled before.

  Returns:
    Scalar float32 reward ``means[arm] + stds[arm] * eps``.
  """
  k = jax.random.fold_in(jax.random.fold_in(key, arm), index)
  if math.isinf(arms.df):
    eps = jax.random.normal(k)
  else:  # Student-t rescaled to unit variance.
    eps = jax.random.t(k, arms.df) * math.sqrt((arms.df - 2.0) / arms.df)
  return arms.means[arm] + arms.stds[arm] * eps


def best_arm(arms: Arms) -> jax.Array:
  """Index of the arm with the largest mean (ties: lowest index)."""
  return jnp.argmax(arms.means)


def check_custom(means, stds, std_mode: str, budget: int = 1) -> list[tuple[str, str]]:
  """Problems of a user-defined bandit: ``(key, message)`` pairs (``[]`` if fine).

  The rules: the best arm must be unique in float32 (the dtype the means are
  computed in; with tied best means the probability of error is not
  defined), at least one std must be positive (an arm with std 0 is
  deterministic; with every std 0 in float32 the Neyman shares ``sigma_k / sum sigma`` are
  0/0 and one pull per arm identifies the best), and rewards must keep the
  float32 sums of ``budget`` squared rewards finite (rewards taken within
  ``REWARD_SDS`` standard deviations of their mean).

  Args:
    means: the arm means (a sequence of floats).
    stds: their standard deviations, or an empty sequence to derive them
      from the means (``std_mode``).
    std_mode: as in :func:`make_arms`.
    budget: the largest budget (pulls) the bandit is run with.
  """
  out = []
  means, stds = list(means), list(stds)
  if len(means) < 2:
    out.append(("means", f"a bandit needs at least two arms; got {len(means)} means"))
  if stds and len(stds) != len(means):
    out.append(("stds", f"lengths differ: {len(means)} means but {len(stds)} stds"))
  if stds and std_mode == "equal_mean":
    out.append(("std_mode", 'std_mode="equal_mean" takes the stds from the means; use "fixed" or "shuffled" with stds'))
  scale = stds if stds else means
  what, key = ("stds", "stds") if stds else ("means (used as stds)", "means")
  bad = [i for i, s in enumerate(scale) if not s >= 0]
  if bad:
    out.append((key, f"negative std: {what} at arms {bad} are < 0"))
  with np.errstate(over="ignore", invalid="ignore"):
    m32 = np.asarray(means, np.float32)
  if len(means) >= 2 and np.all(np.isfinite(m32)):
    best = np.flatnonzero(m32 == m32.max()).tolist()
    if len(best) > 1:
      out.append(("means", f"arms {best} tie for the best mean {float(m32.max())!r} (in float32, the dtype it is "
                           "computed in): the best arm, and so the error rate, is not defined; make one mean larger"))
  with np.errstate(over="ignore", under="ignore"):
    all_zero = bool(scale) and not bad and bool(np.all(np.asarray(scale, np.float32) == 0))
  if all_zero:
    out.append((key, "every std is 0 in float32 (the dtype it is computed in): a noiseless bandit is identified by "
                     "one pull per arm and its Neyman shares sigma_k / sum(sigma) are 0/0; give at least one arm a "
                     "positive std"))
  if not bad and (not stds or len(stds) == len(means)) and means:
    bound = max(abs(m) for m in means) + REWARD_SDS * max(scale)  # std_mode may permute the stds
    limit = math.sqrt(FLOAT32_MAX / max(budget, 1))
    if bound > limit:
      out.append((key, f"rewards up to max |mean| + {REWARD_SDS:g} max std = {bound:.3g} overflow the float32 sum of "
                       f"{budget} squared rewards; at most {limit:.3g} is allowed: rescale the rewards"))
  return out


def problem_means(name: str) -> np.ndarray:
  """The arm means of a named problem (``E1``..``E4``)."""
  if name not in PROBLEMS:
    raise KeyError(f"unknown problem {name!r}; allowed: {sorted(PROBLEMS)}")
  return np.asarray(PROBLEMS[name].means, np.float32)
