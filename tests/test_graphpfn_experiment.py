"""The ``graphpfn_prior`` experiment (smoke run with its fidelity stages, resume, SIGKILL + resume), the verdict
tables on a constructed panel, and "the graph matters", statistically."""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from scipy import stats

from datasets.graphs import prior_builder
from launch import runner
from launch.bench import graphpfn_scm_oracle as scm_oracle
from launch.configs import graphpfn_prior as prior_config
from launch.experiments.graphpfn import fidelity
from launch.experiments.graphpfn import fidelity_report
from launch.experiments.graphpfn import prior
from methods import graphpfn


def test_smoke_run_results_figures_and_resume(tmp_path):
  config = prior_config.get_config("smoke")
  config.attribute_panel_graphs = 8  # off at smoke size (one more compilation); on here
  work = str(tmp_path / "run")
  n = 5  # a shard left by a killed build of other settings is not built into the examples
  stale = {"senders": np.arange(n - 1), "receivers": np.arange(1, n), "x": np.zeros((n, 2)), "y": np.zeros(n),
           "train_mask": np.arange(n) < 2, "task": 1, "num_classes": 2}
  prior_builder.stage(os.path.join(work, "data", prior.STAGED), 9, [(999, stale)])
  res = runner.run(config, work)
  assert res["num_graphs"] == 64
  stats = res["statistics"]
  assert stats["num_nodes"]["count"] == 64 and stats["mean_degree"]["mean"] > 1
  assert all(r["inside"] for r in res["hyperparameter_ranges"].values())
  assert res["tfds"]["examples"] == config.tfds_examples
  for fig in ("statistics.png", "graphs.png", "degrees.png"):
    assert os.path.exists(os.path.join(work, fig))
  # The fidelity stages: every sampler's tests, and probe rows of every task kind at both ratios.
  panel = res["two_sample"]
  assert set(panel["results"]) == {"reference", *graphpfn.VARIANTS} and panel["graphs"] == config.panel_graphs
  assert {(r["task"], r["graph_conv_ratio"]) for r in res["graph_matters"]["rows"]} == {
      (t, x) for t in graphpfn.TASKS for x in (0.0, 1.0)}
  attributes = res["attribute_panel"]
  assert attributes["graphs"] == 8 and [r["statistic"] for r in attributes["rows"]] == list(scm_oracle.SCM_STATS)
  table = prior_config_markdown(res)
  assert "Two-sample tests" in table and "Does the graph matter?" in table and "neighbours help" in table
  assert "against the reference's** (a NumPy port" in table and "| r2_gain | ks |" in table
  # A second run in the same workdir resumes from the last checkpoint: same numbers, no resampling.
  again = runner.run(config, work)
  assert again["statistics"] == json.loads(json.dumps(res["statistics"]))
  assert again["sampling_s"] == 0.0
  assert fidelity.verdicts(again["two_sample"]) == fidelity.verdicts(res["two_sample"])  # from two_sample.json
  assert again["graph_matters"]["rows"] == res["graph_matters"]["rows"]  # from probe.json
  assert again["attribute_panel"] == json.loads(json.dumps(attributes))  # from attribute_panel.json


def prior_config_markdown(results):
  return prior.EXPERIMENT.markdown(results) + prior.EXPERIMENT.headline(results)


def _fake_panel(reject_default: bool):
  def tests(reject):
    return [dict(statistic=k, test=t, value=0.1, p_value=1e-6 if reject and k == "clustering" else 0.5,
                 threshold=0.01 / 4, reject=reject and k == "clustering", n=10)
            for k in ("num_edges", "clustering") for t in ("ks", "signed_rank")]
  return {"graphs": 10, "alpha": 0.01, "statistics": ["num_edges", "clustering"],
          "results": {"reference": tests(reject_default), "no_cap": tests(True)}}


@pytest.mark.parametrize("reject_default", [False, True])
def test_verdicts_and_tables_of_a_constructed_panel(reject_default):
  panel = _fake_panel(reject_default)
  rows = fidelity.verdicts(panel)
  assert [r["variant"] for r in rows] == ["reference", "no_cap"]
  assert rows[0]["pass"] is (not reject_default) and rows[1]["rejected"] == ["clustering/ks", "clustering/signed_rank"]
  text = "\n".join(fidelity_report.verdict_table(panel) + fidelity_report.test_table(panel))
  assert "| `reference` |" in text and ("**pass**" in text) is (not reject_default)
  assert "| rejected |" in text  # the variant
  assert "**1.0e-06**" in text  # the variant's rejecting p-value, in bold


def test_graph_matters_statistically():
  """With graph_conv_ratio = 1 neighbour-averaged features raise the test R^2; with 0 they do not.

  Paired per graph over ~110 usable samples per arm, rank tests (the R^2
  gaps have long tails): the gap at ratio 1 is stochastically larger than at
  ratio 0 (one-sided Mann-Whitney p < 0.01) and positive (one-sided
  signed-rank p < 0.01); the gap at ratio 0 is not positive (p > 0.01).
  """
  config = prior_config.get_config("smoke")
  sh, ah = prior_config.hparams_of(config)
  # The experiment's probe sampler (same compilation): graph_conv_ratio drawn from (0, 1) per graph.
  hp = dataclasses.replace(ah, graph_conv_ratios=(0.0, config.probe_high_ratio), tasks=("regression",),
                           degree_input_prob=0.0, pagerank_input_prob=0.0, eigvec_input_prob=0.0)
  fn = graphpfn.batch_fn(sh, hp, True)
  ratio, d = [], []
  for seed in range(8):
    s, res = fn(jax.random.split(jax.random.key(100 + seed), config.batch_size))
    use = np.asarray(res.usable)
    ratio += list(np.asarray(s.attributes.graph_conv_ratio)[use])
    d += list(np.asarray(res.acc_graph - res.acc_plain)[use])
  ratio, d = np.asarray(ratio), np.asarray(d)
  d1, d0 = d[ratio == 1.0], d[ratio == 0.0]
  assert len(d1) > 80 and len(d0) > 80
  assert stats.mannwhitneyu(d1, d0, alternative="greater").pvalue < 0.01, (np.median(d1), np.median(d0))
  assert stats.wilcoxon(d1, alternative="greater").pvalue < 0.01, np.median(d1)
  assert stats.wilcoxon(d0, alternative="greater").pvalue > 0.01, np.median(d0)


def _launch(work, env):
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/graphpfn_prior.py:smoke", f"--workdir={work}",
         "--cpu_devices=2", "--config.num_graphs=96", "--config.batch_size=8", "--config.probe_graphs=0",
         "--config.tfds_examples=0", "--config.num_drawings=0", "--config.panel_graphs=0"]
  return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_sigkill_mid_run_resumes_bit_identical(tmp_path, python_env, kill_and_resume):
  """A run killed with SIGKILL between its 12 checkpointed batches resumes and ends with every graph's
  statistics and hyperparameters bit-identical to an uninterrupted run's (the runs share the test run's
  compilation cache: tests/conftest.py)."""
  # killed once a few batches are checkpointed and sealed, mid-run
  a, b, out, lines, _ = kill_and_resume(lambda work: _launch(work, python_env), tmp_path, 3, timeout=600)
  assert "resumed from checkpoint step" in out
  assert a["tallies_digest"] == b["tallies_digest"]  # every graph's row, bit for bit
  assert a["statistics"] == b["statistics"] and a["hyperparameter_ranges"] == b["hyperparameter_ranges"]
  assert b["sampling_s"] > 0  # the resumed run sampled the batches the killed one had not checkpointed
  assert lines == list(range(1, 13))  # the rewound metrics were rewritten once each
