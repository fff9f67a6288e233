"""Results, tables and figures of ``varde_mcts`` and ``varde_bpi``.

Per environment, budget and algorithm the runs are reduced to sums: runs,
regret, squared regret and wrong decisions (a root action, or a policy, whose
exact value is below the optimum), and per cluster (a random instance, or a
run of a fixed environment). The mean regret's standard error is clustered:
the standard deviation of the per-cluster means over ``sqrt(C)`` (runs of one
instance are not independent draws of the instance); the probability of a
wrong decision ``p`` has ``sqrt(p (1 - p) / n)``. Every algorithm runs on the
same instances with the same keys, so each is compared with the first one
(the reference, VarDE) by the paired difference of their regrets, whose
standard error is that of the per-cluster mean differences; ``delta +- 1.96
s.e.`` is its 95% interval (a positive difference: the reference has the
lower regret).
"""

from __future__ import annotations

import math

import numpy as np

from launch import tables


def summarize(experiment: str, envs, budgets, names, tallies: dict, extra: dict) -> dict:
  """``results.json`` content from ``tallies[f"{env}/T{budget}"]`` (:class:`~launch.experiments.varde.search.Tally`)."""
  res = {"experiment": experiment, "envs": list(envs), "budgets": list(budgets), "algorithms": list(names),
         "regret": {}, "wrong": {}, **extra}
  for env in envs:
    res["regret"][env], res["wrong"][env] = {}, {}
    for name in names:
      res["regret"][env][name], res["wrong"][env][name] = {}, {}
    for budget in budgets:
      t = tallies[f"{env}/T{budget}"]
      n = max(float(t.runs), 1.0)
      live = np.asarray(t.cluster_runs) > 0
      per = np.asarray(t.cluster_regret)[:, live] / np.asarray(t.cluster_runs)[live]  # [P, C] cluster means
      for i, name in enumerate(names):
        m = float(t.regret[i]) / n
        p = float(t.wrong[i]) / n
        diff = per[i] - per[0]
        res["regret"][env][name][str(budget)] = {
            "mean": m, "se": stderr(per[i]), "runs": int(n), "clusters": int(live.sum()),
            "diff": float(diff.mean()) if diff.size else 0.0, "diff_se": stderr(diff)}
        res["wrong"][env][name][str(budget)] = {"p": p, "se": math.sqrt(p * (1 - p) / n)}
  return res


def stderr(x: np.ndarray) -> float:
  """Standard error of the mean of ``x [C]`` (0 below two clusters)."""
  return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) >= 2 else 0.0


def _headline(results):
  b = results["budgets"]
  return [b[0], b[len(b) // 2], b[-1]] if len(b) >= 3 else b


def format_table(results: dict) -> str:
  """Plain text: regret (and wrong-decision %) per environment at three budgets."""
  lines = []
  budgets = _headline(results)
  for env in results["envs"]:
    runs = results["regret"][env][results["algorithms"][0]][str(budgets[0])]["runs"]
    lines.append(f"{env}: mean regret (s.e.) [wrong %], {runs:,} runs")
    rows = []
    for name in results["algorithms"]:
      cells = [name]
      for b in budgets:
        r, w = results["regret"][env][name][str(b)], results["wrong"][env][name][str(b)]
        cells.append(f"{r['mean']:.4f} ({r['se']:.4f}) [{100 * w['p']:.1f}]")
      rows.append(cells)
    lines += tables.text(["algorithm"] + [f"T={b}" for b in budgets], rows)
    lines.append("")
  return "\n".join(lines)


def markdown_table(results: dict) -> str:
  """The same in Markdown, best mean regret in bold per column, paired differences to the reference."""
  out = []
  budgets = _headline(results)
  unit = results.get("budget_unit", "budget")
  ref = results["algorithms"][0]
  for env in results["envs"]:
    r0 = results["regret"][env][ref][str(budgets[0])]
    out.append(f"**{env}**, {r0['runs']:,} runs in {r0.get('clusters', r0['runs']):,} clusters: mean regret "
               f"(clustered s.e.), % wrong, and the paired difference to `{ref}` +- 1.96 s.e., by {unit}.\n")
    out.append("| algorithm | " + " | ".join(f"{unit} {b}" for b in budgets) + " |")
    out.append("|---|" + "---:|" * len(budgets))
    best = {b: min(results["regret"][env][n][str(b)]["mean"] for n in results["algorithms"]) for b in budgets}
    for name in results["algorithms"]:
      cells = []
      for b in budgets:
        r, w = results["regret"][env][name][str(b)], results["wrong"][env][name][str(b)]
        m = f"{r['mean']:.4f}"
        m = f"**{m}**" if r["mean"] == best[b] else m
        d = "" if name == ref or "diff" not in r else f"; {r['diff']:+.4f} +- {1.96 * r['diff_se']:.4f}"
        cells.append(f"{m} ({r['se']:.4f}), {100 * w['p']:.1f}%{d}")
      out.append(f"| `{name}` | " + " | ".join(cells) + " |")
    out.append("")
  return "\n".join(out)


def make_figures(results: dict, writer) -> None:
  """``regret_vs_budget.png`` (and ``wrong_vs_budget.png``): one panel per environment, log-x."""
  # matplotlib is a heavy import needed only for figures; the Agg backend is set before pyplot loads.
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  budgets = results["budgets"]
  for metric, field, ylabel in (("regret", "mean", "mean regret"), ("wrong", "p", "P(wrong decision)")):
    envs = results["envs"]
    fig, axes = plt.subplots(1, len(envs), figsize=(4.5 * len(envs), 3.8), squeeze=False)
    for ax, env in zip(axes[0], envs):
      for i, name in enumerate(results["algorithms"]):
        y = np.array([results[metric][env][name][str(b)][field] for b in budgets])
        se = np.array([results[metric][env][name][str(b)]["se"] for b in budgets])
        style = dict(lw=2.5, marker="o") if name.startswith("varde") else dict(lw=1, marker=".", ls="--")
        ax.errorbar(budgets, y, yerr=se, label=name, color=plt.get_cmap("tab10")(i % 10), capsize=2, **style)
      ax.set_xscale("log")
      ax.set_xticks(budgets, [str(b) for b in budgets])
      ax.minorticks_off()
      ax.set_title(env, fontsize=9)
      ax.set_xlabel(results.get("budget_unit", "budget"))
      ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{ylabel} (+- s.e.)")
    axes[0][0].legend(fontsize=7)
    writer.save_figure(fig, f"{metric}_vs_budget")


def headline_table(results: dict) -> str:
  """The README's table: the first environment of the full table."""
  full = markdown_table(results)
  return full.split("\n\n**", 1)[0].rstrip() + "\n"
