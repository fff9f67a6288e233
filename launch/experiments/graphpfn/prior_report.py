"""Results, tables and figures of the ``graphpfn_prior`` experiment (the fidelity stages' in :mod:`.fidelity_report`).

The README's headline is the two-sample verdicts (does the structure
sampler draw the reference's distribution, and do the tests have the power
to reject each earlier variant), then the prior's statistics.
"""

from __future__ import annotations

import math

import numpy as np

from launch import tables
from launch.experiments.graphpfn import fidelity_report
from methods.graphpfn import AttributeParams, StructureParams
from methods.graphpfn import statistics as stats_lib

# Sampled hyperparameter -> (config section, min field, max field) for the range check.
RANGES = {
    "structure.n_nodes": ("structure", "n_nodes_min", "n_nodes_max"),
    "structure.first_level_ratio": ("structure", "first_level_ratio_min", "first_level_ratio_max"),
    "attributes.num_causes": ("attributes", "num_causes_min", "num_causes_max"),
    "attributes.num_layers": ("attributes", "num_layers_min", "num_layers_max"),
    "attributes.hidden_dim": ("attributes", "hidden_dim_min", "hidden_dim_max"),
    "attributes.init_std": ("attributes", "init_std_min", "init_std_max"),
    "attributes.noise_std": ("attributes", "noise_std_min", "noise_std_max"),
    "attributes.n_features": ("attributes", "n_features_min", "n_features_max"),
    "attributes.train_ratio": ("attributes", "train_ratio_min", "train_ratio_max"),
}
HEADLINE = ("num_nodes", "mean_degree", "hill_tail_index", "clustering", "assortativity", "intra_block_level1",
            "intra_block_level2", "edge_homophily", "adjusted_homophily", "feature_homophily", "mi_raw",
            "mi_aggregated", "class_balance", "train_ratio", "num_features")


def summarize(config, structure_hp, attribute_hp, tallies, param_fields, probes, tfds_info) -> dict:
  stats = {k: stats_lib.summarize(tallies.stats[:, j]) for j, k in enumerate(stats_lib.STATS)}
  ranges = {}
  for name, (section, lo, hi) in RANGES.items():
    v = tallies.params[:, param_fields.index(name)]
    cfg = structure_hp if section == "structure" else attribute_hp
    lo_v, hi_v = getattr(cfg, lo), getattr(cfg, hi)
    ranges[name] = {"min": float(np.min(v)), "max": float(np.max(v)), "allowed": [lo_v, hi_v],
                    "inside": bool(np.all((v >= lo_v - 1e-6 * abs(lo_v)) & (v <= hi_v + 1e-6 * abs(hi_v))))}
  task = tallies.params[:, param_fields.index("attributes.task")]
  kinds = [attribute_hp.tasks[int(t)] for t in task]
  return {
      "experiment": "graphpfn_prior", "preset": config.preset, "num_graphs": config.num_graphs,
      "statistics": stats, "hyperparameter_ranges": ranges,
      "task_shares": {k: kinds.count(k) / len(kinds) for k in attribute_hp.tasks},
      "graph_matters": probes, "tfds": tfds_info,
      "param_fields": list(param_fields), "structure_fields": list(StructureParams._fields),
      "attribute_fields": list(AttributeParams._fields),
  }


def _rows(results):
  for k in HEADLINE:
    s = results["statistics"][k]
    if s.get("count", 0):
      yield k, s


def format_table(results: dict) -> str:
  lines = [f"GraphPFN prior: {results['num_graphs']:,} graphs ({results['preset']} preset); "
           f"sampling {results.get('sampling_s', math.nan):.1f}s"]
  lines += tables.text(["statistic", "mean", "q05", "median", "q95", "NaN %"], [
      [k] + [f"{s[q]:.3f}" for q in ("mean", "q05", "median", "q95")] + [f"{100 * s['nan_share']:.0f}"]
      for k, s in _rows(results)])
  bad = [k for k, r in results["hyperparameter_ranges"].items() if not r["inside"]]
  lines.append(f"sampled hyperparameters outside their ranges: {bad or 'none'}")
  lines += fidelity_report.summary_lines(results.get("two_sample", {}), results["graph_matters"],
                                         results.get("attribute_panel", {}))
  if results["tfds"]:
    lines.append(f"TFDS graphpfn_prior: {results['tfds']['examples']} examples written and read back")
  return "\n".join(lines)


def markdown_table(results: dict) -> str:
  out = [f"**{results['num_graphs']:,} prior samples** (`{results['preset']}` preset). NaN %: graphs where the "
         "statistic is undefined (e.g. label homophily on regression tasks).\n",
         "| statistic | mean | q05 | median | q95 | NaN % |", "|---|---:|---:|---:|---:|---:|"]
  for k, s in _rows(results):
    out.append(f"| {k} | {s['mean']:.3f} | {s['q05']:.3f} | {s['median']:.3f} | {s['q95']:.3f} | {100 * s['nan_share']:.0f} |")
  bad = [k for k, r in results["hyperparameter_ranges"].items() if not r["inside"]]
  out.append(f"\nSampled hyperparameters outside their configured ranges: {bad or 'none'}.\n")
  panel = results.get("two_sample", {})
  out += fidelity_report.verdict_table(panel) + fidelity_report.test_table(panel)
  out += fidelity_report.degree_table(panel) + fidelity_report.attribute_table(results.get("attribute_panel", {}))
  out += fidelity_report.probe_table(results["graph_matters"])
  return "\n".join(out) + "\n"


def make_figures(results: dict, tallies, drawings, writer) -> None:
  """``statistics.png`` (histograms) and ``graphs.png`` (drawings coloured by label)."""
  # matplotlib (and networkx for the drawings) are heavy; they are imported only when figures are written.
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  import networkx as nx  # pylint: disable=g-import-not-at-top

  cols = 5
  rows = math.ceil(len(HEADLINE) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows))
  for ax, k in zip(axes.ravel(), HEADLINE):
    v = tallies.stats[:, stats_lib.STATS.index(k)]
    v = v[np.isfinite(v)]
    if len(v):
      ax.hist(v, bins=30, color="tab:blue", alpha=0.8)
    ax.set_title(k, fontsize=9)
  for ax in axes.ravel()[len(HEADLINE):]:
    ax.axis("off")
  fig.suptitle(f"GraphPFN prior: {results['num_graphs']:,} sampled graphs")
  fig.tight_layout()
  writer.save_figure(fig, "statistics")
  if drawings:
    cols = min(3, len(drawings))
    rows = math.ceil(len(drawings) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows), squeeze=False)
    for ax, s in zip(axes.ravel(), drawings):
      g = nx.Graph()
      g.add_nodes_from(range(s["num_nodes"]))
      g.add_edges_from(zip(s["senders"].tolist(), s["receivers"].tolist()))
      pos = nx.spring_layout(g, seed=0, iterations=50)
      color = s["y"] if s["task"] else s["block2"]
      nx.draw_networkx(g, pos, ax=ax, node_size=12, width=0.2, with_labels=False, node_color=color, cmap="tab10")
      ax.set_title(f"{s['num_nodes']} nodes, {len(s['senders'])} edges, task {('reg', 'bin', 'multi')[s['task']]}", fontsize=9)
      ax.axis("off")
    for ax in axes.ravel()[len(drawings):]:
      ax.axis("off")
    fig.tight_layout()
    writer.save_figure(fig, "graphs")


def headline_table(results: dict) -> str:
  """The README's table: the two-sample verdicts, then the prior's statistics (mean and 90% range)."""
  out = fidelity_report.verdict_table(results.get("two_sample", {}))
  out += [f"**{results['num_graphs']:,} prior samples** (`{results['preset']}` preset).\n",
         "| statistic | mean | q05 | q95 |", "|---|---:|---:|---:|"]
  for k, s in _rows(results):
    out.append(f"| {k} | {s['mean']:.3f} | {s['q05']:.3f} | {s['q95']:.3f} |")
  return "\n".join(out) + "\n"
