"""``methods.common.linalg``: vmap of a wrapped decomposition is a loop of one-matrix calls with the batched results."""

import chex
import jax
import jax.numpy as jnp
import numpy as np

from methods.common import linalg


def _spd(key, shape):
  a = jax.random.normal(key, shape)
  return a @ jnp.swapaxes(a, -1, -2) + shape[-1] * jnp.broadcast_to(jnp.eye(shape[-1]), shape)


def test_vmap_matches_the_batched_kernels_and_calls_them_one_matrix_at_a_time():
  h = _spd(jax.random.key(0), (3, 5, 6, 6))
  w = jax.jit(jax.vmap(jax.vmap(linalg.eigvalsh)))(h)
  chex.assert_shape(w, (3, 5, 6))
  np.testing.assert_allclose(w, jnp.linalg.eigvalsh(h), rtol=1e-5, atol=1e-5)
  vals, vecs = jax.vmap(linalg.eigh)(h[0])
  np.testing.assert_allclose(vecs @ (vals[..., None] * jnp.swapaxes(vecs, -1, -2)), h[0], rtol=1e-4, atol=1e-4)
  # Each LAPACK custom call in the compiled program sees one [6, 6] matrix, not the batch.
  hlo = jax.jit(jax.vmap(jax.vmap(linalg.eigh))).lower(h).as_text()
  calls = [line for line in hlo.splitlines() if "syevd" in line and "custom_call" in line]
  assert calls and all("tensor<6x6xf32>" in c and "tensor<5x" not in c and "tensor<3x" not in c for c in calls), calls


def test_unbatched_arguments_are_shared_and_forward_derivatives_flow():
  a = _spd(jax.random.key(1), (4, 4))
  b = jax.random.normal(jax.random.key(2), (7, 4))
  x = jax.vmap(linalg.solve, in_axes=(None, 0))(a, b)
  np.testing.assert_allclose(x, jnp.linalg.solve(a, b.T).T, rtol=1e-4, atol=1e-5)
  f = lambda s: jnp.sum(jax.vmap(linalg.solve, in_axes=(None, 0))(a * s, b))
  g = lambda s: jnp.sum(jnp.linalg.solve(a * s, b.T))
  np.testing.assert_allclose(jax.jvp(f, (1.5,), (1.0,)), jax.jvp(g, (1.5,), (1.0,)), rtol=1e-4)
