"""The ``model_smc`` experiment: config validation, data loaders, a smoke run, resumption."""

import json
import os

import numpy as np
import pytest

from datasets import population
from launch import config_schema
from launch import runner
from launch.configs import model_smc as smc_config
from launch.experiments.model_smc import report as model_smc_report
from launch.experiments.model_smc import sampler as sampler_lib
from methods.model_smc import smc


def _config(arg="smoke,task=pelts", **overrides):
  config = smc_config.get_config(arg)
  for key, value in overrides.items():
    node = config
    parts = key.split(".")
    for p in parts[:-1]:
      node = node[p]
    with node.ignore_type():
      node[parts[-1]] = value
  return config


@pytest.mark.parametrize("overrides,words", [
    ({"tempering.num_particle": 3}, "unknown key 'tempering.num_particle'; did you mean 'num_particles'"),
    ({"tempering.num_particles": "64"}, "'tempering.num_particles' = '64' has type str"),
    ({"tempering.target_ess": 1.5}, "'tempering.target_ess'"),
    ({"prior.move_probs": (0.5, 0.5)}, "'prior.move_probs'"),
    ({"reference.resample_threshold": 0.0}, "'reference.resample_threshold'"),
    ({"tempering.num_runs": 0}, "'tempering.num_runs'"),
    ({"tempering.candidate_prob": 0.95}, "'tempering.candidate_prob': candidate_prob + the final phase's prior_prob"),
    ({"final.elite_prob": 1.0}, "'final.elite_prob'"),
    ({"final.num_elites": 1}, "'final.num_elites'"),
    ({"final.moves": -1.0}, "'final.moves'"),
    ({"final.max_sweeps": 0}, "'final.max_sweeps'"),
    ({"final.local_search_steps": 0}, "'final.local_search_steps'"),
    ({"final.prior_prob": 0.9}, "'final.prior_prob'"),
    ({"fit.evidence": "waic"}, "allowed values: ['laplace', 'bic', 'heldout']"),
    ({"library": ("a*hare", "__import__('os')")}, "library[1]"),
    ({"library": ("a*hare", "a*hare^lynx")}, "exponent must be"),
    ({"library": ("a*hare", "hare*b")}, "repeats another body"),
    ({"proposal": "llm"}, "evidence_weighted"),
    ({"num_fit": 21}, "'num_fit'"),
    ({"baselines": ("sindy", "sindy")}, "duplicate"),
    ({"baselines": ("gp",)}, "'baselines'"),
    ({"problem.noise": "poisson"}, "'problem.noise'"),
    ({"posterior.method": "nuts"}, "'posterior.method'"),
    ({"posterior.num_samples": 1}, "'posterior.num_samples'"),
])
def test_bad_configs_fail_before_compute_naming_the_key(overrides, words, tmp_path):
  config = _config(**overrides)
  with pytest.raises(config_schema.ConfigError) as info:
    runner.run(config, str(tmp_path / "w"))
  assert words in str(info.value)
  assert not os.path.exists(tmp_path / "w")


def test_unknown_task_and_presets():
  with pytest.raises(ValueError, match="unknown task"):
    smc_config.get_config("smoke,task=mars")
  for task in smc_config.TASKS:
    for preset in ("smoke", "cpu", "paper"):
      config = smc_config.get_config(f"{preset},task={task}")
      if task == "csv":
        with pytest.raises(config_schema.ConfigError, match="task=csv needs a file"):
          runner.validate(config)
        config.data.path = "methods/model_smc/examples/oscillator.csv"
      runner.validate(config)


def test_data_tables_and_their_errors(tmp_path):
  pelts = population.load_pelts()
  assert pelts.values.shape == (21, 2) and pelts.times[0] == 1900 and pelts.times[-1] == 1920
  assert pelts.columns == ("hare", "lynx") and pelts.values[3, 1] == 35.2 and "Howard" in pelts.citation
  flu = population.load_influenza()
  assert flu.values.shape == (14, 2) and flu.values[:, 0].max() == 298 and "1978" in flu.citation
  good = "year,hare,lynx\n1900,30,4\n1901,47.2,6.1\n1902,70.2,9.8\n"
  cases = {
      "missing.csv": (None, "does not exist"),
      "header.csv": ("year,lynx,hare\n1900,1,2\n1901,1,2\n1902,1,2\n", "header"),
      "text.csv": (good.replace("47.2", "n/a"), "line 3: hare='n/a' is not a number"),
      "negative.csv": (good.replace("6.1", "-6.1"), "non-negative"),
      "nan.csv": (good.replace("6.1", "nan"), "finite"),
      "fields.csv": (good + "1903,1\n", "line 5: 2 fields"),
      "gap.csv": (good.replace("1902", "1904"), "equal steps"),
      "short.csv": ("year,hare,lynx\n1900,1,2\n", "at least 3"),
  }
  for name, (text, words) in cases.items():
    path = tmp_path / name
    if text is not None:
      path.write_text(text)
    with pytest.raises(population.DataError, match=words):
      population.load_pelts(str(path))
  (tmp_path / "ok.csv").write_text(good)
  assert population.load_pelts(str(tmp_path / "ok.csv")).values.shape == (3, 2)


@pytest.fixture(scope="module")
def pelts_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("model_smc") / "pelts")
  return workdir, runner.run(_config(), workdir)


@pytest.mark.slow
def test_smoke_run_writes_results_and_figures(pelts_run):
  workdir, results = pelts_run
  with open(os.path.join(workdir, "results.json")) as f:
    on_disk = json.load(f)
  assert on_disk["task"] == "pelts" and on_disk["smc"]["final_beta"] == 1.0
  top = on_disk["smc"]["top"]
  assert top and abs(sum(r["mass"] for r in top) - 1.0) < 1.0 + 1e-9
  for row in top:
    assert set(row) >= {"mass", "equations", "log_evidence", "heldout_lpd", "coverage50", "coverage90", "params"}
  diag = on_disk["smc"]["diagnostics"]
  assert diag and set(diag[0]) >= {"beta", "ess", "resampled", "acceptance", "unique", "mass", "log_normalizer"}
  assert diag[-1]["beta"] == 1.0
  comparison = on_disk["comparison"]
  assert any(k.startswith("hill climbing") for k in comparison) and any(k.startswith("PySINDy") for k in comparison)
  assert on_disk["hill_climb"]["proposals"] == on_disk["smc"]["proposals"]
  for row in comparison.values():
    for k in ("coverage50", "coverage90"):
      assert 0.0 <= float(row[k]) <= 1.0
  for fig in ("predictive_bands", "posterior_mass", "diagnostics"):
    assert os.path.getsize(os.path.join(workdir, f"{fig}.png")) > 1000
  assert results["smc"]["proposals"] == on_disk["smc"]["proposals"]
  health = on_disk["fit_health"]
  assert health["structures"] == on_disk["smc"]["fits"] and health["restarts_per_fit"] == 2
  assert on_disk["init_scale"] == "log"
  assert "restarts never finite" in model_smc_report.format_table(on_disk)


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_result(pelts_run, tmp_path, monkeypatch):
  _, reference = pelts_run
  workdir = str(tmp_path / "resumed")
  real_progress = sampler_lib._progress  # pylint: disable=protected-access
  calls = {"n": 0}

  def killed_at_the_second_step(*args, **kwargs):  # after step 1's checkpoint, before step 2's
    calls["n"] += 1
    if calls["n"] == 2:
      raise KeyboardInterrupt("killed")
    return real_progress(*args, **kwargs)

  monkeypatch.setattr(sampler_lib, "_progress", killed_at_the_second_step)
  with pytest.raises(KeyboardInterrupt):
    runner.run(_config(), workdir)
  assert os.path.isdir(os.path.join(workdir, "checkpoints", "1"))
  monkeypatch.setattr(sampler_lib, "_progress", real_progress)
  resumed = runner.run(_config(), workdir)
  a, b = reference["smc"], resumed["smc"]
  assert [r["key"] for r in a["top"]] == [r["key"] for r in b["top"]]
  np.testing.assert_allclose([r["mass"] for r in a["top"]], [r["mass"] for r in b["top"]], rtol=1e-9)
  assert a["proposals"] == b["proposals"] and a["fits"] == b["fits"]
  assert reference["hill_climb"]["key"] == resumed["hill_climb"]["key"]
  for name, row in reference["comparison"].items():
    np.testing.assert_allclose(float(row["heldout_lpd"]), float(resumed["comparison"][name]["heldout_lpd"]),
                               rtol=1e-4)
  # A rerun of a finished run does no sampling again.
  monkeypatch.setattr(smc, "step_gen", lambda *a, **k: pytest.fail("the sampler ran again"))
  again = runner.run(_config(), workdir)
  assert [r["key"] for r in again["smc"]["top"]] == [r["key"] for r in b["top"]]


def test_mala_parameter_intervals_are_a_config_choice(tmp_path):
  """posterior.method=mala: the reported structures' and the truth's 90% intervals come from MALA chains."""
  config = _config("smoke,task=lv_sim", **{
      "posterior.method": "mala", "posterior.num_chains": 2, "posterior.num_warmup": 20,
      "posterior.num_samples": 40, "baselines": (), "tempering.num_runs": 1, "predictive.top_k": 2})
  results = runner.run(config, str(tmp_path / "mala"))
  assert results["parameter_intervals"]["method"] == "mala"
  assert results["parameter_intervals"]["num_samples"] == 40
  rows = [row for r in results["smc"]["top"] for row in r["params"].values()]
  assert rows and {row["interval"] for row in rows} <= {"mala", "none"}
  assert any(row["interval"] == "mala" and row["lo90"] < row["median"] < row["hi90"] for row in rows)
  assert all(r["intervals"]["method"] == "mala" and "rhat" in r["intervals"] for r in results["smc"]["top"])
  truth = results["truth"]
  assert truth["interval_method"] == "mala" and "mala_rhat" in truth
  assert all(p["interval"] in ("mala", "none") for p in truth["params"].values())
  text = model_smc_report.format_table(results)
  assert "parameter intervals: mala" in text and "90% intervals (mala" in text
  assert "Parameter intervals: mala" in model_smc_report.markdown_table(results)
  # The smoke preset keeps Laplace (no chains to compile); its record says so.
  assert smc_config.get_config("smoke,task=lv_sim").posterior.method == "laplace"
