"""VarDE on problems of the user's own: budgets, names, scales and sizes that are refused by key, or run right."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from launch import config_schema
from launch import errors
from launch import runner
from launch.configs import varde_bai as bai_config
from launch.configs import varde_mcts as mcts_config
from launch.experiments.varde import search
from methods.varde import core


def _custom(means, stds=(), algorithms=("varde", "uniform"), reference="varde_tau0.1", **overrides):
  config = bai_config.get_config("smoke,problem=custom")
  config.means, config.stds, config.budgets = means, stds, (60,)
  config.algorithms, config.reference = algorithms, reference
  config.varde.taus = (0.1,)
  config.num_seeds = config.chunk_size = 64
  config.mesh.data = 2
  for k, v in overrides.items():
    section, _, key = k.rpartition(".")
    (config[section] if section else config)[key] = v
  return config


def _refused(config) -> str:
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  line = errors.one_line(e.value)
  assert "\n" not in line
  return line


def test_a_sweep_without_any_varde_variant_runs_and_resumes(tmp_path):
  """No VarDE variant: no Neyman shares to tally (an empty array, which the checkpoint must not store)."""
  config = _custom((0.5, 0.4, 0.3), algorithms=("uniform", "ucbe"), reference="uniform")
  first = runner.run(config, str(tmp_path / "run"))
  again = runner.run(config, str(tmp_path / "run"))
  assert set(first["error"]) == {"uniform", "ucbe_c2", "ucbe_c4", "ucbe_c8"}
  assert [e["runs"] for e in first["error"]["uniform"].values()] == [64]
  assert again["error"] == first["error"]


@pytest.mark.parametrize("algorithm, overrides, words", [
    ("ttts", {"baselines.warm_start": 30}, "ttts: warm_start=30 needs 90 pulls > budget=60"),
    ("ocba", {"baselines.warm_start": 30}, "ocba: warm_start=30 needs 90 pulls > budget=60"),
    ("gapev", {"means": tuple(np.linspace(1.0, 0.0, 31))}, "gapev: the warm start of 2 pulls per arm needs 62 pulls"),
    ("ucbe", {"means": tuple(np.linspace(1.0, 0.0, 61))}, "ucbe: the warm start of 1 pull per arm needs 61 pulls"),
])
def test_a_budget_below_a_baselines_warm_start_is_refused(algorithm, overrides, words):
  overrides = dict(overrides)
  means = overrides.pop("means", (0.5, 0.4, 0.3))
  line = _refused(_custom(means, algorithms=("uniform", algorithm), reference="uniform", **overrides))
  assert "'budgets': T=60: " + words in line, line


def test_temperatures_that_print_alike_get_distinct_names_and_repeats_are_refused():
  config = _custom((0.5, 0.4, 0.3), **{"varde.taus": (0.1, 0.1000001)})
  names, _, _ = bai_config.algorithm_suite(config, 3, 60)
  assert names == ["varde_tau0.1", "varde_tau0.1000001", "uniform"]
  assert "'varde.taus'" in _refused(_custom((0.5, 0.4, 0.3), **{"varde.taus": (0.1, 0.1)}))
  assert "'baselines.ucbe_c'" in _refused(
      _custom((0.5, 0.4, 0.3), algorithms=("uniform", "ucbe"), reference="uniform", **{"baselines.ucbe_c": (2.0, 2.0)}))


def test_a_temperature_that_overflows_the_scores_names_varde_taus():
  line = _refused(_custom((0.5, 0.4, 0.3), **{"varde.taus": (1e-40,)}))
  assert "'varde.taus': tau=1e-40 makes VarDE's scores" in line and "use tau >=" in line, line
  line = _refused(_custom((1e17, 9e16), (1.0, 1.0), std_mode="fixed", **{"varde.taus": (1e-22,)}))
  assert "'varde.taus'" in line, line


@pytest.mark.parametrize("scale", [1e-7, 1e-4, 1e15])
def test_the_gap_hardness_does_not_depend_on_the_rewards_scale(scale):
  """UCB-E's and UGapE's rate ``c (T - K) / H1`` is the same for rewards of any unit."""
  means = jnp.asarray([0.5, 0.45, 0.43, 0.4, 0.1], jnp.float32)
  base = core.Oracle.from_means(means, means).hardness
  scaled = core.Oracle.from_means(means * scale, means * scale).hardness
  np.testing.assert_allclose(float(scaled) * scale**2, float(base), rtol=1e-5)


def test_wrong_decisions_are_counted_relative_to_the_rewards_scale():
  regret = jnp.asarray([[0.0, 2e-5, 2e-5, 2e-11]])
  scale = jnp.asarray([1.0, 1.0, 10.0, 1e-6])
  t = search.tally(regret, jnp.ones(4, bool), jnp.arange(4), 4, scale=scale)
  assert int(t.wrong[0]) == 2  # 2e-5 > 1e-5 * 1 and 2e-11 > 1e-5 * 1e-6; 2e-5 < 1e-5 * 10


def test_a_tree_too_large_to_build_names_its_keys():
  config = mcts_config.get_config("smoke,envs=tree")
  config.env.tree_branching, config.env.tree_depth = 100, 8
  line = _refused(config)
  assert "'env.tree_branching'" in line and "lower env.tree_branching or env.tree_depth" in line, line
