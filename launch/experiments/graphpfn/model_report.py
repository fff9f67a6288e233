"""Tables and the learning-curve figure of the ``graphpfn`` experiment (from ``results.json``'s content)."""

from __future__ import annotations

import math

from launch.experiments.graphpfn.evaluate import MODEL

SETTINGS = (("held_out", "held-out prior graphs"), ("shifted", "shifted prior (larger graphs, weaker blocks)"))


def _fmt(iv: dict | None, digits: int = 3) -> str:
  if not iv or iv.get("mean") is None:
    return "n/a"
  ci = iv.get("ci")
  return f"{iv['mean']:.{digits}f} +- {ci:.{digits}f}" if ci is not None else f"{iv['mean']:.{digits}f}"


def _signed(iv: dict | None) -> str:
  if not iv or iv.get("mean") is None:
    return "n/a"
  ci = iv.get("ci")
  text = f"{iv['mean']:+.3f}" + (f" +- {ci:.3f}" if ci is not None else "")
  if ci is not None:
    if iv["mean"] - ci > 0:
      text += " (wins)"
    elif iv["mean"] + ci < 0:
      text += " (**loses**)"
  return text


def _method_rows(block: dict, metric: str) -> list[str]:
  rows = []
  for name, m in block["methods"].items():
    diff = "" if name == MODEL else _signed(block["paired"][name][metric])
    cells = [f"`{name}`" if name != MODEL else "**GraphPFN**", _fmt(m[metric]), str(m[metric]["n"])]
    rows.append("| " + " | ".join(cells + [diff]) + " |")
  return rows


def setting_table(block: dict, title: str) -> str:
  """Accuracy and ``R^2`` of every method, and GraphPFN's paired difference to each baseline."""
  lines = [f"**{title}** ({block['graphs']} graphs, {block['usable']} usable, mean {block['mean_nodes']:.0f} nodes, "
           f"edge label homophily {_fmt(block['edge_homophily'], 2)})", "",
           "| method | accuracy (+- 1.96 s.e.) | graphs | GraphPFN - method (paired) |", "|---|---|---|---|"]
  lines += _method_rows(block, "accuracy")
  lines += ["", "| method | R^2 (+- 1.96 s.e.) | graphs | GraphPFN - method (paired) |", "|---|---|---|---|"]
  lines += _method_rows(block, "r2")
  return "\n".join(lines)


def curve_table(results: dict) -> str:
  """Held-out in-context accuracy and ``R^2`` against pretraining steps."""
  c = results["curve"]
  lines = ["| pretraining step | held-out accuracy | held-out R^2 |", "|---|---|---|"]
  for i, s in enumerate(c["steps"]):
    acc = {"mean": c["accuracy"][i], "ci": None if c["accuracy_se"][i] is None else 1.96 * c["accuracy_se"][i]}
    r2 = {"mean": c["r2"][i], "ci": None if c["r2_se"][i] is None else 1.96 * c["r2_se"][i]}
    lines.append(f"| {s:,} | {_fmt(acc)} | {_fmt(r2)} |")
  return "\n".join(lines)


def _real_table(block: dict, title: str) -> str:
  lines = [f"**{title}**", "", "| method | accuracy (+- 1.96 s.e.) | GraphPFN - method (paired) |", "|---|---|---|"]
  for name, m in block["methods"].items():
    diff = "" if name == MODEL else _signed(block["paired"][name]["accuracy"])
    lines.append(f"| {'**GraphPFN**' if name == MODEL else f'`{name}`'} | {_fmt(m['accuracy'])} | {diff} |")
  return "\n".join(lines)


def markdown_table(results: dict) -> str:
  """The docs block: run facts, the learning curve, both prior settings, the real graphs."""
  parts = [f"Pretrained {results['steps']:,} steps ({results['train_time_s'] / 60:.1f} min on "
           f"{results['devices']}; {results['traces']} compilations of the step for "
           f"{len(results['bucket_pairs'])} bucket pairs), learning curve on {results['curve_graphs']} held-out graphs:",
           "", curve_table(results), ""]
  for key, title in SETTINGS:
    parts += [setting_table(results[key], title), ""]
  if results.get("karate"):
    k = results["karate"]
    parts += [_real_table(k, f"Zachary's karate club ({k['splits']} random splits, {k['train_per_class']} training "
                             "nodes per club, structural features)"), ""]
  if results.get("planetoid"):
    p = results["planetoid"]
    parts += [_real_table(p, f"{p['name']} ({p['num_nodes']:,} nodes, public split, PCA features)"), ""]
  return "\n".join(parts)


def headline_table(results: dict) -> str:
  """README: held-out and shifted accuracy of GraphPFN and the best baseline, and the karate club."""
  lines = ["| setting | GraphPFN accuracy | best baseline | GraphPFN R^2 | best baseline R^2 |", "|---|---|---|---|---|"]
  for key, title in SETTINGS + (("karate", "karate club"),):
    block = results.get(key)
    if not block:
      continue
    row = [title]
    for metric in ("accuracy", "r2"):
      ms = block["methods"]
      base = [(n, m[metric]) for n, m in ms.items() if n != MODEL and m[metric]["mean"] is not None]
      best = max(base, key=lambda t: t[1]["mean"]) if base else None
      row += [_fmt(ms[MODEL][metric]), f"`{best[0]}` {_fmt(best[1])}" if best else "n/a"]
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines)


def format_table(results: dict) -> str:
  """The plain-text summary the launcher prints."""
  lines = [f"graphpfn: {results['steps']} steps, {results['train_time_s']:.0f} s, traces {results['traces']}"]
  c = results["curve"]
  lines.append("curve: " + ", ".join(f"{s}: {a if a is None else round(a, 3)}" for s, a in zip(c["steps"], c["accuracy"])))
  for key, _ in SETTINGS + (("karate", ""), ("planetoid", "")):
    block = results.get(key)
    if not block:
      continue
    cells = [f"{n} acc {_fmt(m['accuracy'])} r2 {_fmt(m['r2'])}" for n, m in block["methods"].items()]
    lines.append(f"{key}: " + "; ".join(cells))
  return "\n".join(lines)


def make_figures(results: dict, writer) -> None:
  """``curve.png``: held-out in-context accuracy and ``R^2`` against pretraining steps, with the baselines' levels."""
  # matplotlib is heavy; it is imported only when figures are written.
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  c = results["curve"]
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
  for ax, metric, se in zip(axes, ("accuracy", "r2"), ("accuracy_se", "r2_se")):
    pts = [(s, v, e or 0.0) for s, v, e in zip(c["steps"], c[metric], c[se]) if v is not None]
    if pts:
      xs, ys, es = zip(*pts)
      ax.errorbar(xs, ys, yerr=[1.96 * e for e in es], marker="o", color="tab:blue", label="GraphPFN (in context)")
    for name, m in results["held_out"]["methods"].items():
      v = m[metric]["mean"]
      if name != MODEL and v is not None and math.isfinite(v):
        ax.axhline(v, ls="--", lw=1, color="gray")
        ax.annotate(name, (ax.get_xlim()[1], v), fontsize=7, ha="right", va="bottom")
    ax.set_xlabel("pretraining step")
    ax.set_ylabel(f"held-out {metric}")
  axes[0].legend(fontsize=7, loc="lower right")
  fig.suptitle("GraphPFN: held-out in-context scores against pretraining (dashed: per-graph baselines)")
  fig.tight_layout()
  writer.save_figure(fig, "curve")
