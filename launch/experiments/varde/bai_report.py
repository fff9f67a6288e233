"""Results, tables and figures of the ``varde_bai`` experiment.

Statistics. With ``n`` runs, algorithm ``a``'s probability of error is
``p_a = errors_a / n`` with standard error ``sqrt(p_a (1 - p_a) / n)``. Runs
share common random numbers, so comparisons are paired: the per-run
difference ``d = 1[a errs] - 1[r errs]`` has mean ``p_a - p_r`` and
``E[d^2] = discord_ar / n``, giving the paired standard error
``sqrt((discord_ar / n - (p_a - p_r)^2) / n)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from envs import bandits
from launch import tables
from methods import varde


def _paired(t: varde.SweepStats, a: int, r: int) -> dict:
  n = max(int(t.runs), 1)
  diff = (float(t.errors[a]) - float(t.errors[r])) / n
  var = max(float(t.discord[a, r]) / n - diff**2, 0.0)
  se = math.sqrt(var / n)
  return {"diff": diff, "se": se, "z": diff / se if se > 0 else 0.0}


def summarize(config, budgets, names, neyman_names, tallies, means) -> dict:
  """``results.json`` content from the tallies.

  ``neyman_names`` are the algorithms whose Neyman limits were tallied, in
  the order of ``SweepStats.neyman``.
  """
  ref = names.index(config.reference)
  problem = bandits.PROBLEMS.get(config.problem)
  paper = tuple(problem.budgets) if problem else tuple(budgets)
  res: dict[str, Any] = {
      "experiment": "varde_bai",
      "problem": config.problem,
      "means": means.tolist(),
      "num_seeds": config.num_seeds,
      "budgets": list(budgets),
      "paper_budgets": list(paper),
      "algorithms": names,
      "reference": config.reference,
      "error": {n: {} for n in names},
      "vs_reference": {n: {} for n in names},
      "shares": {},
      "neyman_shares": {},
  }
  for i, budget in enumerate(budgets):
    t = tallies[f"T{budget}"]
    n = max(int(t.runs), 1)
    key = str(budget)
    for a, name in enumerate(names):
      p = float(t.errors[a]) / n
      res["error"][name][key] = {"p": p, "se": math.sqrt(p * (1 - p) / n), "runs": int(t.runs)}
      res["vs_reference"][name][key] = _paired(t, a, ref)
    res["shares"][key] = {
        name: (np.asarray(t.counts[a]) / (n * budget)).tolist() for a, name in enumerate(names)
    }
    res["neyman_shares"][key] = {
        nm: (np.asarray(t.neyman[j]) / n).tolist() for j, nm in enumerate(neyman_names)
    }
  return res


def headline_budgets(results: dict) -> list[int]:
  hb = [b for b in results["paper_budgets"] if b in results["budgets"]]
  return hb or results["budgets"][:1]


def _tables(results: dict):
  """Per headline budget: ``(budget, runs, rows)``, rows sorted by error.

  A row is ``(name, error, se, comparison)`` in percent, with ``comparison``
  ``(diff, se, z)`` against the reference or ``None`` for the reference itself.
  """
  ref = results["reference"]
  for budget in headline_budgets(results):
    key = str(budget)
    rows = []
    for name in sorted(results["algorithms"], key=lambda n: results["error"][n][key]["p"]):
      e, d = results["error"][name][key], results["vs_reference"][name][key]
      cmp = None if name == ref else (100 * d["diff"], 100 * d["se"], d["z"])
      rows.append((name, 100 * e["p"], 100 * e["se"], cmp))
    yield budget, results["error"][ref][key]["runs"], rows


def format_table(results: dict) -> str:
  """Plain-text error table at the paper's budgets (sorted by error)."""
  lines = []
  for budget, runs, rows in _tables(results):
    lines.append(
        f"{results['problem']}, T={budget}, {runs:,} seeds (common random numbers); "
        f"paired differences against {results['reference']}"
    )
    lines += tables.text(["algorithm", "error %", "s.e.", "diff (pp)", "s.e.", "z"], [
        [name, f"{p:.2f}", f"{se:.2f}"] + (["", "", ""] if cmp is None else
                                           [f"{cmp[0]:+.2f}", f"{cmp[1]:.2f}", f"{cmp[2]:.1f}"])
        for name, p, se, cmp in rows])
    lines.append("")
  return "\n".join(lines)


def markdown_table(results: dict) -> str:
  """The same table in Markdown (used by ``launch.report`` for the README)."""
  out = []
  for budget, runs, rows in _tables(results):
    out.append(
        f"**{results['problem']}, T = {budget}**, {runs:,} seeds; difference and z against "
        f"`{results['reference']}` (paired).\n"
    )
    out.append("| algorithm | error % | s.e. | diff (pp) | s.e. | z |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for name, p, se, cmp in rows:
      tail = "| | |" if cmp is None else f"{cmp[0]:+.2f} | {cmp[1]:.2f} | {cmp[2]:+.1f} |"
      out.append(f"| `{name}` | {p:.2f} | {se:.2f} | {tail}")
    out.append("")
  return "\n".join(out)


def make_figures(results: dict, writer) -> None:
  """``error_vs_budget.png`` and ``allocation_shares.png``."""
  # matplotlib is a heavy import needed only for figures; the Agg backend is set before pyplot loads.
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  budgets = results["budgets"]
  fig, ax = plt.subplots(figsize=(8, 5))
  cmap = plt.get_cmap("tab20")
  for i, name in enumerate(results["algorithms"]):
    p = np.array([results["error"][name][str(b)]["p"] for b in budgets])
    se = np.array([results["error"][name][str(b)]["se"] for b in budgets])
    style = dict(lw=2.5, marker="o") if name.startswith("varde_tau") else dict(lw=1, marker=".", ls="--")
    ax.errorbar(budgets, 100 * p, yerr=196 * se, label=name, color=cmap(i % 20), capsize=2, **style)
  ax.set_xscale("log")
  ax.set_xticks(budgets, [str(b) for b in budgets])
  ax.minorticks_off()
  ax.set_xlabel("budget T (pulls)")
  ax.set_ylabel("probability of error (%)  [95% CI]")
  ax.set_title(f"{results['problem']}: error against budget, {results['num_seeds']:,} seeds")
  ax.legend(fontsize=7, ncol=2)
  ax.grid(alpha=0.3)
  writer.save_figure(fig, "error_vs_budget")

  key = str(headline_budgets(results)[0])
  neyman = results["neyman_shares"][key]
  if not neyman:
    return
  fig, axes = plt.subplots(1, len(neyman), figsize=(4 * len(neyman), 3.5), squeeze=False)
  k = len(results["means"])
  for ax, (name, limit) in zip(axes[0], neyman.items()):
    x = np.arange(k)
    ax.bar(x - 0.2, results["shares"][key][name], 0.4, label="measured share")
    ax.bar(x + 0.2, limit, 0.4, label="Neyman limit |w| sigma")
    ax.set_title(f"{name}, T={key}", fontsize=9)
    ax.set_xlabel("arm")
    ax.set_xticks(x)
  axes[0][0].set_ylabel("share of pulls (mean over seeds)")
  axes[0][0].legend(fontsize=7)
  writer.save_figure(fig, "allocation_shares")


def headline_table(results: dict) -> str:
  """The README's table: the first paper budget, the reference's rank, the five best others and uniform."""
  budget, runs, rows = next(_tables(results))
  ref = results["reference"]
  rank = [r[0] for r in rows].index(ref) + 1
  keep = [r for r in rows if r[0] != ref][:5]
  keep = sorted(keep + [r for r in rows if r[0] == ref or (r[0] == "uniform" and r not in keep)],
                key=lambda r: r[1])
  out = [f"**{results['problem']}, T = {budget}**, {runs:,} seeds: `{ref}` ranks {rank} of {len(rows)} "
         "(error %; paired difference and z against it).\n",
         "| algorithm | error % | diff (pp) | z |", "|---|---:|---:|---:|"]
  for name, p, _, cmp in keep:
    tail = "| |" if cmp is None else f"{cmp[0]:+.2f} | {cmp[2]:+.1f} |"
    out.append(f"| `{name}` | {p:.2f} | {tail}")
  return "\n".join(out) + "\n"
