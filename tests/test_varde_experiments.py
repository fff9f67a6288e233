"""The VarDE search experiments end to end through ``launch.runner.run`` at smoke size."""

import json
import os

import numpy as np
import pytest

from launch import registry
from launch import runner


def _run(name, arg, tmp_path, **overrides):
  exp = registry.get(name)
  config = exp.get_config(arg)
  config.update_from_flattened_dict(overrides)
  return exp, runner.run(config, str(tmp_path / name), log_summary=False)


@pytest.mark.slow  # ten searches compiled (minutes on 2 busy cores)
def test_backups_ablation_tunes_evaluates_and_checks_the_scale(tmp_path):
  exp, res = _run("varde_backups", "smoke", tmp_path)
  assert set(res["evaluation"]) == {"tree_high_noise", "gridworld"}
  rules_ = res["evaluation"]["tree_high_noise"]["rules"]
  assert set(rules_) == {"uct", "varde", "varde_mean", "varde_softmax_mean"}
  for rows in rules_.values():
    for r in rows.values():
      assert np.isfinite([r["mean"], r["se"], r["diff"], r["diff_se"]]).all()
  assert all(r["diff"] == 0.0 for r in rules_["uct"].values())  # UCT is the reference of the paired differences
  assert set(res["tuning"]["uct_c"].values()) <= {0.5, 1.0}
  assert set(res["scale_check"]["scales"]) == {"return_std", "none"}
  md = exp.to_markdown(res)
  assert "UCT's mean regret by c" in md and "Scale check" in md and "VarDE default" in md
  assert "| gridworld |" in exp.to_headline(res)
  again = runner.run(exp.get_config("smoke"), str(tmp_path / "varde_backups"), log_summary=False)
  assert again["evaluation"] == res["evaluation"]  # a finished run resumes to the same results


@pytest.mark.slow  # 2048 searches of both searchers compiled
def test_2048_plays_paired_games_and_reports_the_difference(tmp_path):
  exp, res = _run("varde_2048", "smoke", tmp_path)
  row = res["table"]["4"]
  assert set(row) == {"varde", "mctx_stochastic"}
  assert row["varde"]["score_diff"] == [0.0, 0.0]
  assert len(res["games"]["mctx_stochastic/8"]["score"]) == 4
  assert all(m <= 10 for m in res["games"]["varde/8"]["moves"])
  assert "mctx stochastic MuZero" in exp.to_markdown(res)
  with open(os.path.join(tmp_path, "varde_2048", "results.json")) as f:
    assert json.load(f)["num_games"] == 4


@pytest.mark.parametrize("name", ["varde_mcts", "varde_bpi"])
def test_tables_show_paired_clustered_differences_to_varde(name, tmp_path):
  envs = ("tree_high_noise", "gridworld") if name == "varde_mcts" else ("riverswim", "gridworld")
  algs = {"policies": ("varde", "uct")} if name == "varde_mcts" else {"algorithms": ("varde", "varde_no_floor")}
  exp, res = _run(name, "smoke", tmp_path, envs=envs, **algs)
  other = list(algs.values())[0][1]
  for env in envs:
    for r in res["regret"][env][other].values():
      assert np.isfinite(r["diff_se"]) and r["clusters"] == (8 if env.startswith("tree") else r["runs"])
    for r in res["regret"][env]["varde"].values():
      assert r["diff"] == 0.0
  assert "paired difference to `varde`" in exp.to_markdown(res)
