"""The ``reg`` experiment: config validation, a smoke run, NaN handling, SIGKILL + resume, learning."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datasets.offline_rl import d4rl
from envs import classic_control
from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import runner
from launch.configs import reg as reg_config
from launch.experiments.reg import experiment as reg_exp
from launch.experiments.reg import report as reg_report


def _smoke(tmp_path, **overrides):
  config = reg_config.get_config("smoke")
  config.algorithms = ("iql", "reg_opg")
  config.num_updates = 200
  config.data.data_dir = str(tmp_path / "data")
  config.mesh.data = 2
  config.update_from_flattened_dict(overrides)
  return config


def test_config_errors_are_named():
  config = reg_config.get_config("smoke")
  config.agent.hiden = (3,)
  config.reg.ambiguity = "kappa"
  config.reg.regularizer = "kl"
  with pytest.raises(config_schema.ConfigError, match="unknown key 'agent.hiden'; did you mean 'hidden'"):
    runner.validate(config)
  config = reg_config.get_config("smoke")
  config.algorithms = ("iql", "cql")
  config.agent.expectile = 1.5
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  assert "'algorithms': element 1: 'cql' is not allowed" in str(e.value)
  assert "'agent.expectile'" in str(e.value)
  config = reg_config.get_config("smoke")
  config.reg.ambiguity = "kappa"
  config.reg.regularizer = "chi2"
  config.num_updates = 250
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  assert "'reg.regularizer'" in str(e.value) and "'num_updates'" in str(e.value)
  with pytest.raises(ValueError, match="unknown config option 'task'"):
    reg_config.get_config("cpu,task=pendulum")
  for preset in ("smoke", "cpu", "paper"):
    runner.validate(reg_config.get_config(preset))


def test_smoke_run_results_figures_and_resume(tmp_path):
  config = _smoke(tmp_path)
  work = str(tmp_path / "run")
  reg_exp.chunk_fn.cache_clear()  # other tests' runs (other dataset sizes) share the cache
  res = runner.run(config, work)
  assert set(res["scores"]["pendulum-medium"]) == {"iql", "reg_opg"}
  for a in ("iql", "reg_opg"):
    s = res["scores"]["pendulum-medium"][a]
    assert len(s["per_seed"]) == 2 and np.isfinite(s["mean"]) and s["se"] >= 0
    assert len(res["curves"]["pendulum-medium"][a]["mean"]) == 1
    assert len(res["param_digest"]["pendulum-medium"][a]) == 64
    # One compilation for every chunk of the unit.
    assert reg_exp.chunk_fn(reg_config.agent_hparams(config, a), config.updates_per_chunk, _mesh(2))._cache_size() == 1
  assert os.path.exists(os.path.join(work, "learning_curves.png"))
  with open(os.path.join(work, "results.json")) as f:
    assert json.load(f)["datasets"] == ["pendulum-medium"]
  info = res["dataset_info"]["pendulum-medium"]
  assert info["random_return"] < info["expert_return"] and info["transitions"] > 19_000
  lines = [json.loads(x) for x in open(os.path.join(work, "metrics.jsonl"))]
  assert [r["step"] for r in lines] == list(range(1, 5))
  assert "pendulum-medium" in reg_report.format_table(res)
  md = reg_report.markdown_table(res)
  assert "| dataset | `iql` | `reg_opg` |" in md and "| IQL | 48.31 |" in md
  # A second run of the finished workdir restores the final checkpoint and reproduces the results.
  again = runner.run(config, work)
  assert again["param_digest"] == res["param_digest"] and again["scores"] == res["scores"]
  # Keys come from the dataset's name and the seed: an algorithm run alone gives the same run.
  alone = runner.run(_smoke(tmp_path, algorithms=("reg_opg",)), str(tmp_path / "alone"))
  assert alone["param_digest"]["pendulum-medium"]["reg_opg"] == res["param_digest"]["pendulum-medium"]["reg_opg"]
  assert alone["scores"]["pendulum-medium"]["reg_opg"] == res["scores"]["pendulum-medium"]["reg_opg"]


def _mesh(n):
  from launch import mesh as mesh_lib  # pylint: disable=g-import-not-at-top

  return mesh_lib.make_mesh(n)


@pytest.mark.parametrize("where", ["state", "metrics"])
def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, where):
  config = _smoke(tmp_path, algorithms=("iql",))
  original = reg_exp.chunk_fn
  calls = {"n": 0}

  def poisoned(hp, num_updates, mesh):
    fn = original(hp, num_updates, mesh)

    def wrapped(state, data, size):
      state, m = fn(state, data, size)
      calls["n"] += 1
      if calls["n"] == 2:
        if where == "state":
          state = state._replace(critic=jax.tree.map(lambda x: x * jnp.nan, state.critic))
        else:
          m = dict(m, critic_loss=m["critic_loss"] * jnp.inf)
      return state, m

    return wrapped

  monkeypatch.setattr(reg_exp, "chunk_fn", poisoned)
  work = str(tmp_path / "run")
  with pytest.raises(ckpt_lib.NonFiniteError) as e:
    runner.run(config, work)
  msg = str(e.value)
  assert "step 2" in msg and "last good checkpoint (step 1) is kept" in msg
  assert ("train/critic/params" in msg) if where == "state" else ("metrics/critic_loss" in msg)
  ck = ckpt_lib.Checkpointer(os.path.join(os.path.abspath(work), "checkpoints"))
  assert ck.all_steps() == [1]
  step, state, _ = ck.restore(None)
  assert step == 1 and not ckpt_lib.non_finite_leaves(state)
  ck.close()


def _launch(work, data_dir, env, extra=()):
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/reg.py:smoke", f"--workdir={work}",
         "--cpu_devices=2", "--config.algorithms=('iql','reg_opg')", "--config.num_updates=300",
         f"--config.data.data_dir={data_dir}", *extra]
  return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_sigkill_mid_run_resumes_bit_identical(tmp_path, repo_root, python_env, kill_and_resume):
  data_dir = str(tmp_path / "data")
  # killed once a checkpoint of the first unit is sealed, mid-run
  a, b, _, lines, _ = kill_and_resume(lambda work: _launch(work, data_dir, python_env), tmp_path, 2, timeout=600)
  assert a["param_digest"] == b["param_digest"]  # parameters bit for bit
  assert a["scores"] == b["scores"] and a["curves"] == b["curves"]
  assert lines == list(range(1, 7))  # the rewound metrics were rewritten once each


@pytest.mark.slow
def test_every_algorithm_learns_on_a_pendulum_dataset(tmp_path):
  """Final normalised score above the uniform random policy's by more than 3 standard errors.

  On pendulum-expert, 5 seeds, 2,000 updates. ``reg_opg_perp`` (the pure orthogonal
  step, an ablation) is left out: it never follows the BC gradient, so from a random
  initialisation it does not approach the data (it scores below random at this budget).
  """
  config = reg_config.get_config("cpu,tasks=pendulum,kinds=expert")
  config.algorithms = tuple(a for a in reg_config.ALGORITHMS if a != "reg_opg_perp")
  config.num_seeds = 5
  config.num_updates = 2000
  config.updates_per_chunk = 1000
  config.data.classic_transitions = 20_000
  config.data.data_dir = str(tmp_path / "data")
  config.mesh.data = 1
  work = str(tmp_path / "run")
  res = runner.run(config, work)
  # Q stays bounded: |Q| <= max|r| / (1 - gamma) (Pendulum's reward is at least -16.3 per step), with slack.
  bound = 2 * 16.3 * res["dataset_info"]["pendulum-expert"]["reward_scale"] / (1 - config.agent.discount)
  for line in open(os.path.join(work, "metrics.jsonl")):
    r = json.loads(line)
    assert r.get("q_abs_max", 0.0) < bound, r
  # The random policy under the same protocol: num_seeds x final_eval_episodes episodes.
  task = classic_control.make("pendulum")
  ep = jax.jit(lambda k: classic_control.rollout(task, classic_control.behaviour_policy(task, random_prob=1.0), k,
                                                 config.num_seeds * config.final_eval_episodes))(jax.random.key(7))
  info = res["dataset_info"]["pendulum-expert"]
  rand = d4rl.normalized_score(np.asarray(classic_control.returns(ep)), info["random_return"], info["expert_return"])
  per_seed = rand.reshape(config.num_seeds, -1).mean(1)
  r_mean, r_se = per_seed.mean(), per_seed.std(ddof=1) / np.sqrt(config.num_seeds)
  for a in config.algorithms:
    s = res["scores"]["pendulum-expert"][a]
    assert s["mean"] - r_mean > 3 * np.hypot(s["se"], r_se), (a, s, r_mean, r_se)


def test_paired_differences_remove_the_shared_seed_effect():
  """Seed effects shared by two algorithms cancel in the paired s.e., not in the unpaired one."""
  rng = np.random.default_rng(0)
  names, n = ["a", "b", "c"], 8
  seed_effect = rng.normal(0.0, 10.0, (len(names), n))
  ref = 50.0 + seed_effect
  other = ref + 2.0 + rng.normal(0.0, 0.5, ref.shape)
  res = {"algorithms": ["iql", "reg_opg"], "datasets": names, "num_seeds": n, "num_updates": 10,
         "scores": {d: {"reg_opg": {"per_seed": ref[i].tolist()}, "iql": {"per_seed": other[i].tolist()}}
                    for i, d in enumerate(names)}, "average": {},
         "dataset_info": {d: {"score": reg_report.NORMALISED} for d in names}}
  for a, x in (("reg_opg", ref), ("iql", other)):
    res["average"][a] = {"mean": float(x.mean()), "se": float(np.sqrt(np.sum(x.std(1, ddof=1) ** 2 / n)) / len(names))}
  p = reg_report.paired_differences(res)
  d = p["differences"]["iql"]
  diff = (other - ref).mean(0)
  assert p["reference"] == "reg_opg" and set(p["differences"]) == {"iql"}
  np.testing.assert_allclose([d["mean"], d["se"]], [diff.mean(), diff.std(ddof=1) / np.sqrt(n)], rtol=1e-12)
  assert abs(d["mean"] - 2.0) < 4 * d["se"] and d["se"] < d["se_unpaired"] / 5
  res["paired"] = p
  head = reg_report.headline_table(res)
  assert "| average |" in head and f"| minus `reg_opg` | {diff.mean():+.1f} ± {d['se']:.1f} | - |" in head
