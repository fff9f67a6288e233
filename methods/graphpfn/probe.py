"""Does the graph matter? A ridge probe with and without neighbour-averaged features.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489) argues that its prior's
targets depend on the graph through the SCM's graph convolutions. This probe
measures it: a ridge classifier (one-hot targets, closed form) on the
inputs and 128 random ReLU features of them, fitted on the training nodes, scored by accuracy on the other nodes, fitted to ``[X, 1]``
and to ``[X, mean_N(X), mean_N(mean_N(X)), 1]`` (SGC-style propagated
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
  acc_plain: jax.Array  # [] accuracy on test nodes without the graph
  acc_graph: jax.Array  # [] accuracy with neighbour-averaged features
  usable: jax.Array  # [] bool: a classification sample with >= 1 test node


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
    rz = jnp.sum(r * z, axis=0)
    alpha = rz / jnp.maximum(jnp.sum(p * ap, axis=0), 1e-30)
    x, r = x + alpha * p, r - alpha * ap
    z_new = inv * r
    beta = jnp.sum(r * z_new, axis=0) / jnp.maximum(rz, 1e-30)
    return (x, r, z_new, z_new + beta * p), None

  (x, _, _, _), _ = jax.lax.scan(step, (x, r, z, p), None, length=iterations)
  return x


def _ridge_accuracy(z, zmask, y, train, test, num_classes, cmax, lam, width=128):
  onehot = jax.nn.one_hot(y.astype(jnp.int32), cmax)
  z = jnp.where(zmask[None, :], z, 0.0)
  # Random ReLU features (fixed key: both arms see the same projection of shared columns).
  w = jax.random.normal(jax.random.key(0), (z.shape[1], width)) / jnp.sqrt(jnp.maximum(jnp.sum(zmask), 1.0))
  z = jnp.concatenate([z, jax.nn.relu(z @ w)], axis=1)
  zt = jnp.where(train[:, None], z, 0.0)
  gram = zt.T @ zt + lam * jnp.eye(z.shape[1])
  w = _cg_solve(gram, zt.T @ jnp.where(train[:, None], onehot, 0.0))
  scores = jnp.where(jnp.arange(cmax)[None, :] < num_classes, z @ w, -jnp.inf)
  hit = (jnp.argmax(scores, axis=1) == y.astype(jnp.int32)) & test
  return jnp.sum(hit) / jnp.maximum(jnp.sum(test), 1)


def probe(s: tasks.Sample, num_classes_max: int, lam: float = 1.0) -> ProbeResult:
  """Test accuracies of the ridge probe without and with the graph, for one sample."""
  valid = s.graph.node_mask
  ones = jnp.where(valid, 1.0, 0.0)[:, None]
  agg1 = graphs.aggregate(s.graph, s.x, "mean")
  agg2 = graphs.aggregate(s.graph, agg1, "mean")
  f = s.feature_mask
  plain, plain_mask = jnp.concatenate([s.x, ones], 1), jnp.concatenate([f, jnp.ones((1,), bool)])
  full = jnp.concatenate([s.x, agg1, agg2, ones], 1)
  full_mask = jnp.concatenate([f, f, f, jnp.ones((1,), bool)])
  test = valid & ~s.train_mask
  args = (s.y, s.train_mask, test, s.num_classes, num_classes_max, lam)
  usable = s.ok & (s.task != tasks.REGRESSION) & jnp.any(test)
  return ProbeResult(_ridge_accuracy(plain, plain_mask, *args), _ridge_accuracy(full, full_mask, *args), usable)


@functools.lru_cache(maxsize=None)
def batch_fn(structure_hp: StructureConfig, attribute_hp: AttributeConfig, with_probe: bool = False):
  """Jitted ``keys [B] -> Sample [B]`` (and ``ProbeResult [B]`` when ``with_probe``), cached per config."""

  def one(key):
    s = tasks.sample(key, structure_hp, attribute_hp)
    return (s, probe(s, attribute_hp.num_classes_max)) if with_probe else s

  return jax.jit(jax.vmap(one))
