"""Does the graph matter? A ridge probe with and without neighbour-averaged features.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489) argues that its prior's
targets depend on the graph through the SCM's graph convolutions. This probe
measures it on each sampled task: ridge regression (one-hot targets for
classes) fitted on the training nodes and scored on the other nodes (R^2
for regression, accuracy for classes), once on ``[X, 1]`` and 128 random
ReLU features of it (features alone) and once on those plus ``[A X, A^2 X]``
and 128 random ReLU features of them, ``A`` the neighbour mean (SGC-style
propagation, Wu et al., 2019; its first term is a one-layer graph
convolution). Each arm's ridge penalty is chosen on a validation fifth of
the training nodes from :data:`PENALTIES` and the arm is refitted on all of
them, so the wider arm is regularised as much as its validation score asks
for. With ``graph_conv_ratio = 0`` the neighbours' features carry no
information about a node's target beyond the graph structure; with a high
ratio they do.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from envs import graphs
from methods.graphpfn import tasks
from methods.graphpfn.hparams import AttributeConfig, StructureConfig

PENALTIES = (0.1, 1.0, 10.0, 100.0)  # ridge penalties tried on the validation fifth


class ProbeResult(NamedTuple):
  acc_plain: jax.Array  # [] test accuracy (R^2 for regression) without the graph
  acc_graph: jax.Array  # [] the same with neighbour-averaged features
  usable: jax.Array  # [] bool: a valid sample with >= 2 test nodes and >= 2 validation nodes


def _cg_solve(a, b, iterations=64):
  """``a^-1 b`` for SPD ``a [D, D]``, each column of ``b [D, K]`` by Jacobi-preconditioned conjugate gradients.

  Matmuls only: LAPACK solves inside a computation sharded over CPU devices
  hang in jaxlib 0.10.2, and the probe runs sharded.
  """
  inv = 1.0 / jnp.maximum(jnp.diag(a), 1e-12)[:, None]
  x = jnp.zeros_like(b)
  z = inv * b

  def step(carry, _):
    x, r, z, p = carry
    ap = a @ p
    rz = jnp.sum(r * z, axis=0, keepdims=True)
    alpha = rz / jnp.maximum(jnp.sum(p * ap, axis=0, keepdims=True), 1e-30)
    x, r = x + alpha * p, r - alpha * ap
    z_new = inv * r
    beta = jnp.sum(r * z_new, axis=0, keepdims=True) / jnp.maximum(rz, 1e-30)
    return (x, r, z_new, z_new + beta * p), None

  (x, _, _, _), _ = jax.lax.scan(step, (x, b, z, z), None, length=iterations)
  return x


def _score(pred, y, on, task, num_classes, cmax):
  """Accuracy (classification) or R^2 (regression) of predictions ``[N, K]`` on the nodes ``on``."""
  scores = jnp.where(jnp.arange(cmax)[None, :] < num_classes, pred, -jnp.inf)
  count = jnp.maximum(jnp.sum(on), 1)
  hit = (jnp.argmax(scores, axis=1) == y.astype(jnp.int32)) & on
  mean = jnp.sum(jnp.where(on, y, 0.0)) / count
  sst = jnp.sum(jnp.where(on, (y - mean) ** 2, 0.0))
  r2 = 1 - jnp.sum(jnp.where(on, (y - pred[:, 0]) ** 2, 0.0)) / jnp.maximum(sst, 1e-12)
  return jnp.where(task == tasks.REGRESSION, r2, jnp.sum(hit) / count)


def _random_features(z, zmask, key, width=128):
  """``[z, relu(z W)]`` with a fixed Gaussian ``W`` (scaled by the active columns), masked columns zeroed."""
  z = jnp.where(zmask[None, :], z, 0.0)
  w = jax.random.normal(key, (z.shape[1], width)) / jnp.sqrt(jnp.maximum(jnp.sum(zmask), 1.0))
  return jnp.concatenate([z, jax.nn.relu(z @ w)], axis=1)


def _ridge_score(z, y, train, test, task, num_classes, cmax):
  """Test score of ridge on the design ``z [N, D]``, the penalty chosen on a validation fifth of ``train``."""
  target = jnp.where(task == tasks.REGRESSION, jnp.zeros((1, cmax)).at[0, 0].set(1.0) * y[:, None],
                     jax.nn.one_hot(y.astype(jnp.int32), cmax))
  # Node ids are shuffled, so every fifth training node (by rank) is a random validation fifth.
  rank = jnp.cumsum(train) - 1
  val = train & (rank % 5 == 4)

  def fit(on, lam):
    zt = jnp.where(on[:, None], z, 0.0)
    return z @ _cg_solve(zt.T @ zt + lam * jnp.eye(z.shape[1]), zt.T @ jnp.where(on[:, None], target, 0.0))

  fit_on = train & ~val
  val_scores = jnp.stack([_score(fit(fit_on, lam), y, val, task, num_classes, cmax) for lam in PENALTIES])
  best = jnp.asarray(PENALTIES)[jnp.argmax(val_scores)]
  return _score(fit(train, best), y, test, task, num_classes, cmax)


def probe(s: tasks.Sample, num_classes_max: int) -> ProbeResult:
  """Test scores (accuracy, or R^2 for regression) of the ridge probe without and with the graph.

  The graph arm's design holds the plain arm's (the same features and random
  features) plus the neighbour averages and random features of those.
  """
  valid = s.graph.node_mask
  ones = jnp.where(valid, 1.0, 0.0)[:, None]
  agg1 = graphs.aggregate(s.graph, s.x, "mean")
  agg2 = graphs.aggregate(s.graph, agg1, "mean")
  f = s.feature_mask
  plain = _random_features(jnp.concatenate([s.x, ones], 1), jnp.concatenate([f, jnp.ones((1,), bool)]),
                           jax.random.key(0))
  extra = _random_features(jnp.concatenate([agg1, agg2], 1), jnp.concatenate([f, f]), jax.random.key(1))
  test = valid & ~s.train_mask
  args = (s.y, s.train_mask, test, s.task, s.num_classes, max(num_classes_max, 1))
  usable = s.ok & (jnp.sum(test) >= 2) & (jnp.sum(s.train_mask) >= 10)
  return ProbeResult(_ridge_score(plain, *args), _ridge_score(jnp.concatenate([plain, extra], 1), *args), usable)


@functools.lru_cache(maxsize=None)
def batch_fn(structure_hp: StructureConfig, attribute_hp: AttributeConfig, with_probe: bool = False):
  """Jitted ``keys [B] -> Sample [B]`` (and ``ProbeResult [B]`` when ``with_probe``), cached per config."""

  def one(key):
    s = tasks.sample(key, structure_hp, attribute_hp)
    return (s, probe(s, attribute_hp.num_classes_max)) if with_probe else s

  return jax.jit(jax.vmap(one))


class ProbeSummary(NamedTuple):
  """Scores of one group of probed graphs, means with 95% normal intervals (paired for the gap)."""

  n: int
  plain: float
  graph: float
  gap: float  # mean of graph - plain
  gap_low: float
  gap_high: float
  plain_ci: float  # half-width of the 95% interval of the plain mean
  graph_ci: float
  gap_median: float  # median of graph - plain (R^2 has a long lower tail)
  p_graph_helps: float  # one-sided Wilcoxon signed-rank p-value of "graph - plain > 0"


def summarize(plain: np.ndarray, graph: np.ndarray) -> ProbeSummary:
  """Means and 95% intervals (``1.96`` standard errors; the gap paired per graph) of host arrays ``[G]``, the
  median gap and the signed-rank p-value of a positive gap (robust to R^2's long lower tail)."""
  plain, graph = np.asarray(plain, float), np.asarray(graph, float)
  n = len(plain)
  if n < 2:
    raise ValueError(f"summarize: {n} probed graphs; at least 2 are needed for an interval")
  half = lambda v: 1.96 * v.std(ddof=1) / np.sqrt(n)  # noqa: E731
  d = graph - plain
  p = float(stats.wilcoxon(d, alternative="greater").pvalue) if np.any(d != 0) else 1.0
  return ProbeSummary(n, float(plain.mean()), float(graph.mean()), float(d.mean()), float(d.mean() - half(d)),
                      float(d.mean() + half(d)), float(half(plain)), float(half(graph)), float(np.median(d)), p)


def measure(structure_hp: StructureConfig, attribute_hp: AttributeConfig, *, graphs: int, batch_size: int = 64,
            seed: int = 0, place: Callable[[jax.Array], jax.Array] | None = None
            ) -> dict[tuple[str, float], ProbeSummary]:
  """Probes ``graphs`` prior samples and summarises them per (task kind, ``graph_conv_ratio``).

  Graph ``i`` is sampled from ``fold_in(key(seed), i)``; unusable samples
  (:attr:`ProbeResult.usable` false) are left out. Host-side loop over
  jitted batches of :func:`batch_fn`; ``place`` puts each batch's keys
  ``[batch_size]`` on devices (e.g. sharded over a mesh; default: as they are).
  """
  fn = batch_fn(structure_hp, attribute_hp, True)
  base = jax.random.key(seed)
  cols = {"task": [], "ratio": [], "plain": [], "graph": []}
  for start in range(0, graphs, batch_size):
    keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(start, start + batch_size))
    keys = place(keys) if place is not None else keys
    s, res = jax.tree.map(np.asarray, fn(keys))
    use = res.usable[:min(batch_size, graphs - start)]
    cols["task"] += list(np.asarray(attribute_hp.tasks)[s.attributes.task[:len(use)][use]])
    cols["ratio"] += list(s.attributes.graph_conv_ratio[:len(use)][use].round(3))
    cols["plain"] += list(res.acc_plain[:len(use)][use])
    cols["graph"] += list(res.acc_graph[:len(use)][use])
  task, ratio = np.asarray(cols["task"]), np.asarray(cols["ratio"], float)
  plain, graph = np.asarray(cols["plain"], float), np.asarray(cols["graph"], float)
  out = {}
  for t in attribute_hp.tasks:
    for r in sorted(set(ratio.tolist())):
      pick = (task == t) & (ratio == r)
      if pick.sum() >= 2:
        out[(t, r)] = summarize(plain[pick], graph[pick])
  return out
