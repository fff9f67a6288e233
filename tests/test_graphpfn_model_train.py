"""GraphPFN pretraining on the prior: the held-out loss falls, no recompiles after warm-up, a resumed run is
bit-identical, one device = eight devices within rounding, the learning curve over saved steps."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from methods import graphpfn
from methods.graphpfn import evaluation, prior_stream, train

# The prior at laptop size (the smoke sizes of the prior's own experiment).
SH = dataclasses.replace(
    graphpfn.StructureConfig(), n_nodes_min=64, n_nodes_max=128, low_degree_max=16.0, high_degree_min=16.0,
    high_degree_max=32.0, min_first_level_nodes=8, subgraphs_max=4, groups_max=6)
AH = dataclasses.replace(graphpfn.AttributeConfig(), hidden_dim_max=32, num_layers_max=4, n_features_max=24)
CFG = graphpfn.ModelConfig(width=32, num_layers=2, heads=4, num_bins=32, num_features=24, num_classes=10)
STEPS = 40
HP = graphpfn.TrainConfig(batch_size=8, total_steps=STEPS, warmup_steps=5, learning_rate=3e-3)
BUCKETS = graphpfn.BucketConfig(node_buckets=(128,), edge_buckets=(1024, 4096))
HELD_OUT = 3  # held-out batches of 8 graphs


def _stream(key, step):
  return prior_stream.prior_batch(key, step, batch_size=HP.batch_size, structure_hp=SH, attribute_hp=AH,
                                  buckets=BUCKETS, model_hp=CFG)


@functools.lru_cache(maxsize=None)
def _batch(seed, step):
  return _stream(jax.random.key(seed), step)


@functools.lru_cache(maxsize=None)
def _borders():
  return train.fit_bins([_batch(2, i) for i in range(2)], num_bins=CFG.num_bins)


def _train_step(state, batch, borders):
  return train.train_step(state, batch, borders, model_hp=CFG, train_hp=HP)


# One trace per (node bucket, edge bucket) pair: the buckets allow two.
_STEP = jax.jit(chex.assert_max_traces(_train_step, n=len(BUCKETS.node_buckets) * len(BUCKETS.edge_buckets)))
_per_graph = jax.jit(lambda p, b, borders: train.loss_fn(p, b, borders, model_hp=CFG, train_hp=HP)[1].loss)
_evaluate = evaluation.evaluate_fn(CFG)
_predict = jax.jit(functools.partial(evaluation.predict, model_hp=CFG))


@functools.lru_cache(maxsize=None)
def _trained():
  batches = [_batch(0, t) for t in range(STEPS)]
  state = first = train.init(jax.random.key(7), model_hp=CFG, train_hp=HP)
  metrics = []
  for b in batches:  # assert_max_traces fails here if a batch of a seen bucket pair recompiled
    state, m = _STEP(state, b, _borders())
    metrics.append(jax.device_get(m))
  return first, state, metrics, len({(b.x.shape[1], b.senders.shape[1]) for b in batches})


@pytest.mark.slow  # 40 training steps on freshly sampled prior graphs: about a minute of CPU
def test_training_reduces_held_out_loss_without_recompiles():
  first, state, metrics, buckets = _trained()
  assert int(state.step) == STEPS
  assert all(np.isfinite(m.loss) for m in metrics) and buckets >= 1
  lrs = np.array([float(m.learning_rate) for m in metrics])
  assert lrs[0] == 0.0 and np.isclose(lrs.max(), HP.learning_rate) and lrs[-1] < 0.2 * HP.learning_rate
  before, after, weight = [], [], []
  for i in range(HELD_OUT):
    b = _batch(1, i)
    before.append(np.asarray(_per_graph(first.params, b, _borders())))
    after.append(np.asarray(_per_graph(state.params, b, _borders())))
    weight.append(b.weight * (b.eval_mask.sum(1) > 0))
  use = np.concatenate(weight) > 0
  diff = (np.concatenate(before) - np.concatenate(after))[use]
  se = diff.std(ddof=1) / np.sqrt(diff.size)
  assert diff.size >= 18 and diff.mean() > 3 * se, (diff.mean(), se)


def test_resumed_run_is_bit_identical():
  step = _STEP
  key = jax.random.key(0)
  straight = train.init(jax.random.key(7), model_hp=CFG, train_hp=HP)
  for t in range(4):
    straight, m_straight = step(straight, _batch(0, t), _borders())
  resumed = train.init(jax.random.key(7), model_hp=CFG, train_hp=HP)
  for t in range(2):
    resumed, _ = step(resumed, _batch(0, t), _borders())
  saved = jax.device_get(resumed)  # what a checkpoint holds
  resumed = jax.tree.map(jnp.asarray, saved)
  for t in range(2, 4):
    resumed, m_resumed = step(resumed, _stream(key, t), _borders())  # the stream re-sampled from (key, step)
  chex.assert_trees_all_equal(resumed, straight)
  chex.assert_trees_all_equal(m_resumed, m_straight)


def test_one_device_equals_eight_devices():
  assert jax.device_count() == 8
  mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  step = jax.jit(_train_step)
  state = train.init(jax.random.key(7), model_hp=CFG, train_hp=HP)
  batch = _batch(0, 0)
  one_state, one_metrics = step(jax.device_put(state, jax.devices()[0]), jax.device_put(batch, jax.devices()[0]),
                                _borders())
  sharded = jax.device_put(batch, NamedSharding(mesh, P("data")))
  assert len(sharded.x.sharding.device_set) == 8
  eight_state, eight_metrics = step(jax.device_put(state, NamedSharding(mesh, P())), sharded,
                                    jax.device_put(_borders(), NamedSharding(mesh, P())))
  chex.assert_trees_all_close(jax.device_get(eight_state), jax.device_get(one_state), rtol=1e-5, atol=1e-6)
  chex.assert_trees_all_close(jax.device_get(eight_metrics), jax.device_get(one_metrics), rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # reuses (or runs) the training above
def test_learning_curve_and_in_context_scores():
  first, state, _, _ = _trained()
  held_out = [_batch(1, i) for i in range(HELD_OUT)]
  curve = evaluation.learning_curve([(0, first.params), (STEPS, state.params)], held_out, _borders(), model_hp=CFG)
  np.testing.assert_array_equal(curve.steps, [0, STEPS])
  chex.assert_shape([curve.accuracy, curve.accuracy_se, curve.r2, curve.r2_se], (2,))
  scores = [_evaluate(state.params, b, _borders()) for b in held_out]
  summary = evaluation.summarise(scores)
  assert summary.num_classification + summary.num_regression >= 18
  np.testing.assert_allclose(curve.accuracy[1], summary.accuracy, rtol=1e-6)
  assert 0.0 <= summary.accuracy <= 1.0 and np.isfinite(summary.accuracy_se)
  pred = _predict(state.params, held_out[0], _borders())
  chex.assert_shape(pred.class_probs, (8, 128, CFG.num_classes))
  chex.assert_shape(pred.mean, (8, 128))
  chex.assert_trees_all_close(jnp.sum(pred.class_probs, -1), jnp.ones((8, 128)), atol=1e-5)
