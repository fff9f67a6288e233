"""GraphPFN attribute prior and tasks against the paper's description (Sec. 3.2): standardised features and
regression targets, binary thresholds at the drawn quantile, multiclass labels in range, task kinds drawn
uniformly. The reference's generator is not ported here; its departures are named in methods/graphpfn/scm.py."""

import functools

import jax
import numpy as np
from scipy import stats

from launch.configs import graphpfn_prior as prior_config
from methods import graphpfn

B = 32  # the smoke preset's batch size: one compilation shared with the prior and experiment tests


@functools.lru_cache(maxsize=None)
def _batches():
  sh, ah = prior_config.hparams_of(prior_config.get_config("smoke"))
  fn = graphpfn.batch_fn(sh, ah)
  out = [jax.tree.map(np.asarray, fn(jax.random.split(jax.random.key(20 + i), B))) for i in range(3)]
  return jax.tree.map(lambda *x: np.concatenate(x), *out), ah


def test_features_and_regression_targets_are_standardised():
  s, _ = _batches()
  for i in range(len(s.task)):
    valid = s.graph.node_mask[i]
    x = s.x[i][valid][:, s.feature_mask[i]]
    np.testing.assert_allclose(x.mean(0), 0.0, atol=1e-3)
    np.testing.assert_allclose(x.std(0), 1.0, atol=1e-3)
    assert not np.any(s.x[i][:, ~s.feature_mask[i]])
    if s.task[i] == graphpfn.REGRESSION:
      y = s.y[i][valid]
      assert abs(y.mean()) < 1e-3 and (abs(y.std() - 1.0) < 1e-3 or y.std() == 0)


def test_class_labels_follow_the_drawn_thresholds():
  """Binary: ``y = y_raw > quantile_q``, so at most ``n - 1 - floor(q (n - 1))`` positives (ties can only lower it);
  multiclass: labels in ``[0, num_classes)``, ``num_classes`` in the configured range."""
  s, ah = _batches()
  seen = 0
  for i in range(len(s.task)):
    valid = s.graph.node_mask[i]
    y, n = s.y[i][valid], int(valid.sum())
    if s.task[i] == graphpfn.BINARY:
      q = float(s.attributes.binary_quantile[i])
      assert set(np.unique(y)) <= {0.0, 1.0} and y.sum() <= n - 1 - np.floor(q * (n - 1)) + 1e-6
      seen += 1
    elif s.task[i] == graphpfn.MULTICLASS:
      k = int(s.num_classes[i])
      assert ah.num_classes_min <= k <= ah.num_classes_max and np.all((y >= 0) & (y < k) & (y == np.round(y)))
  assert seen > 0


def test_task_kinds_are_drawn_uniformly():
  s, ah = _batches()
  counts = np.bincount(s.task, minlength=3)
  assert len(ah.tasks) == 3 and stats.chisquare(counts).pvalue > 1e-3, counts
