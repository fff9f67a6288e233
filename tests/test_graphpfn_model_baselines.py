"""GraphPFN's per-graph baselines on tasks with a known answer; real graphs as node tasks (karate club features
from structure, projected Planetoid features)."""

import functools

import chex
import jax
import numpy as np
import pytest

from datasets.graphs import planetoid, real_tasks
from methods import graphpfn
from methods.graphpfn import baselines, evaluation

HP = graphpfn.BaselineConfig(gcn_steps=100, gbdt_max_iter=50)
C = 4  # the classes of the returned probabilities
BUCKETS = graphpfn.BucketConfig(node_buckets=(128,), edge_buckets=(1024,))
N = 120


def _collate(examples):
  return graphpfn.collate(examples, buckets=BUCKETS, num_features=8, num_classes=C)


def _random_edges(rng, n, e):
  s, r = rng.integers(0, n, e), rng.integers(0, n, e)
  return s[s != r], r[s != r]


def _linear_graph(seed, task):
  """Features decide the label linearly; edges are random."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(N, 6))
  w = rng.normal(size=(6, 3))
  y = np.argmax(x @ w, axis=1).astype(float) if task == "multiclass" else x @ w[:, 0] + 0.1 * rng.normal(size=N)
  s, r = _random_edges(rng, N, 300)
  return {"x": x, "y": y, "train_mask": rng.random(N) < 0.5, "senders": s, "receivers": r, "task": task,
          "num_classes": 3 if task == "multiclass" else 0}


def _sbm_graph(seed):
  """Two blocks with dense inside edges; the label is the block, each feature a noisy shift by it."""
  rng = np.random.default_rng(seed)
  y = (np.arange(N) >= N // 2).astype(int)
  p = np.where(y[:, None] == y[None, :], 0.12, 0.005)
  s, r = np.nonzero(np.triu(rng.random((N, N)) < p, 1))
  return {"x": rng.normal(size=(N, 4)) + 0.4 * (2 * y[:, None] - 1), "y": y, "train_mask": rng.random(N) < 0.3, "senders": s, "receivers": r,
          "task": "binary", "num_classes": 2}


def _xor_graph(seed):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(N, 3))
  s, r = _random_edges(rng, N, 200)
  return {"x": x, "y": (x[:, 0] * x[:, 1] > 0).astype(int), "train_mask": rng.random(N) < 0.6, "senders": s,
          "receivers": r, "task": "binary", "num_classes": 2}


@functools.lru_cache(maxsize=None)
def _scores(kind):
  makers = {"linear": lambda i: _linear_graph(i, "multiclass" if i % 2 else "regression"),
            "sbm": _sbm_graph, "xor": _xor_graph}
  batch = _collate([makers[kind](i) for i in range(4)])
  out = {}
  for name in baselines.BASELINES:
    pred = baselines.run(name, batch, jax.random.key(0), hp=HP, num_classes=C)
    chex.assert_shape(pred.class_probs, (4, 128, C))
    chex.assert_shape(pred.mean, (4, 128))
    out[name] = evaluation.score(pred, batch)
  return batch, out


def _accuracy(batch, scores, task_ids):
  """Pooled eval-node accuracy over the graphs of the given tasks, and its binomial standard error."""
  use = np.isin(np.asarray(scores.task), task_ids) & np.asarray(scores.usable)
  n = np.asarray(batch.eval_mask).sum(1)[use]
  acc = float(np.sum(np.asarray(scores.score)[use] * n) / n.sum())
  return acc, np.sqrt(acc * (1 - acc) / n.sum()), n.sum()


def test_linear_task_fitted_by_every_baseline():
  batch, out = _scores("linear")
  reg = np.asarray(batch.task) == graphpfn.REGRESSION
  assert reg.sum() == 2
  # The GCN mixes each node with its random neighbours, so it explains less of a node-level linear target.
  for name, floor in (("linear", 0.95), ("sgc", 0.9), ("gcn", 0.0), ("gbdt", 0.5)):
    assert np.all(np.asarray(out[name].score)[reg] > floor), (name, out[name].score)
  chance = 1 / 3
  for name in baselines.BASELINES:
    acc, _, n = _accuracy(batch, out[name], [graphpfn.MULTICLASS])
    assert acc > chance + 5 * np.sqrt(chance * (1 - chance) / n), (name, acc)
  acc_linear, se, _ = _accuracy(batch, out["linear"], [graphpfn.MULTICLASS])
  assert acc_linear > 0.85, acc_linear


def test_graph_baselines_use_the_edges():
  batch, out = _scores("sbm")
  linear, se_linear, _ = _accuracy(batch, out["linear"], [graphpfn.BINARY])
  for name in ("sgc", "gcn"):  # averaging over same-block neighbours removes most of the features' noise
    acc, se, _ = _accuracy(batch, out[name], [graphpfn.BINARY])
    assert acc - linear > 4 * np.hypot(se, se_linear) and acc > 0.9, (name, acc, linear)


def test_trees_fit_a_nonlinear_task():
  batch, out = _scores("xor")
  linear, se_linear, n = _accuracy(batch, out["linear"], [graphpfn.BINARY])
  gbdt, se, _ = _accuracy(batch, out["gbdt"], [graphpfn.BINARY])
  assert gbdt - linear > 4 * np.hypot(se, se_linear) and gbdt > 0.7, (gbdt, linear)
  with pytest.raises(ValueError, match="unknown baseline 'svm'"):
    baselines.run("svm", batch, jax.random.key(0), hp=HP, num_classes=C)


def test_karate_task_from_structure():
  t = real_tasks.karate_task(train_per_class=2, seed=3)
  chex.assert_shape(t["x"], (34, 9))
  np.testing.assert_allclose(t["x"].mean(0), 0.0, atol=1e-5)
  np.testing.assert_allclose(t["x"].std(0), 1.0, atol=1e-4)
  assert t["train_mask"].sum() == 4 and set(t["y"][t["train_mask"]]) == {0, 1}
  np.testing.assert_array_equal(t["eval_mask"], ~t["train_mask"])
  chex.assert_trees_all_equal(t, real_tasks.karate_task(train_per_class=2, seed=3))
  b = graphpfn.collate([t], buckets=graphpfn.BucketConfig(), num_features=24, num_classes=10)
  assert b.x.shape == (1, 64, 24) and int(b.task[0]) == graphpfn.BINARY and int(b.feature_mask.sum()) == 9


def test_structural_features_of_a_path():
  n = 12
  x = real_tasks.structural_features(np.arange(n - 1), np.arange(1, n), n, num_eigvecs=2)
  chex.assert_shape(x, (n, 7))
  assert x[0, 0] < x[5, 0] and x[0, 0] == x[-1, 0]  # log-degree: the ends have one neighbour
  np.testing.assert_array_equal(x[:, 1], 0.0)  # no triangles: a constant (zero) clustering column
  fiedler = x[:, 5]
  assert np.all(np.diff(fiedler) > 0) or np.all(np.diff(fiedler) < 0)  # monotone along the path


def test_projection_keeps_a_low_rank_signal():
  rng = np.random.default_rng(0)
  latent = rng.normal(size=(300, 3)) * np.array([5.0, 3.0, 2.0])
  x = latent @ rng.normal(size=(3, 40)) + 0.05 * rng.normal(size=(300, 40))
  z = real_tasks.project_features(x, 3)
  chex.assert_shape(z, (300, 3))
  coef, *_ = np.linalg.lstsq(np.c_[z, np.ones(300)], latent, rcond=None)
  resid = latent - np.c_[z, np.ones(300)] @ coef
  assert np.all(1 - resid.var(0) / latent.var(0) > 0.99)
  np.testing.assert_array_equal(z, real_tasks.project_features(x, 3))
  chex.assert_shape(real_tasks.project_features(x[:, :2], 3), (300, 2))


def test_projection_of_a_graph_with_fewer_nodes_than_features():
  """n = 20 nodes, 100 columns, num_features = 24: the 20 components there are (the null one, rounding noise, is 0)."""
  rng = np.random.default_rng(0)
  x = rng.random((20, 100)) * 1e4
  z = real_tasks.project_features(x, 24)
  chex.assert_shape(z, (20, 20))
  np.testing.assert_allclose(z[:, :19].std(0), 1.0, atol=1e-4)
  np.testing.assert_array_equal(z[:, 19], 0.0)  # centred columns: rank n - 1
  np.testing.assert_allclose(np.abs(z[:, :8]), np.abs(real_tasks.project_features(x, 8)), atol=1e-5)
  np.testing.assert_array_equal(real_tasks.project_features(np.ones((20, 100)), 24), 0.0)
  t = graphpfn.collate([{"x": z, "y": np.arange(20) % 3, "train_mask": np.arange(20) < 10, "senders": [0],
                         "receivers": [1], "task": "multiclass"}], buckets=graphpfn.BucketConfig(), num_features=24,
                       num_classes=10)
  assert int(t.feature_mask.sum()) == 20


def test_planetoid_graph_as_a_task(tmp_path):
  rng = np.random.default_rng(0)
  n, d = 40, 60
  y = rng.integers(0, 3, n)
  x = (rng.random((n, d)) < 0.1).astype(np.float32)
  s, r = _random_edges(rng, n, 80)
  edges = {(min(a, b), max(a, b)) for a, b in zip(s, r)}
  s, r = np.array(sorted(edges)).T
  planetoid.write(str(tmp_path), "toy", x=x, y=y, senders=s, receivers=r, num_train=9, test_index=np.arange(25, 40))
  t = real_tasks.planetoid_task(planetoid.load(str(tmp_path), "toy"), num_features=8)
  chex.assert_shape(t["x"], (n, 8))
  assert t["train_mask"].sum() == 9 and t["eval_mask"].sum() == 15 and t["num_classes"] == 3
  b = _collate([t])
  pred = baselines.run("sgc", b, jax.random.key(0), hp=HP, num_classes=C)
  s = evaluation.score(pred, b)
  assert bool(s.usable[0]) and 0.0 <= float(s.score[0]) <= 1.0
