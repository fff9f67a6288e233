"""Demo, report and benchmark scripts: their wiring and the benchmark's peer."""

import functools
import importlib
import json
import math
import os
import re
import subprocess
import sys
import time

import chex
import jax
import numpy as np
import pytest
from scipy import stats

from envs import bandits
from launch import demo
from launch import mesh as mesh_lib
from launch import registry
from launch import report
from launch import runner
from launch.bench import __main__ as bench_main
from launch.bench import timing
from launch.bench import varde_arrays
from launch.bench import varde_bai as varde_bai_bench
from launch.bench import varde_numpy
from launch.configs import varde_bai as varde_config
from launch.experiments.varde import bai as varde_bai
from methods import varde


def test_demo_and_report_entries_name_valid_configs(repo_root):
  for name, arg, overrides in demo.DEMOS + demo.EXTRAS:
    config = demo.demo_config(name, arg, overrides)
    runner.validate(config)
    for key, value in overrides.items():
      assert functools.reduce(lambda c, k: c[k], key.split("."), config) == value, (name, key)
    runner.validate(demo.demo_config(name, arg, overrides, preset="smoke"))
  found = set()
  for path in report.documents(repo_root):
    with open(os.path.join(repo_root, path)) as f:
      found.update(name for name, _ in report.blocks(f.read()))
  for name, (experiment, arg, _) in report.REPORTS.items():
    runner.validate(registry.get(experiment).get_config(arg))
  # every block has a maker, every maker a block
  assert {n.removesuffix(report.HEADLINE) for n in found} == set(report.REPORTS) | set(report.BENCH_BLOCKS)
  assert set(registry.NAMES) <= {entry[0] for entry in demo.DEMOS + demo.EXTRAS}


def test_demo_overrides_name_their_keys():
  """A demo override of a key the config lacks is an error naming the key; ``--preset`` drops the overrides."""
  with pytest.raises(KeyError, match='Key "budget" does not exist'):
    demo.demo_config("varde_bai", "cpu,problem=E1", {"budget": (150,)})
  assert demo.demo_config("reg", "cpu", {"algorithms": ("bc",)}).algorithms == ("bc",)
  assert demo.demo_config("reg", "cpu", {"algorithms": ("bc",)}, preset="smoke").algorithms != ("bc",)
  assert demo.describe("cpu,tasks=pendulum", {"algorithms": ("iql", "bc")}) == \
      "cpu,tasks=pendulum --config.algorithms=('iql','bc')"
  assert demo.describe("cpu,tasks=pendulum", {"algorithms": ("bc",)}, preset="smoke") == "smoke,tasks=pendulum"


def test_demo_jobs_run_each_command_and_name_the_failures(tmp_path, capsys):
  """``run_parallel``: every command runs, its output printed whole, its stderr in its log; failures are named."""
  py = sys.executable
  slow = "import sys, time; time.sleep(0.5); print('slow out'); print('slow err', file=sys.stderr)"
  commands = [("slow", [py, "-c", slow]),
              ("fails", [py, "-c", "import sys; print('half'); print('boom', file=sys.stderr); sys.exit(3)"]),
              ("fast", [py, "-c", "print('fast out')"])]
  failed = demo.run_parallel(commands, jobs=2, log_dir=str(tmp_path))
  out = capsys.readouterr().out
  assert failed == ["fails"]
  assert "slow out" in out and "fast out" in out and "half" in out
  assert "[demo] fails: FAILED (exit code 3)" in out and "boom" in out  # the end of its log
  assert out.count("[demo] ") == 6 and "[demo] fast: done" in out and "[demo] slow: done" in out
  assert (tmp_path / "slow.log").read_text().strip() == "slow err"
  assert (tmp_path / "fast.log").read_text() == ""


def test_bench_markdown_has_ratio():
  rows = [{"benchmark": "b", "ours": 200.0, "peer": 2.0, "unit": "runs/s", "peer_name": "p", "ratio": 100.0, "notes": "n"}]
  md = bench_main.to_markdown(rows, "header")
  assert "**100x**" in md and md.startswith("header")


def test_bench_sets_up_its_devices_before_any_benchmark_starts_jax(tmp_path, python_env):
  """``python -m launch.bench --cpu_devices=2`` reaches its own checks: no import has started JAX's backends."""
  out = subprocess.run([sys.executable, "-m", "launch.bench", "--cpu_devices=2", "--only=no_such_bench",
                        f"--out={tmp_path}"], env=python_env, capture_output=True, text=True, timeout=300)
  assert out.returncode != 0 and "benchmarks are" in out.stderr, out.stderr[-2000:]
  assert "RuntimeError" not in out.stderr
  for module in bench_main.BENCHES.values():
    assert callable(importlib.import_module(module).run)


def test_bench_runs_each_benchmark_in_a_process_of_its_own(tmp_path, python_env):
  """``--isolate`` (the default): the child's rows reach the table; a child that fails is named, with its rerun."""
  cmd = [sys.executable, "-m", "launch.bench", "--only=varde_mcts", "--quick", "--cpu_devices=2"]
  ok = subprocess.run([*cmd, f"--out={tmp_path / 'ok'}"], env=python_env, capture_output=True, text=True, timeout=600)
  assert ok.returncode == 0, ok.stderr[-3000:]
  with open(tmp_path / "ok" / "bench.json") as f:
    table = json.load(f)
  with open(tmp_path / "ok" / "parts" / "varde_mcts" / "bench.json") as f:
    part = json.load(f)
  assert table["rows"] == part["rows"] and len(table["rows"]) >= 2
  assert "(quick sizes)" in table["header"] and "incomplete" not in table["header"]
  assert table["devices"] == "2 CPU devices", table["devices"]
  (tmp_path / "bad").mkdir()
  (tmp_path / "bad" / "parts").write_text("a file where the benchmarks' folder goes")
  bad = subprocess.run([*cmd, f"--out={tmp_path / 'bad'}"], env=python_env, capture_output=True, text=True, timeout=600)
  assert bad.returncode != 0
  assert "benchmark 'varde_mcts' failed" in bad.stderr and "--noisolate --only=varde_mcts" in bad.stderr, bad.stderr[-3000:]


def test_numpy_and_hand_fused_peers_are_the_same_algorithm_statistically():
  """The NumPy loop, the hand-fused JAX arrays (threefry or hash draws) and the project's VarDE agree on E1's error."""
  means = bandits.problem_means("E1")
  n_np = 1500
  p_np = varde_numpy.error_rate(means.astype(np.float64), 150, n_np, tau=0.1)
  config = varde_config.get_config("smoke")
  config.algorithms, config.varde.taus = ("varde",), (0.1,)
  config.num_seeds = config.chunk_size = 8000
  mesh = mesh_lib.make_mesh()
  _, _, fn = varde_bai.make_chunk_fn(config, mesh, 150, means)
  out = varde.SweepStats(*mesh_lib.to_host(fn(varde_bai.chunk_seed_ids(config, mesh, 0))))
  p_jax = float(out.errors[0]) / 8000
  se = math.sqrt(p_np * (1 - p_np) / n_np + p_jax * (1 - p_jax) / 8000)
  assert abs(p_np - p_jax) < 4 * se, (p_np, p_jax, se)
  n_arrays = mesh_lib.padded_size(8000, mesh)
  rec = varde_arrays.make_sweep(means, 150, mesh, tau=0.1)(
      *varde_arrays.inputs(np.random.default_rng(3), means, n_arrays, mesh))
  chex.assert_shape(rec, (n_arrays,))
  p_arrays = float(np.mean(np.asarray(rec) != int(np.argmax(means))))
  se = math.sqrt(p_arrays * (1 - p_arrays) / n_arrays + p_jax * (1 - p_jax) / 8000)
  assert abs(p_arrays - p_jax) < 4 * se, (p_arrays, p_jax, se)
  rec = varde_arrays.make_sweep(means, 150, mesh, tau=0.1, noise="hash")(
      *varde_arrays.inputs(np.random.default_rng(4), means, n_arrays, mesh))
  p_hash = float(np.mean(np.asarray(rec) != int(np.argmax(means))))
  se = math.sqrt(p_hash * (1 - p_hash) / n_arrays + p_jax * (1 - p_jax) / 8000)
  assert abs(p_hash - p_jax) < 4 * se, (p_hash, p_jax, se)
  with pytest.raises(ValueError, match="noise='philox'"):
    varde_arrays.make_sweep(means, 150, mesh, noise="philox")


def _softmax_form(rng, means, budget, num_seeds, tau=0.1, var_floor=0.01):
  """VarDE's greedy rule as the paper writes it (softmax weights, ``[seeds, K]``), drawing as the peer draws."""
  k = len(means)
  stds, warm = varde_numpy.draw_problem(rng, means, num_seeds)
  count, total, total_sq = (np.zeros((num_seeds, k), np.float32) for _ in range(3))
  rows = np.arange(num_seeds)
  for t in range(budget):
    if t < warm.shape[1]:
      arm = warm[:, t]
    else:
      mean = total / count
      var = np.maximum((total_sq - count * mean * mean) / (count - 1), var_floor)
      w = np.exp(mean / tau - (mean / tau).max(axis=1, keepdims=True))
      w /= w.sum(axis=1, keepdims=True)
      arm = np.argmax(w * w * var / (count * (count + 1)), axis=1)
    reward = means[arm] + stds[rows, arm] * rng.standard_normal(num_seeds, dtype=np.float32)
    count[rows, arm] += 1
    total[rows, arm] += reward
    total_sq[rows, arm] += reward * reward
  return np.argmax(total / count, axis=1), count


def test_vectorised_peer_log_domain_rule_pulls_what_the_softmax_rule_pulls():
  """The NumPy peer's ``[K, seeds]`` log-domain score picks the softmax form's arms, seed for seed."""
  means = bandits.problem_means("E1").astype(np.float32)
  rec, counts = varde_numpy.varde_vectorised(np.random.default_rng(5), means, 150, 3000)
  ref_rec, ref_counts = _softmax_form(np.random.default_rng(5), means, 150, 3000)
  chex.assert_shape(counts, (3000, len(means)))
  np.testing.assert_array_equal(counts.sum(axis=1), 150)
  # float rounding may break a near-tie the other way and then the two runs part: a few seeds at most
  assert np.mean(np.all(counts == ref_counts, axis=1)) > 0.99
  assert np.mean(rec == ref_rec) > 0.99
  with pytest.raises(ValueError, match="warm_start=1"):
    varde_numpy.varde_vectorised(np.random.default_rng(0), means, 150, 10, warm_start=1)
  with pytest.raises(ValueError, match="warm_start=1"):
    varde_arrays.make_sweep(means, 150, mesh_lib.make_mesh(), warm_start=1)


def test_reward_draws_row_draws_what_each_kernel_draws():
  """``make_draws`` sums the rewards the sweep (``envs.bandits.pull``) or the hand-fused kernel would draw."""
  means = bandits.problem_means("E1")
  k, budget = len(means), 23
  mesh = mesh_lib.make_mesh()
  n = mesh_lib.padded_size(4, mesh)
  keys = jax.random.split(jax.random.key(7), n)
  arms = bandits.Arms(means=means.astype(np.float32), stds=means.astype(np.float32), df=math.inf)
  common = np.asarray(varde_arrays.make_draws(means, budget, mesh, kind="common")(keys))
  plain = np.asarray(varde_arrays.make_draws(means, budget, mesh, kind="fused")(keys))
  for i in range(n):
    want = sum(float(bandits.pull(arms, keys[i], t % k, t // k)) for t in range(budget))
    np.testing.assert_allclose(common[i], want, rtol=1e-5, atol=1e-5)
    want = sum(float(jax.random.normal(jax.random.fold_in(keys[i], t))) for t in range(budget))
    np.testing.assert_allclose(plain[i], want, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="kind='philox'"):
    varde_arrays.make_draws(means, budget, mesh, kind="philox")


def test_the_hash_floor_draws_standard_normals():
  """The hash floor's rewards are standard normals, independent over pulls and seeds (KS on sums and single draws)."""
  mesh = mesh_lib.make_mesh()
  n = mesh_lib.padded_size(4096, mesh)
  keys = jax.random.split(jax.random.key(3), n)
  for budget in (1, 64):
    sums = np.asarray(varde_arrays.make_draws(np.zeros(10), budget, mesh, kind="hash")(keys)) / math.sqrt(budget)
    assert stats.kstest(sums, "norm").pvalue > 1e-3, budget


def test_timed_repeats_short_calls_until_min_seconds():
  """At least ``repeats`` warm calls; more while they total under ``min_seconds``; never past ``max_repeats``."""
  calls = []
  fn = lambda x: calls.append(x) or x + 1  # noqa: E731
  t = timing.timed(fn, 1, repeats=3, min_seconds=0.0)
  assert t.output == 2 and len(calls) == 1 + 3 and t.calls == 3 and 0 <= t.warm and 0 <= t.cold and 0 <= t.cpu
  calls.clear()
  assert timing.timed(fn, 1, repeats=3, min_seconds=3600.0, max_repeats=7).calls == 7
  assert len(calls) == 1 + 7


def test_timed_cpu_is_the_process_cpu_time_of_the_best_call():
  """A sleeping call takes wall time and almost no CPU; a call that burns CPU is charged it, on a busy machine too."""
  def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
      pass

  asleep, busy = timing.timed_together([(time.sleep, (0.05,)), (spin, (0.05,))], repeats=2, min_seconds=0.0)
  assert asleep.warm >= 0.05 and asleep.cpu < 0.5 * asleep.warm
  assert busy.cpu >= 0.05 and busy.warm > 0
  assert asleep.calls == busy.calls == 2


def test_timed_together_alternates_the_calls():
  """One cold call each, then rounds of every call in turn; each gets its own output and times."""
  calls = []
  a = lambda: calls.append("a") or "A"  # noqa: E731
  b = lambda x: calls.append("b") or x  # noqa: E731
  ta, tb = timing.timed_together([(a, ()), (b, ("B",))], repeats=2, min_seconds=0.0)
  assert (ta.output, tb.output) == ("A", "B") and calls == ["a", "b"] * 3 and ta.warm >= 0 and tb.warm >= 0


def test_timed_together_warms_up_with_the_cheaper_arguments():
  """With ``warmup``, each cold call takes its warm-up arguments; the warm calls and the output take the real ones."""
  calls = []

  def fn(seconds):
    calls.append(seconds)
    time.sleep(seconds)
    return seconds

  (t,) = timing.timed_together([(fn, (0.05,))], repeats=2, min_seconds=0.0, warmup=[(0.0,)])
  assert calls == [0.0, 0.05, 0.05] and t.output == 0.05 and t.warmed_up
  assert t.warm >= 0.05 and t.compile_seconds == t.cold < t.warm
  (plain,) = timing.timed_together([(fn, (0.0,))], repeats=1, min_seconds=0.0)
  assert not plain.warmed_up and plain.compile_seconds == plain.cold - plain.warm
  with pytest.raises(ValueError, match="warmup has 2 argument tuples for 1 calls"):
    timing.timed_together([(fn, (0.0,))], warmup=[(0.0,), (0.0,)])


def test_varde_bai_bench_runs_every_row_at_quick_size():
  """``make bench``'s VarDE rows at ``--quick`` size: four rows, each ratio the quotient of its two rates."""
  rows = varde_bai_bench.run(quick=True)
  assert len(rows) == 4
  for row in rows:
    assert row["ours"] > 0 and row["peer"] > 0 and math.isclose(row["ratio"], row["ours"] / row["peer"])
  assert "against NumPy vectorised over seeds" in rows[2]["benchmark"] and "alternating rounds" in rows[2]["notes"]
  parts = re.findall(r"(no draws|one arm|neither) ([0-9.]+)x", rows[2]["notes"])
  assert [name for name, _ in parts] == list(varde_bai_bench.ABLATIONS) and all(float(x) > 0 for _, x in parts)
