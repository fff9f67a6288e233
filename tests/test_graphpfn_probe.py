"""The graph-matters probe on constructed tasks: neighbour signal found only with the graph arm, own signal found by
both arms, classification scored by accuracy; the summary's intervals."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import graphs
from methods.graphpfn.probe import probe, summarize
from methods.graphpfn import tasks

N, F = 200, 6


def _sample(kind: str):
  """A random 4-regular-ish graph, Gaussian features, and a target from the node's own or its neighbours' features."""
  r = np.random.default_rng(0)
  ring = np.arange(N)
  s = np.concatenate([ring, ring, r.integers(0, N, N)])
  d = np.concatenate([(ring + 1) % N, (ring + 7) % N, r.integers(0, N, N)])
  g = graphs.simplify(graphs.Graph(jnp.asarray(s, jnp.int32), jnp.asarray(d, jnp.int32), jnp.ones(len(s), bool),
                                   jnp.ones(N, bool)))
  x = jnp.asarray(r.normal(size=(N, F)), jnp.float32)
  signal = graphs.aggregate(g, x, "mean")[:, 0] if kind.startswith("neighbour") else x[:, 0]
  y = (signal - signal.mean()) / signal.std()
  task, classes = tasks.REGRESSION, 0
  if kind.endswith("class"):
    y, task, classes = (y > 0).astype(jnp.float32), tasks.BINARY, 2
  train = jnp.asarray(r.random(N) < 0.5)
  return tasks.Sample(g, x, jnp.ones(F, bool), y, train, jnp.int32(task), jnp.int32(classes), None, None, None,
                      jnp.bool_(True), None, None)


@pytest.mark.parametrize("kind", ["neighbour", "own", "neighbour_class"])
def test_probe_finds_the_signal_where_it_is(kind):
  res = jax.jit(probe, static_argnums=1)(_sample(kind), 2)
  plain, graph = float(res.acc_plain), float(res.acc_graph)
  assert bool(res.usable)
  if kind == "neighbour":
    assert graph > 0.8 and plain < 0.2, (plain, graph)
  elif kind == "own":
    assert plain > 0.9 and graph > 0.9 and abs(graph - plain) < 0.05, (plain, graph)
  else:
    assert graph > 0.7 and plain < 0.6, (plain, graph)


def test_summary_intervals():
  plain, graph = np.asarray([0.1, 0.2, 0.3, 0.4]), np.asarray([0.3, 0.3, 0.5, 0.5])
  s = summarize(plain, graph)
  d = graph - plain
  half = 1.96 * d.std(ddof=1) / 2
  assert s.n == 4 and math.isclose(s.gap, d.mean()) and math.isclose(s.gap_low, d.mean() - half)
  assert math.isclose(s.plain_ci, 1.96 * plain.std(ddof=1) / 2) and math.isclose(s.gap_median, np.median(d))
  assert 0 < s.p_graph_helps < 0.2
  with pytest.raises(ValueError, match="1 probed graphs"):
    summarize(plain[:1], graph[:1])
