r"""Regenerates the results blocks of the README and ``docs/`` from real runs, and finds stale ones.

  python -m launch.report --run --only=varde_bai_E1   # run (or resume) one block's experiment, rewrite it
  python -m launch.report --run                        # every block
  python -m launch.report                              # rewrite every block from existing runs
  python -m launch.report --check                      # list blocks whose code changed since they were made
  python -m launch.report --bench=runs/bench --only=none                       # the CPU benchmark table
  python -m launch.report --bench=runs/bench_gpu --bench_block=bench_gpu --only=none

Each entry of :data:`REPORTS` names a block, delimited by
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` in ``README.md`` or
any ``docs/*.md`` (a block may appear in several files, e.g. a headline table
in the README and in its method's page; every copy is rewritten), and the
experiment config that produces it. With ``--run`` the experiment runs into
``<runs>/<NAME>`` (resuming if it is there); the block is then rewritten from
that run's ``results.json`` with the experiment's Markdown table, the figures
copied into ``docs/figures``, and a "Produced by" line that gives the command,
the commit and the config hash of the run (from its ``provenance.json``).

A benchmark block (``--bench``) outside the README also shows each row's ratio
in the earlier tables of the same block, read from git's history of the
document (:func:`earlier_tables`), so that prose never copies numbers from one
table to the next by hand.

A block named ``NAME.headline`` holds the experiment's short headline table
(``Experiment.headline``) of the same run as block ``NAME``, without figures:
the README shows these, the method's docs page the full block.

``--check`` reads every block's "Produced by" line and lists the blocks whose
code -- the project modules the experiment imports, directly or not -- differs
between that commit and the working tree, and the blocks made from uncommitted
code (the documents and figures this module writes are outputs, not code). A
block that cannot be regenerated here (the GPU benchmarks without a GPU
machine) carries a line ``_Stale since YYYY-MM-DD: reason._``; it is listed
as marked stale, not as silently out of date. Run the experiments from a clean
checkout, so that the recorded commit is the code that ran.
"""

import json
import os
import re
import shutil
import sys
from typing import Callable, Iterator, Optional

from absl import app
from absl import flags

from launch import distributed
from launch import provenance
from launch import registry
from launch import runner
from launch.bench import __main__ as bench_main

# Block -> (experiment, get_config argument, figures to copy).
_VARDE_FIGURES = ("error_vs_budget", "allocation_shares")
REPORTS = {
    "varde_bai_E1": ("varde_bai", "cpu,problem=E1", _VARDE_FIGURES),
    "varde_bai_E2": ("varde_bai", "cpu,problem=E2", _VARDE_FIGURES),
    "varde_bai_E3": ("varde_bai", "cpu,problem=E3", _VARDE_FIGURES),
    "varde_bai_E4": ("varde_bai", "cpu,problem=E4", _VARDE_FIGURES),
    "varde_mcts_tree": ("varde_mcts", "cpu,envs=tree", ("regret_vs_budget", "wrong_vs_budget")),
    "varde_mcts_mdp": ("varde_mcts", "cpu,envs=mdp", ("regret_vs_budget", "wrong_vs_budget")),
    "varde_bpi": ("varde_bpi", "cpu", ("regret_vs_budget",)),
    "varde_backups": ("varde_backups", "cpu", ()),
    "varde_2048": ("varde_2048", "cpu", ()),
    "model_smc_exact": ("model_smc", "cpu,task=exact", ("exact_check",)),
    "model_smc_lv_sim": ("model_smc", "cpu,task=lv_sim", ("predictive_bands", "posterior_mass")),
    "model_smc_pelts": ("model_smc", "cpu,task=pelts", ("predictive_bands", "posterior_mass", "diagnostics")),
    "model_smc_flu": ("model_smc", "cpu,task=flu", ("predictive_bands", "posterior_mass")),
    "model_smc_calibration": ("model_smc_calibration", "cpu", ()),
    "model_smc_fit_panel": ("model_smc_fit_panel", "cpu", ()),
    "reg_cpu": ("reg", "cpu", ("learning_curves",)),
    "flow_matching_cpu": ("flow_matching", "cpu", ("sample_grid", "t_split_curves", "data_reduction")),
    "flow_matching_mini": ("flow_matching", "cpu,mini=1", ("sample_grid", "t_split_curves", "data_reduction")),
    "graphpfn_prior_cpu": ("graphpfn_prior", "cpu", ("degrees", "statistics", "graphs")),
    "graphpfn_model_cpu": ("graphpfn", "cpu", ("curve",)),
}
# Blocks written from a `launch.bench` output directory (``--bench``).
BENCH_BLOCKS = ("bench", "bench_gpu")
BENCH_MODULE = bench_main.__name__
HEADLINE = ".headline"
DOCS = "docs"
FIGURES = os.path.join(DOCS, "figures")

FLAGS = flags.FLAGS

_PRODUCED = re.compile(r"at commit `(?P<commit>[0-9a-f]{7,40})`(?P<dirty> with uncommitted changes)?")
_STALE = re.compile(r"_Stale since (?P<date>\d{4}-\d{2}-\d{2}): (?P<reason>.*?)_")


def define_flags() -> None:
  """Defines the flags (only when run as a script: the module stays importable)."""
  flags.DEFINE_string("runs", "runs/report", "Directory of the report runs.")
  flags.DEFINE_bool("run", False, "Run (or resume) the experiments first.")
  flags.DEFINE_bool("check", False, "List the blocks whose code changed since they were produced; write nothing.")
  flags.DEFINE_list("only", [], "Only these blocks.")
  flags.DEFINE_string("bench", None, "A `launch.bench` output dir: fills the `--bench_block` block.")
  flags.DEFINE_string("bench_block", "bench", "Block for `--bench`: `bench` (CPU, `make bench`) or "
                      "`bench_gpu` (a GPU machine's run).")
  flags.DEFINE_integer("cpu_devices", os.cpu_count() or 1, "CPU devices for JAX.")


def is_document(path: str) -> bool:
  """Whether ``path`` (relative to the root) may hold blocks: ``README.md`` or a ``docs/*.md``."""
  return path == "README.md" or (os.path.dirname(path) == DOCS and path.endswith(".md"))


def is_output(path: str) -> bool:
  """Whether ``path`` (relative to the root) is something this module writes: a document or a figure."""
  return is_document(path) or os.path.dirname(path) == FIGURES


def documents(root: str = ".") -> list[str]:
  """The files that may hold blocks (paths relative to ``root``), ``README.md`` first."""
  docs = os.path.join(root, DOCS)
  names = sorted(os.listdir(docs)) if os.path.isdir(docs) else []
  return ["README.md"] + [p for p in (os.path.join(DOCS, f) for f in names) if is_document(p)]


def _pattern(name: str) -> re.Pattern:
  return re.compile(rf"(<!-- results:{re.escape(name)} -->\n)(.*?)(<!-- /results:{re.escape(name)} -->)", re.S)


def blocks(text: str) -> Iterator[tuple[str, str]]:
  """``(name, body)`` of every block in ``text``."""
  for m in re.finditer(r"<!-- results:([\w.-]+) -->\n(.*?)<!-- /results:\1 -->", text, re.S):
    yield m.group(1), m.group(2)


def replace_block(text: str, name: str, body: str) -> str:
  """Replaces the content between the block's markers (which must exist)."""
  pattern = _pattern(name)
  if not pattern.search(text):
    raise ValueError(f"no block <!-- results:{name} --> ... <!-- /results:{name} -->")
  return pattern.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(3), text)


def _update(path: str, name: str, body_for) -> None:
  """Rewrites block ``name`` in ``path`` (re-read first, so that concurrent edits survive)."""
  with open(path) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write(replace_block(text, name, body_for(path)))
  print(f"updated block {name} in {path}")


def _holders(name: str, files: list[str]) -> list[str]:
  out = []
  for path in files:
    with open(path) as f:
      if _pattern(name).search(f.read()):
        out.append(path)
  return out


def produced_by(command: str, prov: Optional[dict], name: str) -> str:
  """The block's provenance line: command, commit, config hash, machine, how to regenerate.

  Uncommitted changes count only outside this module's own outputs: a
  ``--run`` of several blocks rewrites the documents between its runs, which
  changes no input of the next one.
  """
  where = ""
  if prov and prov.get("commit"):
    dirty = " with uncommitted changes" if any(not is_output(f) for f in prov.get("modified", ())) else ""
    where = f" at commit `{prov['commit'][:12]}`{dirty}"
    if prov.get("config_hash"):
      where += f", config `{prov['config_hash'][:12]}`"
  machine = (prov or {}).get("machine")
  if machine:  # a run reproduces bit for bit only on the same device and core counts (docs/running.md)
    devices, backend, kind = machine["devices"], machine["backend"], machine["device_kind"]
    where += (f", on {devices} {backend.upper()} device{'' if devices == 1 else 's'}"
              f"{'' if kind.lower() == backend.lower() else f' ({kind})'}, {machine['host_cores']} host cores, "
              f"JAX {machine['jax']}")
  return f"_Produced by `{command}`{where} (or `python -m launch.report --run --only={name}`)._"


def _read_json(path: str) -> Optional[dict]:
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def experiment_body(name: str, workdir: str, results: dict,
                    prov: Optional[dict]) -> tuple[Callable[[str], str], Callable[[str], str]]:
  """``path -> body`` of block ``name`` (figure links relative to ``path``) and of ``name.headline``."""
  experiment_name, arg, figures = REPORTS[name]
  os.makedirs(FIGURES, exist_ok=True)
  copied = []
  for fig in figures:
    src = os.path.join(workdir, f"{fig}.png")
    if os.path.exists(src):
      dst = os.path.join(FIGURES, f"{name}_{fig}.png")
      shutil.copyfile(src, dst)
      copied.append((fig, dst))
  command = f"python -m launch.main --config=launch/configs/{experiment_name}.py:{arg} --workdir=runs/{name}"
  experiment = registry.get(experiment_name)
  table = experiment.to_markdown(results)

  def body(path: str) -> str:
    links = [f"![{name} {fig}]({os.path.relpath(dst, os.path.dirname(path) or '.')})" for fig, dst in copied]
    return table + "\n" + produced_by(command, prov, name) + "\n\n" + "\n".join(links)

  def short(path: str) -> str:  # only blocks with a README headline ask for it
    del path
    return experiment.to_headline(results) + "\n" + produced_by(command, prov, name)

  return body, short


def closure_of(name: str, root: str = ".", graph=None) -> list[str]:
  """The files whose change makes block ``name`` stale (``graph``: ``provenance.import_graph(root)``)."""
  if name in BENCH_BLOCKS:
    return provenance.import_closure([BENCH_MODULE, *bench_main.BENCHES.values()], root, graph)
  experiment = REPORTS[name.removesuffix(HEADLINE)][0]
  return provenance.import_closure([registry.MODULES[experiment], f"launch.configs.{experiment}"], root, graph)


def check(root: str = ".") -> list[dict]:
  """One record per block copy: ``{"block", "file", "status", "detail"}``; status fresh | stale | marked."""
  out, graph = [], provenance.import_graph(root)
  for path in documents(root):
    with open(os.path.join(root, path)) as f:
      text = f.read()
    for name, body in blocks(text):
      rec = {"block": name, "file": path, "status": "stale", "detail": ""}
      marked, made = _STALE.search(body), _PRODUCED.search(body)
      if name.removesuffix(HEADLINE) not in REPORTS and name not in BENCH_BLOCKS:
        rec["detail"] = "no experiment in launch.report.REPORTS makes this block"
      elif marked:
        rec.update(status="marked", detail=f"since {marked['date']}: {marked['reason']}")
      elif not made:
        rec["detail"] = "no commit in its 'Produced by' line"
      elif made["dirty"]:
        rec["detail"] = f"made from uncommitted changes on {made['commit']}"
      else:
        changed = provenance.changed_files(made["commit"], closure_of(name, root, graph), root)
        if changed is None:
          rec["detail"] = f"commit {made['commit']} is not in this checkout's history"
        elif changed:
          rec["detail"] = f"changed since {made['commit']}: {', '.join(changed)}"
        else:
          rec.update(status="fresh", detail=f"commit {made['commit']}")
      out.append(rec)
  return out


HISTORY_TABLES = 6  # the earlier tables whose ratios are shown under a benchmark table
_RATIO_COLUMN = 4  # benchmark | this project | peer | peer is | ratio | notes
_MEASURED = re.compile(r"Measured (\d{4}-\d{2}-\d{2})")


def bench_ratios(body: str) -> dict[str, str]:
  """``{benchmark: ratio}`` (e.g. ``"2.08x"``) of the first table in a benchmark block's ``body`` (not of the
  :func:`history_table` under it, whose columns are earlier tables' ratios)."""
  out, rows = {}, False
  for line in body.splitlines():
    if rows and not line.startswith("|"):
      break
    rows = rows or line.startswith("|")
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    ratio = cells[_RATIO_COLUMN].strip("*") if len(cells) > _RATIO_COLUMN else ""
    if line.startswith("|") and re.fullmatch(r"[\d.e+-]+x", ratio):
      out[cells[0]] = ratio
  return out


def earlier_tables(path: str, name: str, root: str = ".", limit: int = HISTORY_TABLES,
                   current: str = "") -> list[tuple[str, str, dict]]:
  """``(date measured, commit measured, ratios)`` of the last ``limit`` distinct tables of benchmark block
  ``name`` committed in ``path`` (newest first), read from git's history of that file; a table measured
  at commit ``current`` (the one being written, when it is rewritten) is not an earlier one."""
  out, seen = [], {current[:12]} - {""}
  for commit in (provenance.git(["log", "--format=%H", "--", path], root) or "").split():
    text = provenance.git(["show", f"{commit}:{path}"], root) or ""
    body = dict(blocks(text)).get(name, "")
    made, measured = _PRODUCED.search(body), _MEASURED.search(body)
    ratios = bench_ratios(body)
    if not ratios or not made or made["commit"][:12] in seen:
      continue
    seen.add(made["commit"][:12])
    out.append((measured.group(1) if measured else "?", made["commit"][:7], ratios))
    if len(out) == limit:
      break
  return out


def history_table(current: dict, earlier: list[tuple[str, str, dict]]) -> str:
  """The ratio of each row of the ``current`` table in each ``earlier`` one ("-": no such row then)."""
  if not earlier:
    return ""
  head = " | ".join(f"{date} `{commit}`" for date, commit, _ in earlier)
  lines = [f"Ratios of the same rows in the {len(earlier)} table{'s' if len(earlier) > 1 else ''} before this one "
           "(newest first; read from this file's git history by `launch.report`):", "",
           f"| benchmark | this table | {head} |", "|---|---:|" + "---:|" * len(earlier)]
  for row, ratio in current.items():
    lines.append(f"| {row} | {ratio} | " + " | ".join(r.get(row, "-") for _, _, r in earlier) + " |")
  return "\n".join(lines)


def _bench_body(directory: str, name: str):
  """The block's text in a document: the table, the "Produced by" line and, outside the README, the ratios
  of the earlier tables (:func:`earlier_tables`)."""
  with open(os.path.join(directory, "bench.md")) as f:
    table = f.read()
  meta = _read_json(os.path.join(directory, "bench.json")) or {}
  prov = meta.get("provenance")
  command = "make bench" if name == "bench" else f"python -m launch.bench --out={directory}"
  line = produced_by(command, prov, name).replace(
      f"python -m launch.report --run --only={name}",
      f"python -m launch.report --bench={directory} --bench_block={name} --only=none")

  def body(path: str) -> str:
    text = table.rstrip() + "\n\n" + line
    if path == "README.md":
      return text
    earlier = earlier_tables(path, name, current=(prov or {}).get("commit") or "")
    history = history_table(bench_ratios(table), earlier)
    return text + ("\n\n" + history if history else "")

  return body


def main(argv):
  del argv
  files = documents()
  if FLAGS.check:
    records = check()
    for r in records:
      print(f"{r['status']:6}  {r['block']:28} {r['file']:28} {r['detail']}")
    stale = [r for r in records if r["status"] == "stale"]
    print(f"{len(stale)} stale of {len(records)} blocks"
          f" ({sum(r['status'] == 'marked' for r in records)} marked stale with a reason)")
    sys.exit(1 if stale else 0)
  distributed.setup(cpu_devices=FLAGS.cpu_devices)
  selected = [n for n in REPORTS if not FLAGS.only or n in FLAGS.only]
  missing = [n for n in selected if not _holders(n, files) and not _holders(n + HEADLINE, files)]  # before any run
  if missing:
    raise app.UsageError(f"no file of {files} holds the blocks {missing}")
  for name in selected:
    experiment_name, arg, _ = REPORTS[name]
    workdir = os.path.join(FLAGS.runs, name)
    if FLAGS.run:
      runner.run(registry.get(experiment_name).get_config(arg), workdir)
    results = _read_json(os.path.join(workdir, "results.json"))
    if results is None:
      raise app.UsageError(f"{workdir} has no results.json; run it with --run")
    body, short = experiment_body(name, workdir, results, _read_json(os.path.join(workdir, "provenance.json")))
    for path in _holders(name, files):
      _update(path, name, body)
    for path in _holders(name + HEADLINE, files):
      _update(path, name + HEADLINE, short)
  if FLAGS.bench:
    for path in _holders(FLAGS.bench_block, files):
      _update(path, FLAGS.bench_block, _bench_body(FLAGS.bench, FLAGS.bench_block))


if __name__ == "__main__":
  define_flags()
  app.run(main)
