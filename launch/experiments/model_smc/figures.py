"""Figures of the ``model_smc`` experiment: predictive bands, posterior mass, diagnostics, the exact check.

Each figure is drawn on its own: a figure that fails to draw is logged and
named in the returned list (``results.json`` keeps it as
``figure_errors``), and the others are still drawn, so that plotting can
never lose a run's results.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from absl import logging
import numpy as np


def make_figures(results: dict, writer, y: np.ndarray, times: np.ndarray, time_label: str,
                 names: Sequence[str], sindy_median: Optional[np.ndarray] = None) -> list[str]:
  """``predictive_bands.png``, ``posterior_mass.png`` and ``diagnostics.png`` (or ``exact_check.png``).

  Returns:
    ``"<figure>: <error>"`` for each figure that could not be drawn (empty when all were).
  """
  # matplotlib (heavy, and only needed to draw) is imported when the figures are made.
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  if results["task"] == "exact":
    draws: list[tuple[str, Callable]] = [("exact_check", lambda: _exact(plt, results))]
  else:
    draws = [("predictive_bands", lambda: _bands(plt, results, y, times, time_label, names, sindy_median)),
             ("posterior_mass", lambda: _mass(plt, results))]
    if results["smc"]["diagnostics"]:
      draws.append(("diagnostics", lambda: _diagnostics(plt, results["smc"]["diagnostics"])))
  failed = []
  for name, draw in draws:
    try:
      writer.save_figure(draw(), name)
    except Exception as e:  # pylint: disable=broad-except  (a figure is never worth the run's results)
      logging.warning("figure %s not drawn: %s: %s", name, type(e).__name__, e)
      failed.append(f"{name}: {type(e).__name__}: {e}")
      plt.close("all")
  return failed


def _exact(plt, results: dict):
  ex_ = results["exact"]
  rows = ex_["table"][:10]
  fig, ax = plt.subplots(figsize=(9, 4))
  x = np.arange(len(rows))
  ax.bar(x - 0.2, [r["exact"] for r in rows], 0.4, label="brute-force p(m|x)")
  ax.bar(x + 0.2, [r["smc"] for r in rows], 0.4, yerr=[1.96 * r["se"] for r in rows], capsize=2,
         label=f"SMC mean of {ex_['repeats']} runs (95% CI)")
  ax.set_xticks(x)
  ax.set_xticklabels([f"m{i + 1}" for i in x])
  ax.set_ylabel("posterior mass")
  ax.set_title("exact check: structure frequencies")
  ax.legend(fontsize=8)
  return fig


def _bands(plt, results: dict, y, times, time_label: str, names, sindy_median):
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top  (loaded with pyplot)

  num_fit = results["rows"]["fit"]
  bands = results["smc"]["mixture"]["bands"]
  n_obs = y.shape[1]
  fig, axes = plt.subplots(1, n_obs, figsize=(6 * n_obs, 4), squeeze=False)
  for o, ax in enumerate(axes[0]):
    lo90, hi90 = (np.asarray(b)[:, o] for b in bands["0.9"])
    lo50, hi50 = (np.asarray(b)[:, o] for b in bands["0.5"])
    ax.fill_between(times, lo90, hi90, color="C0", alpha=0.2, label="ModelSMC 90%")
    ax.fill_between(times, lo50, hi50, color="C0", alpha=0.4, label="ModelSMC 50%")
    ax.plot(times, np.asarray(bands["median"])[:, o], color="C0", lw=1.5, label="ModelSMC median")
    hc = results.get("hill_climb", {}).get("median")
    if hc is not None:
      ax.plot(times, np.asarray(hc)[:, o], color="C2", ls="--", lw=1.2, label="hill climbing (N=1) median")
    if sindy_median is not None:
      ax.plot(times, np.asarray(sindy_median)[:, o], color="C3", ls=":", lw=1.5, label="PySINDy")
    ax.plot(times[:num_fit], y[:num_fit, o], "ko", ms=4, label="fitted data")
    ax.plot(times[num_fit:], y[num_fit:, o], "o", mfc="none", mec="k", ms=5, label="held-out data")
    ax.axvline(times[num_fit] - 0.5 * (times[1] - times[0]), color="gray", lw=0.8)
    finite = y[np.isfinite(y[:, o]), o]
    top = np.nanmax(finite) * 2.0 if finite.size else 1.0
    ax.set_ylim(min(0.0, np.nanmin(finite)) if finite.size else 0.0, top)
    ax.set_title(names[o])
    ax.set_xlabel(time_label)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
  axes[0][0].legend(fontsize=7)
  return fig


def _mass(plt, results: dict):
  top = results["smc"]["top"]
  fig, ax = plt.subplots(figsize=(8, 0.6 * len(top) + 1.5))
  labels = ["; ".join(f"{k}={v}" for k, v in r["equations"].items()) for r in top]
  ax.barh(np.arange(len(top))[::-1], [r["mass"] for r in top], color="C0")
  ax.set_yticks(np.arange(len(top))[::-1])
  ax.set_yticklabels(labels, fontsize=7)
  ax.set_xlabel("posterior mass")
  ax.set_title("top structures")
  return fig


def _diagnostics(plt, diag: list):
  fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))
  for r in sorted({d.get("run", 0) for d in diag}):
    rows = [d for d in diag if d.get("run", 0) == r]
    it = np.arange(1, len(rows) + 1)  # tempering steps, then the local search and the final sweeps
    axes[0].plot(it, [d["beta"] for d in rows], ".-", color=f"C{r % 10}", label=f"run {r + 1}")
    axes[1].plot(it, [d["ess"] for d in rows], ".-", color=f"C{r % 10}")
    axes[1].plot(it, [d["unique"] for d in rows], "x:", color=f"C{r % 10}")
    axes[2].plot(it, [d["acceptance"] for d in rows], ".-", color=f"C{r % 10}")
  axes[0].set_ylabel("beta")
  axes[0].legend(fontsize=7)
  axes[1].set_ylabel("ESS (.-) and unique structures (x:)")
  axes[2].set_ylabel("MH acceptance")
  for ax in axes:
    ax.set_xlabel("step of the run (tempering, then search and final sweeps at beta = 1)")
  return fig
