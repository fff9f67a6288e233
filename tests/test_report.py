"""``launch.report``: blocks in the README and docs, provenance lines, and the staleness check."""

import os
import subprocess

import pytest

from launch import provenance
from launch import report


def test_replace_block_rewrites_only_its_block():
  text = "a\n<!-- results:x -->\nold\n<!-- /results:x -->\nb\n<!-- results:y -->\nkeep\n<!-- /results:y -->\n"
  out = report.replace_block(text, "x", "new table")
  assert "new table" in out and "old" not in out and "keep" in out
  assert dict(report.blocks(out)) == {"x": "new table\n", "y": "keep\n"}
  with pytest.raises(ValueError, match="no block"):
    report.replace_block(text, "z", "t")


def test_produced_by_names_command_commit_and_config():
  line = report.produced_by("cmd", {"commit": "a" * 40, "modified": [], "config_hash": "b" * 64}, "blk")
  assert "`cmd`" in line and f"at commit `{'a' * 12}`" in line and f"config `{'b' * 12}`" in line
  machine = {"devices": 2, "backend": "cpu", "device_kind": "cpu", "host_cores": 2, "jax": "0.1"}
  line = report.produced_by("cmd", {"commit": "a" * 40, "modified": [], "machine": machine}, "blk")
  assert "on 2 CPU devices, 2 host cores, JAX 0.1" in line, line
  gpu = dict(machine, devices=1, backend="gpu", device_kind="NVIDIA H100")
  line = report.produced_by("cmd", {"commit": "a" * 40, "modified": [], "machine": gpu}, "blk")
  assert "on 1 GPU device (NVIDIA H100), 2 host cores" in line, line
  dirty = report.produced_by("cmd", {"commit": "a" * 40, "modified": ["x.py"]}, "blk")
  assert "with uncommitted changes" in dirty
  outputs = ["README.md", "docs/varde.md", "docs/figures/varde_mcts_tree_regret.png"]
  assert "uncommitted" not in report.produced_by("cmd", {"commit": "a" * 40, "modified": outputs}, "blk")
  for code in ("docs/conf.py", "docs/sub/page.md", "launch/report.py"):
    line = report.produced_by("cmd", {"commit": "a" * 40, "modified": outputs + [code]}, "blk")
    assert "with uncommitted changes" in line, code


def _git(root, *args):
  subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def _commit_all(root, message):
  """Commits every file of the checkout at ``root``."""
  _git(root, "add", "-A")
  _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)


def _write(root, rel, text):
  path = os.path.join(root, rel)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


@pytest.fixture
def project(tmp_path, monkeypatch):
  """A tiny git checkout with one experiment: its config imports a method, the method a helper."""
  root = str(tmp_path)
  for pkg in ("launch", "launch/configs", "launch/experiments", "launch/experiments/toy", "methods", "methods/toy",
              "envs", "datasets", "docs"):
    _write(root, f"{pkg}/__init__.py", "")
  _write(root, "methods/toy/core.py", "X = 1\n")
  _write(root, "methods/toy/unused.py", "Y = 2\n")
  _write(root, "launch/configs/toy.py", "from methods.toy import core\n")
  _write(root, "launch/experiments/toy/run.py", "from launch.configs import toy\n")
  _git(root, "init", "-q")
  _commit_all(root, "init")
  commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
  monkeypatch.setitem(report.REPORTS, "toy_cpu", ("toy", "cpu", ()))
  monkeypatch.setitem(report.registry.MODULES, "toy", "launch.experiments.toy.run")
  line = report.produced_by("c", {"commit": commit, "modified": []}, "toy_cpu")
  _write(root, "README.md", f"<!-- results:toy_cpu -->\ntable\n{line}\n<!-- /results:toy_cpu -->\n")
  _write(root, "docs/gpu.md", "<!-- results:bench_gpu -->\n_Stale since 2026-12-01: no GPU._\n<!-- /results:bench_gpu -->\n")
  return root


def test_closure_follows_imports_through_config_and_method(project):
  files = report.closure_of("toy_cpu", project)
  assert "methods/toy/core.py" in files and "launch/configs/toy.py" in files
  assert "methods/toy/unused.py" not in files


def test_check_is_fresh_until_imported_code_changes(project):
  status = {(r["block"], r["status"]) for r in report.check(project)}
  assert status == {("toy_cpu", "fresh"), ("bench_gpu", "marked")}
  _write(project, "methods/toy/unused.py", "Y = 3\n")  # not imported by the experiment
  assert {r["status"] for r in report.check(project) if r["block"] == "toy_cpu"} == {"fresh"}
  _write(project, "methods/toy/core.py", "X = 2\n")
  (rec,) = [r for r in report.check(project) if r["block"] == "toy_cpu"]
  assert rec["status"] == "stale" and "methods/toy/core.py" in rec["detail"]


def test_a_docstring_or_comment_alone_does_not_stale_a_block(project):
  _write(project, "methods/toy/core.py", '"""The toy method."""\n\n# one constant\nX = 1  # unchanged\n')
  assert {r["status"] for r in report.check(project) if r["block"] == "toy_cpu"} == {"fresh"}
  _write(project, "methods/toy/core.py", '"""The toy method."""\nX = "1"\n')  # a string that is not a docstring
  (rec,) = [r for r in report.check(project) if r["block"] == "toy_cpu"]
  assert rec["status"] == "stale" and "methods/toy/core.py" in rec["detail"]


def test_code_of_drops_docstrings_of_modules_classes_and_functions_only():
  a = '"""m."""\nclass C:\n  """c."""\n  def f(self):\n    """f."""\n    return "s"\n'
  b = 'class C:\n\n  def f(self):  # note\n    return "s"\n'
  assert provenance.code_of(a) == provenance.code_of(b)
  assert provenance.code_of(a) != provenance.code_of(b.replace('"s"', '"t"'))
  assert provenance.code_of('def f():\n  """only a docstring."""\n') == provenance.code_of("def f():\n  pass\n")
  assert provenance.code_of("def (") is None


def _bench_table(commit, ratios, date="2026-12-01"):
  rows = "".join(f"| {name} | 1 | 1 | peer | **{r}** | notes |\n" for name, r in ratios.items())
  return (f"Measured {date} on x86_64.\n\n| benchmark | this project | peer | peer is | ratio | notes |\n"
          f"|---|---:|---:|---|---:|---|\n{rows}\n_Produced by `make bench` at commit `{commit}`._\n")


def test_a_benchmark_block_shows_the_ratios_of_its_earlier_tables(project, tmp_path, monkeypatch):
  doc = os.path.join(project, "docs", "benchmarks.md")
  tables = [("a" * 12, {"sweep": "2.0x", "search": "1.5x"}), ("a" * 12, {"sweep": "2.0x", "search": "1.5x"}),
            ("b" * 12, {"sweep": "2.1x"}), ("c" * 12, {"sweep": "1.9x", "search": "0.8x"})]
  for i, (commit, ratios) in enumerate(tables):  # the same table committed twice counts once
    _write(project, "docs/benchmarks.md", f"# B\n\n<!-- results:bench -->\n{_bench_table(commit, ratios)}"
           f"<!-- /results:bench -->\n{i}\n")
    _commit_all(project, f"table {i}")
  earlier = report.earlier_tables("docs/benchmarks.md", "bench", project)
  assert [(c, r) for _, c, r in earlier] == [("ccccccc", {"sweep": "1.9x", "search": "0.8x"}),
                                             ("bbbbbbb", {"sweep": "2.1x"}),
                                             ("aaaaaaa", {"sweep": "2.0x", "search": "1.5x"})]
  assert len(report.earlier_tables("docs/benchmarks.md", "bench", project, limit=2)) == 2
  out = tmp_path / "bench"
  out.mkdir()
  (out / "bench.md").write_text(_bench_table("d" * 12, {"sweep": "2.2x", "search": "1.1x"}).split("\n_Produced")[0])
  monkeypatch.chdir(project)
  body = report._bench_body(str(out), "bench")
  docs_text, readme_text = body("docs/benchmarks.md"), body("README.md")
  assert "| sweep | 2.2x | 1.9x | 2.1x | 2.0x |" in docs_text and "| search | 1.1x | 0.8x | - | 1.5x |" in docs_text
  assert "2026-12-01 `ccccccc`" in docs_text and "Ratios of the same rows" not in readme_text
  assert readme_text.rstrip().endswith("--only=none`)._") and os.path.exists(doc)
  # Rewritten from the run of the newest committed table, that table is not its own predecessor.
  (out / "bench.json").write_text('{"provenance": {"commit": "%s", "modified": []}}' % ("c" * 40))
  again = report._bench_body(str(out), "bench")("docs/benchmarks.md")
  assert "`ccccccc`" not in again.split("_Produced by")[1] and "| sweep | 2.2x | 2.1x | 2.0x |" in again
  # Committed with its history under it, a table's ratios are its own, not a column of that history.
  (out / "bench.json").write_text('{"provenance": {"commit": "%s", "modified": []}}' % ("d" * 40))
  table_d = report._bench_body(str(out), "bench")("docs/benchmarks.md")
  assert "Ratios of the same rows" in table_d
  _write(project, "docs/benchmarks.md", f"# B\n\n<!-- results:bench -->\n{table_d}\n"
         "<!-- /results:bench -->\n")
  _commit_all(project, "table d, with its history")
  newest = report.earlier_tables("docs/benchmarks.md", "bench", project)[0]
  assert newest[1:] == ("ddddddd", {"sweep": "2.2x", "search": "1.1x"})


def test_check_flags_unknown_commits_and_missing_lines(project):
  _write(project, "docs/toy.md", "<!-- results:toy_cpu -->\nno provenance\n<!-- /results:toy_cpu -->\n"
         "<!-- results:reg_cpu -->\nat commit `0123456789ab`\n<!-- /results:reg_cpu -->\n")
  recs = {r["block"]: r for r in report.check(project) if r["file"] == "docs/toy.md"}
  assert recs["toy_cpu"]["status"] == "stale" and "no commit" in recs["toy_cpu"]["detail"]
  assert recs["reg_cpu"]["status"] == "stale" and "not in this checkout's history" in recs["reg_cpu"]["detail"]


def test_state_reads_the_commit_and_modified_files(project):
  s = provenance.state(project)
  assert len(s["commit"]) == 40 and s["modified"] == []
  _write(project, "methods/toy/core.py", "X = 5\n")
  assert provenance.state(project)["modified"] == ["methods/toy/core.py"]


def test_each_experiment_imports_only_its_own_method_and_the_shared_code():
  """A method's change stales only its own blocks: no experiment's import closure reaches another method.

  (Were ``launch.errors`` to name a ModelSMC error type by importing ``methods.model_smc.expr``,
  whose package imports all of ModelSMC, a ModelSMC change would mark every block stale.)
  """
  root = provenance.ROOT
  graph = provenance.import_graph(root)
  methods = sorted(d for d in os.listdir(os.path.join(root, "methods"))
                   if os.path.isfile(os.path.join(root, "methods", d, "__init__.py")) and d != "common")
  for experiment, module in report.registry.MODULES.items():
    closure = provenance.import_closure([module, f"launch.configs.{experiment}"], root, graph)
    used = {f.split("/")[1] for f in closure if f.startswith("methods/") and f.count("/") >= 2} - {"common"}
    own = [m for m in methods if experiment == m or experiment.startswith(m + "_")]
    assert used == set(own), (experiment, sorted(used))


def test_the_launchers_error_types_import_no_reader_or_environment():
  """``launch.errors`` (imported by every experiment) reaches only packages and modules of error types.

  Were it to import a reader (``envs.mdp_files``, ``datasets.offline_rl.d4rl``) to name its
  error type, a change to that reader would mark every block stale.
  """
  root = provenance.ROOT
  closure = provenance.import_closure(["launch.errors"], root, provenance.import_graph(root))
  assert "launch/errors.py" in closure
  others = sorted(f for f in closure if os.path.basename(f) not in ("__init__.py", "errors.py"))
  assert not others, others
