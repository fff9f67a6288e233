"""Evidence estimates: Laplace against the closed form, masking, BIC; fit consistency."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np

from methods.model_smc import evidence as ev


def _linear_gaussian(seed, n=30, d=4):
  rng = np.random.default_rng(seed)
  design = rng.normal(size=(n, d)).astype(np.float32)
  mu = rng.normal(size=d).astype(np.float32)
  s = rng.uniform(0.5, 2.0, d).astype(np.float32)
  sigma = 0.7
  theta = mu + s * rng.normal(size=d)
  y = (design @ theta + sigma * rng.normal(size=n)).astype(np.float32)
  return jnp.asarray(design), jnp.asarray(mu), jnp.asarray(s), sigma, jnp.asarray(y)


def _normal_logpdf(x, m, s):
  return -0.5 * ((x - m) / s) ** 2 - jnp.log(s) - 0.5 * math.log(2 * math.pi)


@jax.jit
def _laplace_vs_exact(a, mu, s, sigma, y):
  def log_joint(theta):
    return jnp.sum(_normal_logpdf(y, a @ theta, sigma)) + jnp.sum(_normal_logpdf(theta, mu, s))

  precision = a.T @ a / sigma**2 + jnp.diag(1.0 / s**2)
  theta_map = jnp.linalg.solve(precision, a.T @ y / sigma**2 + mu / s**2)
  lap = ev.laplace(log_joint, theta_map)
  return lap, ev.gaussian_log_evidence(y, a, mu, jnp.diag(s**2), sigma**2), precision


def test_laplace_equals_the_closed_form_on_a_linear_gaussian_model():
  for seed in range(5):
    a, mu, s, sigma, y = _linear_gaussian(seed)
    lap, exact, precision = _laplace_vs_exact(a, mu, s, sigma, y)
    np.testing.assert_allclose(float(lap.log_evidence), float(exact), rtol=1e-5, atol=2e-3)
    assert bool(lap.positive_definite) and float(lap.dim) == a.shape[1]
    chex.assert_trees_all_close(lap.neg_hessian, precision, rtol=1e-4, atol=1e-3)


def test_inactive_coordinates_drop_out():
  a, mu, s, sigma, y = _linear_gaussian(7)

  def log_joint(phi):  # phi = [theta (4), two unused coordinates]
    theta = phi[:4]
    return jnp.sum(_normal_logpdf(y, a @ theta, sigma)) + jnp.sum(_normal_logpdf(theta, mu, s))

  precision = a.T @ a / sigma**2 + jnp.diag(1.0 / s**2)
  theta_map = jnp.linalg.solve(precision, a.T @ y / sigma**2 + mu / s**2)
  phi = jnp.concatenate([theta_map, jnp.array([3.0, -1.0])])
  mask = jnp.array([1, 1, 1, 1, 0, 0], jnp.float32)
  lap = jax.jit(lambda p, m: ev.laplace(log_joint, p, m))(phi, mask)
  exact = ev.gaussian_log_evidence(y, a, mu, jnp.diag(s**2), sigma**2)
  np.testing.assert_allclose(float(lap.log_evidence), float(exact), rtol=1e-5, atol=2e-3)
  assert float(lap.dim) == 4
  np.testing.assert_allclose(np.asarray(lap.neg_hessian)[4:, 4:], np.eye(2))


def test_bic_and_failures():
  assert float(ev.bic(jnp.float32(-10.0), jnp.float32(3.0), 100)) == np.float32(-10.0 - 1.5 * math.log(100))
  assert np.isneginf(float(ev.bic(jnp.float32(jnp.nan), jnp.float32(3.0), 100)))
  lap = jax.jit(lambda p: ev.laplace(lambda q: jnp.sum(q) * jnp.nan, p))(jnp.zeros(2))
  assert np.isneginf(float(lap.log_evidence))


def test_laplace_is_jittable_and_vmappable():
  a, mu, s, sigma, y = _linear_gaussian(3)

  def log_joint(theta, yy):
    return jnp.sum(_normal_logpdf(yy, a @ theta, sigma)) + jnp.sum(_normal_logpdf(theta, mu, s))

  ys = jnp.stack([y, y + 0.1, y - 0.2])
  thetas = jnp.zeros((3, 4))
  f = jax.jit(jax.vmap(lambda th, yy: ev.laplace(lambda t: log_joint(t, yy), th).log_evidence))
  out = f(thetas, ys)
  chex.assert_shape(out, (3,))
  assert np.all(np.isfinite(np.asarray(out)))
