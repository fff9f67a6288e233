r"""Compares two ``varde_bai`` runs of the same config: error rates before and after a code change.

  python -m launch.experiments.varde_compare \
      --pair=runs/varde_bai_old/varde_bai_E1,runs/report/varde_bai_E1 [--pair=...] \
      [--block=varde_bai_compare --readme=README.md]

Each ``--pair`` is ``OLD_WORKDIR,NEW_WORKDIR`` (or ``LABEL=OLD,NEW``): two runs of
the same config and seeds, e.g. one with the committed code (from a
``git worktree`` of the old commit) and one with the working tree. For every
algorithm and budget the old and new probabilities of error are compared with
``z = (p_new - p_old) / sqrt(se_old^2 + se_new^2)``, the standard error of the
difference of two independent estimates (conservative here: both runs share
instances and reward tables, which correlates them positively). Algorithms whose
random stream did not change have identical error counts and allocations.
The table lists the paper's budgets; a line per run summarises all its budgets.
"""

from __future__ import annotations

import json
import math
import os

from absl import app
from absl import flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the flags (only when run as a script: the module stays importable)."""
  flags.DEFINE_multi_string("pair", [], "OLD_WORKDIR,NEW_WORKDIR (optionally LABEL=OLD,NEW).")
  flags.DEFINE_string("block", None, "README results block to fill (none: print only).")
  flags.DEFINE_string("readme", "README.md", "README to rewrite.")


def load(workdir: str) -> dict:
  with open(os.path.join(workdir, "results.json")) as f:
    return json.load(f)


def compare(old: dict, new: dict) -> list[dict]:
  """One row per (budget, algorithm) present in both runs."""
  for key in ("experiment", "problem", "means", "num_seeds", "reference"):
    if old.get(key) != new.get(key):
      raise ValueError(f"the runs differ in {key!r}: {old.get(key)!r} vs {new.get(key)!r}")
  rows = []
  budgets = [b for b in old["budgets"] if b in new["budgets"]]
  for budget in budgets:
    key = str(budget)
    for name in old["algorithms"]:
      if name not in new["algorithms"]:
        continue
      o, n = old["error"][name][key], new["error"][name][key]
      diff = n["p"] - o["p"]
      se = math.sqrt(o["se"] ** 2 + n["se"] ** 2)
      rows.append({
          "budget": budget,
          "algorithm": name,
          "old": o["p"],
          "old_se": o["se"],
          "new": n["p"],
          "new_se": n["se"],
          "diff": diff,
          "z": diff / se if se > 0 else 0.0,
          "runs": n["runs"],
          "identical": o["p"] == n["p"] and old["shares"][key][name] == new["shares"][key][name],
      })
  return rows


def markdown(pairs: list[tuple[str, dict, list[dict]]]) -> str:
  """One table: a row per algorithm, a column per (run, paper budget); then a summary per run.

  Args:
    pairs: ``(label, old results, compare rows)`` per compared pair of runs.
  """
  columns = []  # (label, problem, budget, {algorithm: row})
  for label, old, rows in pairs:
    paper = [b for b in old["paper_budgets"] if any(r["budget"] == b for r in rows)]
    for budget in paper or sorted({r["budget"] for r in rows})[:1]:
      columns.append((label, old["problem"], budget, {r["algorithm"]: r for r in rows if r["budget"] == budget}))
  names = []
  for _, _, _, by_name in columns:
    names += [n for n in by_name if n not in names]
  head = [
      f"{label or problem} T={budget} ({next(iter(d.values()))['runs']:,} seeds)"
      for label, problem, budget, d in columns
  ]
  out = [
      "Error % with the old / new code (same seeds) and z of the difference:\n",
      "| algorithm | " + " | ".join(head) + " |",
      "|---|" + "---:|" * len(columns),
  ]
  for name in names:
    cells = []
    for _, _, _, by_name in columns:
      r = by_name.get(name)
      cells.append("" if r is None else f"{100 * r['old']:.2f} / {100 * r['new']:.2f} ({r['z']:+.1f})")
    out.append(f"| `{name}` | " + " | ".join(cells) + " |")
  out.append("")
  for label, old, rows in pairs:
    same = sum(r["identical"] for r in rows)
    budgets = sorted({r["budget"] for r in rows})
    out.append(
        f"- {label or old['problem']} (T = {', '.join(map(str, budgets))}; {old['num_seeds']:,} seeds): "
        f"{same} of {len(rows)} (algorithm, budget) pairs have identical error counts and allocations; "
        f"largest |z| {max((abs(r['z']) for r in rows), default=0.0):.1f}."
    )
  return "\n".join(out) + "\n"


def main(argv):
  del argv
  from launch import report  # pylint: disable=g-import-not-at-top

  pairs = []
  for pair in FLAGS.pair:
    label, _, dirs = pair.rpartition("=")
    old_dir, new_dir = dirs.split(",")
    old, new = load(old_dir), load(new_dir)
    pairs.append((label, old, compare(old, new)))
  cmd = "python -m launch.experiments.varde_compare " + " ".join(f"--pair={p}" for p in FLAGS.pair)
  if FLAGS.block:
    cmd += f" --block={FLAGS.block}"
  body = markdown(pairs) + f"\n_Produced by `{cmd}`._\n"
  print(body)
  if FLAGS.block:
    with open(FLAGS.readme) as f:
      text = f.read()
    with open(FLAGS.readme, "w") as f:
      f.write(report.replace_block(text, FLAGS.block, body))
    print(f"updated block {FLAGS.block}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
