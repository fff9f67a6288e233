"""GraphPFN network: shapes, equivariance over nodes and edge order, no label leak between test nodes,
padding invariance, the Riemann head, bad input named."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods import graphpfn
from methods.graphpfn import evaluation, model, riemann

# zero_init=False: every branch acts at initialisation, so the structural properties are not trivially true.
CFG = graphpfn.ModelConfig(width=16, num_layers=2, heads=2, num_bins=8, num_features=6, num_classes=4, zero_init=False)
BUCKETS = graphpfn.BucketConfig(node_buckets=(32, 64), edge_buckets=(64, 256))


def _graph(seed, n=24, e=40, f=5, task="multiclass", classes=3):
  rng = np.random.default_rng(seed)
  s, r = rng.integers(0, n, e), rng.integers(0, n, e)
  keep = s != r
  y = rng.normal(size=n) if task == "regression" else rng.integers(0, classes, n).astype(float)
  train = rng.random(n) < 0.4
  train[:2] = True
  train[-2:] = False
  return {"x": rng.normal(size=(n, f)), "y": y, "train_mask": train, "senders": s[keep], "receivers": r[keep],
          "task": task, "num_classes": 0 if task == "regression" else classes}


def _batch(examples, buckets=BUCKETS, batch_size=None):
  return graphpfn.collate(examples, buckets=buckets, num_features=CFG.num_features, num_classes=CFG.num_classes,
                          batch_size=batch_size)


@functools.lru_cache(maxsize=None)
def _params():
  return model.init_params(jax.random.key(0), config=CFG)


_forward = jax.jit(functools.partial(model.forward, config=CFG))


def _out(examples, **kw):
  return jax.device_get(_forward(_params(), _batch(examples, **kw)))


def test_shapes_and_masked_classes():
  b = _batch([_graph(0), _graph(1, task="regression"), _graph(2, n=50, task="binary", classes=2)], batch_size=4)
  chex.assert_shape(b.x, (4, 64, CFG.num_features))
  chex.assert_shape([b.senders, b.receivers, b.edge_mask], (4, 64))
  out = _forward(_params(), b)
  chex.assert_shape(out.class_logits, (4, 64, CFG.num_classes))
  chex.assert_shape(out.bin_logits, (4, 64, CFG.num_bins))
  chex.assert_shape([out.y_mean, out.y_std], (4,))
  logits = np.asarray(out.class_logits)
  assert np.all(logits[0, :, 3:] == model.NEG) and np.all(logits[0, :, :3] > model.NEG / 2)
  assert np.all(logits[2, :, 2:] == model.NEG)
  assert np.all(np.isfinite(logits)) and np.all(np.isfinite(np.asarray(out.bin_logits)))
  # A regression graph's standardisation uses its training nodes only.
  g = _graph(1, task="regression")
  chex.assert_trees_all_close(float(out.y_mean[1]), np.mean(g["y"][g["train_mask"]]), rtol=1e-5)
  # Parameter shapes do not depend on the graph sizes.
  chex.assert_trees_all_equal_shapes(_params(), model.init_params(jax.random.key(1), config=CFG))


def test_predictions_and_quantiles():
  b = _batch([_graph(0), _graph(1, task="regression")])
  borders = jnp.linspace(-3.0, 3.0, CFG.num_bins + 1)
  pred = evaluation.predict(_params(), b, borders, model_hp=CFG)
  chex.assert_shape(pred.class_probs, (2, 32, CFG.num_classes))
  chex.assert_shape(pred.mean, (2, 32))
  chex.assert_trees_all_close(jnp.sum(pred.class_probs, -1), jnp.ones((2, 32)), atol=1e-5)
  qs = np.asarray(evaluation.quantiles(_params(), b, borders, (0.1, 0.5, 0.9), model_hp=CFG))
  chex.assert_shape(qs, (3, 2, 32))
  assert np.all(qs[0] <= qs[1] + 1e-5) and np.all(qs[1] <= qs[2] + 1e-5) and np.any(qs[0] < qs[2])
  # Predicted values are in the regression graph's units: its training mean and std map the bins back.
  g = _graph(1, task="regression")
  lo, hi = g["y"][g["train_mask"]].mean() + np.array([-3.0, 3.0]) * g["y"][g["train_mask"]].std()
  assert np.all((qs[:, 1] >= lo - 1e-4) & (qs[:, 1] <= hi + 1e-4))


def _relabel(g, perm):
  """New node j is old node perm[j]."""
  new_id = np.empty_like(perm)
  new_id[perm] = np.arange(len(perm))
  return g | {"x": g["x"][perm], "y": g["y"][perm], "train_mask": g["train_mask"][perm],
              "senders": new_id[g["senders"]], "receivers": new_id[g["receivers"]]}


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_node_permutation_equivariance(task):
  g = _graph(3, task=task)
  perm = np.random.default_rng(0).permutation(24)
  a, b = _out([g]), _out([_relabel(g, perm)])
  chex.assert_trees_all_close(b.class_logits[0, :24], a.class_logits[0, perm], atol=2e-5)
  chex.assert_trees_all_close(b.bin_logits[0, :24], a.bin_logits[0, perm], atol=2e-5)


def test_edge_order_and_direction_invariance():
  g = _graph(4)
  rng = np.random.default_rng(1)
  order = rng.permutation(len(g["senders"]))
  flip = rng.random(len(order)) < 0.5
  s, r = g["senders"][order], g["receivers"][order]
  h = g | {"senders": np.where(flip, r, s), "receivers": np.where(flip, s, r)}
  chex.assert_trees_all_close(_out([h]), _out([g]), atol=2e-5)
  # The edges matter: dropping half of them changes the predictions.
  cut = g | {"senders": g["senders"][::2], "receivers": g["receivers"][::2]}
  assert np.max(np.abs(_out([cut]).class_logits - _out([g]).class_logits)) > 1e-3


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_test_labels_never_seen(task):
  g = _graph(5, task=task)
  test = np.flatnonzero(~g["train_mask"])
  y = g["y"].copy()
  y[test[0]] = 2.0 if y[test[0]] != 2.0 else 0.0
  chex.assert_trees_all_equal(_out([g | {"y": y}]), _out([g]))
  y[test] = y[test][::-1] * 3.0 if task == "regression" else (y[test] + 1) % 3
  chex.assert_trees_all_equal(_out([g | {"y": y}]), _out([g]))
  # A training label is seen.
  y = g["y"].copy()
  y[0] = 2.0 if y[0] != 2.0 else 0.0
  changed, base = _out([g | {"y": y}]), _out([g])
  field = "bin_logits" if task == "regression" else "class_logits"
  assert np.max(np.abs(getattr(changed, field) - getattr(base, field))[0, :24]) > 1e-4


def _hops(g, source, n):
  adj = [[] for _ in range(n)]
  for u, v in zip(g["senders"], g["receivers"]):
    adj[u].append(v)
    adj[v].append(u)
  dist = np.full(n, np.inf)
  dist[source], frontier = 0, [source]
  while frontier:
    nxt = []
    for u in frontier:
      for v in adj[u]:
        if dist[v] == np.inf:
          dist[v] = dist[u] + 1
          nxt.append(v)
    frontier = nxt
  return dist


def test_test_nodes_do_not_attend_to_each_other():
  """A test node's features reach another node only over at most num_layers edges, never by row attention."""
  g = _graph(6, e=14)
  j = int(np.flatnonzero(~g["train_mask"])[0])
  x = g["x"].copy()
  x[j] += 3.0
  diff = np.max(np.abs(_out([g | {"x": x}]).class_logits[0, :24] - _out([g]).class_logits[0, :24]), axis=1)
  dist = _hops(g, j, 24)
  far = dist > CFG.num_layers
  assert far.sum() >= 5 and np.all(diff[far] == 0.0)
  assert diff[j] > 1e-4
  # A training node's features reach every node through row attention.
  x = g["x"].copy()
  x[0] += 3.0
  diff = np.max(np.abs(_out([g | {"x": x}]).class_logits[0, :24] - _out([g]).class_logits[0, :24]), axis=1)
  assert np.all(diff > 0.0)


def test_padding_does_not_change_predictions():
  g, other = _graph(7), _graph(8, n=60, e=200, task="regression")
  alone = _out([g])
  big = graphpfn.BucketConfig(node_buckets=(64,), edge_buckets=(256,))
  for out, i in ((_out([g], buckets=big), 0), (_out([g, other]), 0), (_out([other, g], batch_size=3), 1)):
    chex.assert_trees_all_close(out.class_logits[i, :24], alone.class_logits[0, :24], atol=2e-5)
    chex.assert_trees_all_close(out.bin_logits[i, :24], alone.bin_logits[0, :24], atol=2e-5)
  # Unused feature columns are ignored, whatever they hold.
  b = _batch([g])
  b = b._replace(x=np.where(b.feature_mask[:, None, :], b.x, 7.0).astype(np.float32))
  chex.assert_trees_all_close(jax.device_get(_forward(_params(), b)).class_logits[0, :24], alone.class_logits[0, :24],
                              atol=2e-5)


def test_riemann_bins_equal_mass_and_distribution():
  rng = np.random.default_rng(0)
  n, k = 20000, 16
  borders = riemann.fit_borders(rng.normal(size=n), k)
  chex.assert_shape(borders, (k + 1,))
  assert np.all(np.diff(np.asarray(borders)) > 0)
  fresh = rng.normal(size=n)
  inside = (fresh >= borders[0]) & (fresh <= borders[-1])
  counts = np.bincount(np.asarray(riemann.bin_index(jnp.asarray(fresh[inside]), borders)), minlength=k)
  p = 1.0 / k
  se = np.sqrt(p * (1 - p) / n)
  assert np.all(np.abs(counts / n - p) < 4.5 * se), counts / n
  logits = jnp.asarray(rng.normal(size=(3, k)), jnp.float32)
  centres = (borders[1:] + borders[:-1]) / 2
  width = borders[1:] - borders[:-1]
  dens = jnp.exp(riemann.log_prob(logits[:, None, :], jnp.broadcast_to(centres, (3, k)), borders))
  chex.assert_trees_all_close(jnp.sum(dens * width[None, :], axis=1), jnp.ones(3), rtol=1e-5)
  ys = jnp.linspace(borders[0] + 1e-3, borders[-1] - 1e-3, 7)
  for y in ys:
    q = riemann.cdf(logits, jnp.full((3,), y), borders)
    chex.assert_trees_all_close(riemann.quantile(logits, q, borders), jnp.full((3,), y), atol=1e-4)
  chex.assert_trees_all_close(riemann.mean(logits, borders), jax.nn.softmax(logits) @ centres, rtol=1e-6)
  chex.assert_trees_all_close(riemann.cdf(logits, riemann.median(logits, borders), borders), jnp.full((3,), 0.5),
                              atol=1e-5)
  with pytest.raises(ValueError, match="values"):
    riemann.fit_borders(np.ones(10), 4)


@pytest.mark.parametrize("change, match", [
    (dict(n=70, e=10), r"graph 0: node count: 70 is over the maximum 64"),
    (dict(e=300), r"graph 0: edge count: \d+ is over the maximum 256"),
    (dict(f=9), r"graph 0: key 'x' has 9 features, over the model's maximum num_features=6"),
    (dict(task="ranking"), r"graph 0: unknown task 'ranking' \(key 'task'\)"),
    (dict(task=7), r"graph 0: unknown task 7 \(key 'task'\)"),
    (dict(classes=5), r"graph 0: num_classes=5 is over the model's maximum num_classes=4"),
])
def test_bad_input_named(change, match):
  with pytest.raises(graphpfn.BatchError, match=match):
    _batch([_graph(9, **change)])


def test_bad_arrays_named():
  g = _graph(10)
  with pytest.raises(graphpfn.BatchError, match=r"graph 1: key 'senders' has node id 99 outside \[0, 24\) at edge 2"):
    s = g["senders"].copy()
    s[2] = 99
    _batch([g, g | {"senders": s}])
  y = g["y"].copy()
  y[0] = -1
  with pytest.raises(graphpfn.BatchError, match="graph 0: key 'y' has no valid label at training node 0"):
    _batch([g | {"y": y}])
  with pytest.raises(graphpfn.BatchError, match="graph 0: key 'train_mask' selects no training node"):
    _batch([g | {"train_mask": np.zeros(24, bool)}])
  with pytest.raises(graphpfn.BatchError, match="graph 0: missing key 'x'"):
    _batch([{k: v for k, v in g.items() if k != "x"}])
  with pytest.raises(graphpfn.BatchError, match="3 graphs do not fit a batch of batch_size=2"):
    _batch([g] * 3, batch_size=2)


@pytest.mark.parametrize("key, value, match", [
    ("x", lambda g: g["x"].astype(str), r"key 'x' has dtype <U\d+; numbers are needed"),
    ("y", lambda g: np.array(["cat"] * 24), r"key 'y' has dtype <U3; numbers are needed"),
    ("senders", lambda g: g["senders"] + 0.5, r"key 'senders' has the value \d+\.5 at entry 0; node ids are whole"),
    ("receivers", lambda g: np.where(np.arange(len(g["receivers"])) == 3, np.nan, g["receivers"]),
     r"key 'receivers' has the value nan at entry 3"),
    ("train_mask", lambda g: np.where(g["train_mask"], 2, 0), r"key 'train_mask' has the value 2 at entry 0; a mask "
                                                              r"holds booleans or 0 / 1"),
    ("eval_mask", lambda g: np.array(["yes"] * 24), r"key 'eval_mask' has dtype <U3"),
    ("eval_mask", lambda g: np.zeros(23, bool), r"key 'eval_mask' has 23 entries but the graph has 24 nodes"),
    ("num_nodes", lambda g: "24", r"key 'num_nodes' is '24'; expected a whole number >= 0"),
    ("num_nodes", lambda g: 24.5, r"key 'num_nodes' is 24.5; expected a whole number"),
    ("num_classes", lambda g: 2.5, r"key 'num_classes' is 2.5; expected a whole number"),
    ("weight", lambda g: -1.0, r"key 'weight' is -1.0; expected a number >= 0"),
    ("weight", lambda g: float("nan"), r"key 'weight' is nan"),
    ("task", lambda g: 1.5, r"unknown task 1.5 \(key 'task'\)"),
])
def test_arrays_of_the_wrong_kind_are_named_not_converted(key, value, match):
  """Strings, fractional node ids, masks beyond 0 / 1 and bad scalars are named (``astype`` would mangle them)."""
  g = _graph(10)
  with pytest.raises(graphpfn.BatchError, match="graph 0: " + match):
    _batch([g | {key: value(g)}])
  ok = g | {"senders": g["senders"].astype(np.float64), "train_mask": g["train_mask"].astype(np.int8),
            "num_nodes": np.int64(24), "weight": 0.5}
  np.testing.assert_array_equal(_batch([ok]).senders, _batch([g]).senders)  # whole floats and 0 / 1 ints are read
