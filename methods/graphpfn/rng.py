"""Many random arrays from one draw.

Each ``jax.random`` call adds its own threefry kernel to the compiled
program; drawing every array of a step from one flat draw keeps XLA's
compile time of the prior sampler in seconds instead of minutes.

The draws use threefry's sequential counter layout
(``jax.threefry_partitionable(False)``): on CPUs the partitionable layout
(JAX's default) costs about ten times as much per number, and these arrays
are never split over devices (a batch of graphs is sharded by key, each
graph's numbers come from its own key). A sample is still a function of its
key alone, whatever the batch or the device count.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def _split(flat, shapes):
  out, start = [], 0
  for shape in shapes:
    size = math.prod(shape)
    out.append(flat[start:start + size].reshape(shape))
    start += size
  return out


def uniforms(key: jax.Array, *shapes: tuple[int, ...]) -> list[jax.Array]:
  """Independent ``U[0, 1)`` arrays of the given shapes."""
  with jax.threefry_partitionable(False):
    return _split(jax.random.uniform(key, (sum(math.prod(s) for s in shapes),)), shapes)


def normals(key: jax.Array, *shapes: tuple[int, ...]) -> list[jax.Array]:
  """Independent standard normal arrays of the given shapes."""
  with jax.threefry_partitionable(False):
    return _split(jax.random.normal(key, (sum(math.prod(s) for s in shapes),)), shapes)


def randint(u: jax.Array, lo, hi) -> jax.Array:
  """``randint(lo, hi)`` (``hi`` inclusive) from uniforms ``u``."""
  return jnp.clip(lo + jnp.floor(u * (hi - lo + 1)), lo, hi).astype(jnp.int32)


def uniform(u: jax.Array, lo, hi) -> jax.Array:
  return lo + u * (hi - lo)


def log_uniform(u: jax.Array, lo, hi) -> jax.Array:
  return jnp.exp(jnp.log(lo) + u * (jnp.log(hi) - jnp.log(lo)))
