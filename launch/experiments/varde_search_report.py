"""Results, tables and figures of ``varde_mcts`` and ``varde_bpi``.

Per environment, budget and algorithm the runs are reduced to sums: runs,
regret, squared regret and wrong decisions (a root action, or a policy, whose
exact value is below the optimum). The mean regret's standard error is
``sqrt((E[r^2] - E[r]^2) / n)``; the probability of a wrong decision ``p`` has
``sqrt(p (1 - p) / n)``.
"""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple

import jax.numpy as jnp
import numpy as np

from launch import metrics


class Tally(NamedTuple):
  """Sums over runs for one (environment, budget); ``[P]`` per algorithm."""

  runs: np.ndarray  # []
  regret: np.ndarray  # [P]
  regret_sq: np.ndarray  # [P]
  wrong: np.ndarray  # [P]

  @classmethod
  def zeros(cls, num_algorithms: int) -> "Tally":
    z = np.zeros((num_algorithms,), np.float32)
    return cls(np.zeros((), np.float32), z, z.copy(), z.copy())

  def __add__(self, other: "Tally") -> "Tally":  # type: ignore[override]
    return Tally(*(np.asarray(a, np.float32) + np.asarray(b, np.float32) for a, b in zip(self, other)))


def summarize(experiment: str, envs, budgets, names, tallies: dict, extra: dict) -> dict:
  """``results.json`` content from ``tallies[f"{env}/T{budget}"]``."""
  res = {"experiment": experiment, "envs": list(envs), "budgets": list(budgets), "algorithms": list(names),
         "regret": {}, "wrong": {}, **extra}
  for env in envs:
    res["regret"][env], res["wrong"][env] = {}, {}
    for name in names:
      res["regret"][env][name], res["wrong"][env][name] = {}, {}
    for budget in budgets:
      t = tallies[f"{env}/T{budget}"]
      n = max(float(t.runs), 1.0)
      for i, name in enumerate(names):
        m = float(t.regret[i]) / n
        var = max(float(t.regret_sq[i]) / n - m * m, 0.0)
        p = float(t.wrong[i]) / n
        res["regret"][env][name][str(budget)] = {"mean": m, "se": math.sqrt(var / n), "runs": int(n)}
        res["wrong"][env][name][str(budget)] = {"p": p, "se": math.sqrt(p * (1 - p) / n)}
  return res


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
    lines.append(f"{'algorithm':<14}" + "".join(f"{'T=' + str(b):>26}" for b in budgets))
    for name in results["algorithms"]:
      cells = []
      for b in budgets:
        r, w = results["regret"][env][name][str(b)], results["wrong"][env][name][str(b)]
        cells.append(f"{r['mean']:>9.4f} ({r['se']:.4f}) [{100 * w['p']:4.1f}]")
      lines.append(f"{name:<14}" + "".join(f"{c:>26}" for c in cells))
    lines.append("")
  return "\n".join(lines)


def markdown_table(results: dict) -> str:
  """The same in Markdown, best mean regret in bold per column."""
  out = []
  budgets = _headline(results)
  unit = results.get("budget_unit", "budget")
  for env in results["envs"]:
    runs = results["regret"][env][results["algorithms"][0]][str(budgets[0])]["runs"]
    out.append(f"**{env}**, {runs:,} runs: mean regret (s.e.) and % wrong, by {unit}.\n")
    out.append("| algorithm | " + " | ".join(f"{unit} {b}" for b in budgets) + " |")
    out.append("|---|" + "---:|" * len(budgets))
    best = {b: min(results["regret"][env][n][str(b)]["mean"] for n in results["algorithms"]) for b in budgets}
    for name in results["algorithms"]:
      cells = []
      for b in budgets:
        r, w = results["regret"][env][name][str(b)], results["wrong"][env][name][str(b)]
        m = f"{r['mean']:.4f}"
        m = f"**{m}**" if r["mean"] == best[b] else m
        cells.append(f"{m} ({r['se']:.4f}), {100 * w['p']:.1f}%")
      out.append(f"| `{name}` | " + " | ".join(cells) + " |")
    out.append("")
  return "\n".join(out)


def make_figures(results: dict, writer) -> None:
  """``regret_vs_budget.png`` (and ``wrong_vs_budget.png``): one panel per environment, log-x."""
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


def padded_ids(num_runs: int, mesh, mesh_lib) -> "jax.Array":  # noqa: F821
  """Global ``[P]`` int32 run ids ``0..num_runs-1`` padded with -1 to the mesh size, sharded."""
  padded = mesh_lib.padded_size(num_runs, mesh)
  ids = np.full((padded,), -1, np.int32)
  ids[:num_runs] = np.arange(num_runs, dtype=np.int32)
  return mesh_lib.global_array(ids.shape, mesh_lib.data_sharding(mesh), lambda idx: ids[idx])


def tally(regret, valid, tol: float = 1e-5) -> Tally:
  """Sums over the valid runs of ``regret [P, R]`` (jax arrays; usable inside jit)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  v = valid.astype(jnp.float32)[None, :]
  return Tally(jnp.sum(valid.astype(jnp.float32)), jnp.sum(regret * v, -1), jnp.sum(regret**2 * v, -1),
               jnp.sum((regret > tol) * v, -1))


def run_units(experiment: str, config, ctx, names: list, unit_tally: Callable[[int, int], Tally],
              extra: dict) -> dict:
  """Runs every (environment, budget) unit in turn; returns ``results.json``'s content.

  The tallies of all units are checkpointed after each one, so a killed run
  resumes at the next unit and ends with the same integer-valued sums.

  Args:
    experiment: ``varde_mcts`` or ``varde_bpi``.
    config: the run's config (``envs``, ``budgets``).
    ctx: the run's context.
    names: the algorithms, in tally order.
    unit_tally: ``(environment index, budget) -> Tally`` of one unit.
    extra: ``budget_unit`` and ``metric`` for the tables.
  """
  units = [(e, b) for e in range(len(config.envs)) for b in config.budgets]
  initial = {f"{config.envs[e]}_T{b}": Tally.zeros(len(names))._asdict() for e, b in units}
  done, state, _ = ctx.restore_or(initial)
  tallies = {k: Tally(**{f: jnp.asarray(x) for f, x in v.items()}) for k, v in state.items()}
  progress = metrics.Progress(len(units), unit="units", start=done)
  start = time.perf_counter()
  for u in range(done, len(units)):
    e, budget = units[u]
    env = config.envs[e]
    key = f"{env}_T{budget}"
    tallies[key] = tallies[key] + unit_tally(e, budget)
    t = tallies[key]
    progress.label = f"[{experiment} {env} T={budget}] "
    ctx.writer.log(u + 1, budget=budget, runs=float(t.runs),
                   **{f"regret/{env}/{n}": float(t.regret[i] / max(t.runs, 1)) for i, n in enumerate(names)})
    progress.update(u + 1)
    ctx.save(u + 1, {k: v._asdict() for k, v in tallies.items()}, force=u + 1 == len(units))
  tallies = {k.replace("_T", "/T"): v for k, v in tallies.items()}
  results = summarize(experiment, config.envs, config.budgets, names, tallies, extra)
  results["wall_time_s"] = time.perf_counter() - start
  make_figures(results, ctx.writer)
  return results
