"""Does the graph matter? A ridge probe with and without neighbour-averaged features.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489) argues that its prior's
targets depend on the graph through the SCM's graph convolutions. This probe
measures it: ridge regression (one-hot targets for classes) on the inputs
and 128 random ReLU features of them, fitted on the training nodes and
scored on the other nodes (R^2 for regression, accuracy for classes), with
``[X, 1]`` and with ``[X, mean_N(X), mean_N(mean_N(X)), 1]`` (SGC-style propagated
features; Wu et al., 2019). With ``graph_conv_ratio = 0`` the neighbours'
features carry no information about a node's label; with a high ratio they do.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from envs import graphs
from methods.graphpfn import tasks
from methods.graphpfn.hparams import AttributeConfig, StructureConfig


class ProbeResult(NamedTuple):
  acc_plain: jax.Array  # [] test accuracy (R^2 for regression) without the graph
  acc_graph: jax.Array  # [] the same with neighbour-averaged features
  usable: jax.Array  # [] bool: a valid sample with >= 2 test nodes


def _cg_solve(a, b, iterations=100):
  """``a^-1 b`` for SPD ``a [D, D]``, each column of ``b [D, K]`` by Jacobi-preconditioned conjugate gradients.

  Matmuls only: LAPACK solves inside a computation sharded over CPU devices
  hang in jaxlib 0.10.2, and the probe runs sharded.
  """
  inv = 1.0 / jnp.maximum(jnp.diag(a), 1e-12)[:, None]
  x = jnp.zeros_like(b)
  r = b
  z = inv * r
  p = z

  def step(carry, _):
    x, r, z, p = carry
    ap = a @ p
    rz = jnp.sum(r * z, axis=0, keepdims=True)
    alpha = rz / jnp.maximum(jnp.sum(p * ap, axis=0, keepdims=True), 1e-30)
    x, r = x + alpha * p, r - alpha * ap
    z_new = inv * r
    beta = jnp.sum(r * z_new, axis=0, keepdims=True) / jnp.maximum(rz, 1e-30)
    return (x, r, z_new, z_new + beta * p), None

  (x, _, _, _), _ = jax.lax.scan(step, (x, r, z, p), None, length=iterations)
  return x


def _ridge_score(z, zmask, y, train, test, task, num_classes, cmax, lam, width=128):
  """Test accuracy (classification) or R^2 (regression) of ridge on ``z`` and random ReLU features of it."""
  z = jnp.where(zmask[None, :], z, 0.0)
  # Random ReLU features (fixed key: both arms see the same projection of shared columns).
  w = jax.random.normal(jax.random.key(0), (z.shape[1], width)) / jnp.sqrt(jnp.maximum(jnp.sum(zmask), 1.0))
  z = jnp.concatenate([z, jax.nn.relu(z @ w)], axis=1)
  regression = task == tasks.REGRESSION
  target = jnp.where(regression, jnp.zeros((1, cmax)).at[0, 0].set(1.0) * y[:, None],
                     jax.nn.one_hot(y.astype(jnp.int32), cmax))
  zt = jnp.where(train[:, None], z, 0.0)
  gram = zt.T @ zt + lam * jnp.eye(z.shape[1])
  pred = z @ _cg_solve(gram, zt.T @ jnp.where(train[:, None], target, 0.0))
  scores = jnp.where(jnp.arange(cmax)[None, :] < num_classes, pred, -jnp.inf)
  hit = (jnp.argmax(scores, axis=1) == y.astype(jnp.int32)) & test
  count = jnp.maximum(jnp.sum(test), 1)
  mean = jnp.sum(jnp.where(test, y, 0.0)) / count
  sst = jnp.sum(jnp.where(test, (y - mean) ** 2, 0.0))
  r2 = 1 - jnp.sum(jnp.where(test, (y - pred[:, 0]) ** 2, 0.0)) / jnp.maximum(sst, 1e-12)
  return jnp.where(regression, r2, jnp.sum(hit) / count)


def probe(s: tasks.Sample, num_classes_max: int, lam: float = 1.0) -> ProbeResult:
  """Test scores (accuracy, or R^2 for regression) of the ridge probe without and with the graph."""
  valid = s.graph.node_mask
  ones = jnp.where(valid, 1.0, 0.0)[:, None]
  agg1 = graphs.aggregate(s.graph, s.x, "mean")
  agg2 = graphs.aggregate(s.graph, agg1, "mean")
  f = s.feature_mask
  plain, plain_mask = jnp.concatenate([s.x, ones], 1), jnp.concatenate([f, jnp.ones((1,), bool)])
  full = jnp.concatenate([s.x, agg1, agg2, ones], 1)
  full_mask = jnp.concatenate([f, f, f, jnp.ones((1,), bool)])
  test = valid & ~s.train_mask
  args = (s.y, s.train_mask, test, s.task, s.num_classes, max(num_classes_max, 1), lam)
  usable = s.ok & (jnp.sum(test) >= 2)
  return ProbeResult(_ridge_score(plain, plain_mask, *args), _ridge_score(full, full_mask, *args), usable)


@functools.lru_cache(maxsize=None)
def batch_fn(structure_hp: StructureConfig, attribute_hp: AttributeConfig, with_probe: bool = False):
  """Jitted ``keys [B] -> Sample [B]`` (and ``ProbeResult [B]`` when ``with_probe``), cached per config."""

  def one(key):
    s = tasks.sample(key, structure_hp, attribute_hp)
    return (s, probe(s, attribute_hp.num_classes_max)) if with_probe else s

  return jax.jit(jax.vmap(one))
