"""VarDE BAI fused by hand as arrays in JAX: the reference point for the sweep's speed.

:func:`make_sweep` is :func:`launch.bench.varde_numpy.varde_vectorised`
written in ``jax.numpy``: all seeds advance one pull at a time as ``[K,
seeds]`` arrays inside one ``lax.scan``, jitted, with the seed axis sharded over
the devices like the project's sweep. It is what a skilled JAX user would
write for this one algorithm, without the per-seed pure functions, ``vmap``
and common random numbers of ``methods.varde`` (one normal draw per pull
instead of three hashes). ``launch.bench.varde_bai`` times it beside the
project's sweep and the NumPy peer, so the table shows whether the sweep's
speed against NumPy is set by its design or by what XLA gives for this
step on the machine. Used only by ``launch.bench``.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from envs import bandits
from launch import mesh as mesh_lib
from launch.bench import varde_numpy


def _normals(keys: jax.Array, t: jax.Array) -> jax.Array:
  """One standard normal per seed for pull ``t``: one ``fold_in`` and one draw (the hand-fused kernel's noise)."""
  return jax.vmap(lambda key: jax.random.normal(jax.random.fold_in(key, t)))(keys)


def _mix32(h: jax.Array) -> jax.Array:
  """murmur3's 32-bit finaliser: a bijection of ``uint32`` that spreads every input bit over the output."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def _hash_normals(words: jax.Array, t: jax.Array) -> jax.Array:
  """One standard normal per seed for pull ``t``: a 32-bit integer hash of (the seed's word, ``t``), inverted by ``ndtri``.

  Not a generator of the project: the floor a cheaper counter-based
  generator than threefry would leave under the kernels (24 random bits per
  normal, its tails cut at about 5.3 standard deviations).
  """
  h = _mix32(words ^ _mix32(t.astype(jnp.uint32) * jnp.uint32(0x9E3779B9) + jnp.uint32(1)))
  u = ((h >> 8).astype(jnp.float32) + 0.5) * (1.0 / (1 << 24))
  return jax.scipy.special.ndtri(u)


NOISES = ("fused", "hash")


def make_sweep(means: np.ndarray, budget: int, mesh: Mesh, *, tau: float = 0.1, warm_start: int = 2,
               var_floor: float = 0.01, noise: str = "fused") -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
  """Jitted ``(stds [N, K], warm [N, K * warm_start], keys [N]) -> recommended arms [N]``.

  ``N`` must be a multiple of the mesh size; every input is sharded over its
  leading axis. Inside, the state is ``[K, N]`` (seeds on the minor axis,
  as the NumPy peer holds it), the greedy score is the NumPy peer's
  log-domain form kept per arm (a pull rescores the pulled arm only), and
  the argmax over arms is unrolled into ``K - 1`` element-wise comparisons
  of ``[N]`` rows, so a pull is element-wise work on whole vectors of seeds.
  ``noise``: each pull's normal from threefry (``"fused"``: one ``fold_in``
  and one draw) or from the 32-bit hash of :func:`_hash_normals`
  (``"hash"``: the whole kernel on a cheaper generator than threefry).
  """
  varde_numpy.check_warm_start(warm_start)
  if noise not in NOISES:
    raise ValueError(f"noise={noise!r}: one of {NOISES}")
  k = len(means)
  means = jnp.asarray(means, jnp.float32)
  n_warm = k * warm_start
  arms = jnp.arange(k)[:, None]

  def argmax_rows(score):
    best, arm = score[0], jnp.zeros(score.shape[1], jnp.int32)
    for i in range(1, k):
      better = score[i] > best
      best, arm = jnp.where(better, score[i], best), jnp.where(better, i, arm)
    return arm

  def sweep(stds, warm, keys):
    stds, warm = stds.T, warm.T
    zeros = jnp.zeros(stds.shape, jnp.float32)
    words = jax.random.key_data(keys)[:, -1] if noise == "hash" else None

    def step(carry, t):
      count, total, total_sq, score = carry
      arm = jnp.where(t < n_warm, warm[jnp.minimum(t, n_warm - 1)], argmax_rows(score))
      hit = arms == arm[None, :]
      eps = _hash_normals(words, t) if noise == "hash" else _normals(keys, t)
      reward = means[:, None] + stds * eps[None, :]
      count, total, total_sq = (count + hit, total + jnp.where(hit, reward, 0.0),
                                total_sq + jnp.where(hit, reward * reward, 0.0))
      # Rescore the pulled arm only (its column entries gathered by the one-hot `hit`).
      n, s1, s2 = (jnp.sum(jnp.where(hit, a, 0.0), axis=0) for a in (count, total, total_sq))
      mean = s1 / n
      var = jnp.maximum((s2 - n * mean * mean) / (n - 1), var_floor)
      new = jnp.where(n < 2, jnp.inf, (2.0 / tau) * mean + jnp.log(var / (n * (n + 1))))
      return (count, total, total_sq, jnp.where(hit, new[None, :], score)), None

    init = (zeros, zeros, zeros, jnp.full(stds.shape, jnp.inf, jnp.float32))
    (count, total, _, _), _ = jax.lax.scan(step, init, jnp.arange(budget))
    return argmax_rows(total / count)

  sharding = mesh_lib.data_sharding(mesh)
  return jax.jit(sweep, in_shardings=(sharding, sharding, sharding), out_shardings=sharding)


DRAWS = ("fused", "common", "hash")


def make_draws(means: np.ndarray, budget: int, mesh: Mesh, *, kind: str) -> Callable[[jax.Array], jax.Array]:
  """Jitted ``keys [N] -> [N]``: only the rewards of ``budget`` pulls per seed, summed.

  The floor under either VarDE kernel: the same scan over pulls and the same
  sharding, with every step reduced to drawing one reward per seed.
  ``kind="fused"`` draws as :func:`make_sweep` does (one ``fold_in`` and one
  normal per pull); ``"common"`` calls the project's reward function,
  ``envs.bandits.pull`` (common random numbers: the noise hashed from the
  run's key, the arm and the pull index), as the project's sweep does;
  ``"hash"`` draws with :func:`_hash_normals` from one 32-bit word of each key.
  """
  if kind not in DRAWS:
    raise ValueError(f"kind={kind!r}: one of {DRAWS}")
  k = len(means)
  arms = bandits.Arms(means=jnp.asarray(means, jnp.float32), stds=jnp.asarray(means, jnp.float32), df=math.inf)

  def draws(keys):
    words = jax.random.key_data(keys)[:, -1] if kind == "hash" else None

    def step(total, t):
      if kind == "common":
        reward = jax.vmap(lambda key: bandits.pull(arms, key, t % k, t // k))(keys)
      elif kind == "hash":
        reward = _hash_normals(words, t)
      else:
        reward = _normals(keys, t)
      return total + reward, None

    return jax.lax.scan(step, jnp.zeros(keys.shape, jnp.float32), jnp.arange(budget))[0]

  sharding = mesh_lib.data_sharding(mesh)
  return jax.jit(draws, in_shardings=sharding, out_shardings=sharding)


def inputs(rng: np.random.Generator, means: np.ndarray, num_seeds: int, mesh: Mesh, *,
           warm_start: int = 2) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Sharded ``(stds, warm, keys)`` drawn as the NumPy peer draws them (stds a permutation of the means)."""
  stds, warm = varde_numpy.draw_problem(rng, means, num_seeds, warm_start=warm_start)
  seeds = rng.integers(0, 2**31 - 1, num_seeds)
  sharding = mesh_lib.data_sharding(mesh)
  keys = jax.device_put(jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.int32)), sharding)
  return (jax.device_put(stds, sharding), jax.device_put(warm.astype(np.int32), sharding), keys)
