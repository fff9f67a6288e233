"""Tables and the per-subgraph degree figure of the GraphPFN prior's fidelity stages (:mod:`.fidelity`)."""

from __future__ import annotations

import numpy as np

from launch.bench import graphpfn_scm_oracle
from launch.experiments.graphpfn import fidelity

# The samplers drawn in the degree plot's right panel, beside the oracle.
PLOTTED = ("reference", "size_weighted", "no_cap")


def verdict_table(panel: dict) -> list[str]:
  """One row per sampler: pass or the rejecting tests (the headline)."""
  if not panel:
    return []
  rows = fidelity.verdicts(panel)
  out = [f"**Two-sample tests against the reference's sampler** (a NumPy port, "
         f"`launch/bench/graphpfn_oracle.py`): {panel['graphs']} graph pairs per sampler, each pair drawn with the "
         f"same hyperparameters; KS and paired signed-rank tests of {len(panel['statistics'])} statistics, "
         f"Bonferroni over the {rows[0]['tests']} tests at the {100 * panel['alpha']:g}% level "
         f"(threshold {rows[0]['threshold']:.1e}).\n",
         "| sampler | what differs from the reference | smallest p | verdict | rejected by |",
         "|---|---|---:|---|---|"]
  for r in rows:
    if r["variant"] == "reference":
      verdict = "**pass**" if r["pass"] else "**rejected**"
    else:  # a broken variant: the tests have power where it is rejected
      verdict = "rejected" if not r["pass"] else "not rejected"
    which = ", ".join(f"`{x}`" for x in r["rejected"]) or "none"
    out.append(f"| `{r['variant']}` | {fidelity.VARIANT_DOC.get(r['variant'], '')} | {r['min_p']:.1e} | {verdict} | "
               f"{which} |")
  return out + [""]


def test_table(panel: dict) -> list[str]:
  """Every test of every sampler: the default's value and p-value, each variant's p-value (bold: rejected)."""
  if not panel:
    return []
  names = list(panel["results"])
  out = ["Every test: the default's value (KS distance, or mean paired difference in pooled standard deviations) "
         "and p-value, and each variant's p-value (**bold**: rejected).\n",
         "| statistic | test | value | p (default) | pass | " + " | ".join(f"p `{n}`" for n in names[1:]) + " |",
         "|---|---|---:|---:|---|" + "---:|" * (len(names) - 1)]
  base = panel["results"][names[0]]
  for j, r in enumerate(base):
    cells = []
    for n in names[1:]:
      t = panel["results"][n][j]
      cells.append(f"**{t['p_value']:.1e}**" if t["reject"] else f"{t['p_value']:.1e}")
    out.append(f"| {r['statistic']} | {r['test']} | {r['value']:+.3f} | {r['p_value']:.2e} | "
               f"{'no' if r['reject'] else 'yes'} | " + " | ".join(cells) + " |")
  return out + [""]


def degree_table(panel: dict) -> list[str]:
  """Binned mean internal degree of the first-level subgraphs against their size, oracle vs each sampler."""
  if not panel:
    return []
  names = ["oracle", *panel["results"]]
  out = ["Mean degree inside a first-level subgraph against its size (bins: quantiles of the oracle's sizes; "
         "the figure `degrees` below):\n",
         "| subgraph size | " + " | ".join(f"`{n}`" for n in names) + " |", "|---:|" + "---:|" * len(names)]
  for b, centre in enumerate(panel["bin_centres"]):
    cells = [f"{panel['binned'][n]['mean'][b]:.2f}" for n in names]
    out.append(f"| {centre:.0f} | " + " | ".join(cells) + " |")
  return out + [""]


def attribute_table(panel: dict) -> list[str]:
  """The attribute generator's panel: one row per statistic, with the departures that can explain a disagreement."""
  if not panel:
    return []
  lo, hi = panel["nodes"]
  out = [f"**The attribute and task generator against the reference's** (a NumPy port, "
         f"`launch/bench/graphpfn_scm_oracle.py`): both generators on the same {panel['graphs']} graphs of {lo}-{hi} "
         f"nodes, this project's default attribute hyperparameters against the reference's pretraining draw; "
         f"{panel['ours_ok']} of ours passed its own check. Chi-square (task kind, class count) or KS tests, "
         f"Bonferroni over the {len(panel['rows'])} tests at the {100 * panel['alpha']:g}% level (threshold "
         f"{panel['threshold']:.1e}). The departures are numbered in docs/graphpfn.md.\n",
         graphpfn_scm_oracle.markdown([graphpfn_scm_oracle.Row(**r) for r in panel["rows"]])]
  agree = [r["statistic"] for r in panel["rows"] if r["agree"]]
  differ = [r["statistic"] for r in panel["rows"] if not r["agree"]]
  out.append(f"\nAgree: {', '.join(agree) or 'none'}. Differ: {', '.join(differ) or 'none'}.")
  return out + [""]


def probe_table(probe: dict) -> list[str]:
  """The probe's rows: scores with 95% intervals, mean and median gap, signed-rank p, verdict."""
  if not probe:
    return []
  out = [f"**Does the graph matter?** Ridge probe ({probe['graphs']} prior samples, `graph_conv_ratio` 0 or 1, "
         "structural inputs off): test accuracy (classification) or R^2 (regression) on the features alone and with "
         "neighbour-averaged features, paired per graph; 95% intervals; one-sided signed-rank p of a positive gap "
         f"(neighbours help where p < {probe['threshold']:.1e}, Bonferroni over the rows at 1%).\n",
         "| task | graph_conv_ratio | graphs | features alone | with neighbours | mean gap [95%] | median gap | p | "
         "neighbours help |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
  for r in probe["rows"]:
    out.append(f"| {r['task']} | {r['graph_conv_ratio']:g} | {r['n']} | {r['plain']:.3f} ± {r['plain_ci']:.3f} | "
               f"{r['graph']:.3f} ± {r['graph_ci']:.3f} | {r['gap']:+.3f} [{r['gap_low']:+.3f}, {r['gap_high']:+.3f}] | "
               f"{r['gap_median']:+.3f} | {r['p_graph_helps']:.1e} | {'yes' if r['helps'] else 'no'} |")
  helps = [f"{r['task']} at ratio {r['graph_conv_ratio']:g}" for r in probe["rows"] if r["helps"]]
  not_ = [f"{r['task']} at ratio {r['graph_conv_ratio']:g}" for r in probe["rows"] if not r["helps"]]
  out.append(f"\nNeighbours help: {', '.join(helps) or 'nowhere'}. No evidence that they help: "
             f"{', '.join(not_) or 'none'}.")
  return out + [""]


def degree_figure(panel: dict, writer) -> None:
  """``degrees.png``: internal mean degree of every first-level subgraph against its size, oracle vs this project
  (left), and the binned means of the oracle, the default and two variants (right)."""
  if not panel:
    return
  # matplotlib is heavy; it is imported only when figures are written.
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
  for name, colour in (("oracle", "black"), ("reference", "tab:blue")):
    p = panel["points"][name]
    left.scatter(p["sizes"], p["degrees"], s=4, alpha=0.35, color=colour,
                 label="reference's sampler (NumPy oracle)" if name == "oracle" else "this project (default)")
  left.set(xscale="log", xlabel="first-level subgraph size (nodes)", ylabel="mean degree inside the subgraph",
           title=f"every subgraph of {panel['graphs']} graph pairs")
  left.legend(fontsize=8, markerscale=3)
  x = np.asarray(panel["bin_centres"])
  for name in ("oracle", *PLOTTED):
    b = panel["binned"][name]
    mean, se = np.asarray(b["mean"]), np.asarray(b["se"])
    style = dict(color="black", lw=2) if name == "oracle" else dict(lw=1.2)
    right.errorbar(x, mean, yerr=2 * np.nan_to_num(se), marker="o", ms=3, capsize=2,
                   label="oracle" if name == "oracle" else f"JAX {name}", **style)
  right.set(xscale="log", xlabel="first-level subgraph size (bin mean)", ylabel="binned mean degree (± 2 s.e.)",
            title="binned: oracle, default and two variants")
  right.legend(fontsize=8)
  fig.tight_layout()
  writer.save_figure(fig, "degrees")


def summary_lines(panel: dict, probe: dict, attributes: dict) -> list[str]:
  """Plain-text lines for the console summary."""
  out = []
  for r in fidelity.verdicts(panel) if panel else []:
    out.append(f"two-sample {r['variant']:<22} {'pass' if r['pass'] else 'REJECTED'} (min p {r['min_p']:.1e}; "
               f"{len(r['rejected'])} of {r['tests']} tests reject)")
  if attributes:
    differ = [r["statistic"] for r in attributes["rows"] if not r["agree"]]
    out.append(f"attributes vs the reference's generator ({attributes['graphs']} graphs): "
               f"{len(attributes['rows']) - len(differ)} of {len(attributes['rows'])} statistics agree; "
               f"differ: {', '.join(differ) or 'none'}")
  for r in probe.get("rows", []):
    out.append(f"probe {r['task']:<10} ratio {r['graph_conv_ratio']:g}: {r['plain']:.3f} -> {r['graph']:.3f}, "
               f"median gap {r['gap_median']:+.3f}, p {r['p_graph_helps']:.1e} ({r['n']} graphs)")
  return out

