"""The GraphPFN prior's fidelity: two-sample tests against the reference's sampler, and the graph-matters probe.

Three stages of the ``graphpfn_prior`` experiment, each cached in the workdir
(``two_sample.json``, ``attribute_panel.json``, ``probe.json``) so that a resumed run does not redo
them (each a deterministic function of the config):

- :func:`two_sample`: ``panel_graphs`` hyperparameter sets of the
  ``structure`` section, for each a graph of the NumPy oracle of the
  reference's sampler (``launch/bench/graphpfn_oracle.py``) and a graph of
  the JAX sampler -- its default and each of the five earlier variants
  (:data:`methods.graphpfn.structure.VARIANTS`), one at a time -- compared
  by KS and paired signed-rank tests of
  :data:`methods.graphpfn.two_sample.STRUCTURE_STATS`, Bonferroni over all
  of them at the 1% level (fixed before any result was seen). The
  per-subgraph points (size, internal mean degree) feed the degree plot.
- :func:`attribute_panel`: the attribute and task generator (this
  project's default attribute hyperparameters, the paper's) against a NumPy
  port of the reference's generator on the same ``attribute_panel_graphs``
  graphs: chi-square or KS tests of
  :data:`launch.bench.graphpfn_scm_oracle.SCM_STATS`, Bonferroni at 1%.
- :func:`probe`: ``probe_graphs`` prior samples with ``graph_conv_ratio``
  drawn from ``{0, probe_high_ratio}`` and the structural inputs (degree,
  PageRank, eigenvectors) switched off, so that the two ratios separate
  targets that depend on neighbours' features from those that do not; per
  (task kind, ratio) the ridge probe's test score without and with
  neighbour-averaged features (:mod:`methods.graphpfn.probe`), means with
  intervals, the median gap and the one-sided signed-rank p-value.
  Neighbours are said to help where that p-value is below ``0.01 /
  rows`` (Bonferroni over the rows, fixed in advance).
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import numpy as np

from launch import mesh as mesh_lib
from launch.bench import graphpfn_oracle
from launch.bench import graphpfn_scm_oracle
from methods.graphpfn.probe import measure as measure_probe
from methods.graphpfn import two_sample as two_sample_lib

ALPHA = 0.01  # family-wise level of the two-sample panel and of the probe's "neighbours help" verdicts
SIZE_BINS = 8  # subgraph-size bins (quantiles of the oracle's sizes) of the degree plot's binned means


def _cached(ctx, name: str, compute):
  """``compute()``'s JSON result, stored as ``<workdir>/<name>`` and read back on a resumed run."""
  path = os.path.join(ctx.workdir, name)
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  out = compute()
  with open(path + ".tmp", "w") as f:
    json.dump(out, f)
  os.replace(path + ".tmp", path)
  return out


def _binned(sizes: np.ndarray, degrees: np.ndarray, edges: np.ndarray) -> dict:
  """Mean internal degree, its standard error and the count per subgraph-size bin."""
  which = np.clip(np.searchsorted(edges, sizes, side="right") - 1, 0, len(edges) - 2)
  mean, se, count = [], [], []
  for b in range(len(edges) - 1):
    d = degrees[which == b]
    count.append(int(len(d)))
    mean.append(float(d.mean()) if len(d) else float("nan"))
    se.append(float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan"))
  return {"mean": mean, "se": se, "count": count}


def two_sample(config, ctx, structure_hp) -> dict:
  """The panel of the default and every variant against the oracle (``{}`` when ``panel_graphs`` is 0)."""
  if config.panel_graphs == 0:
    return {}

  def compute():
    panel = graphpfn_oracle.two_sample_panel(structure_hp, graphs=config.panel_graphs, seed=config.seed)
    sizes = panel.subgraphs["oracle"][0]
    edges = np.unique(np.quantile(sizes, np.linspace(0, 1, SIZE_BINS + 1)))
    centres = [float(np.mean(sizes[(sizes >= lo) & (sizes <= hi)])) for lo, hi in zip(edges[:-1], edges[1:])]
    return {
        "graphs": config.panel_graphs, "alpha": ALPHA, "statistics": list(two_sample_lib.STRUCTURE_STATS),
        "results": {name: [r._asdict() for r in res] for name, res in panel.results.items()},
        "binned": {name: _binned(s, d, edges) for name, (s, d) in panel.subgraphs.items()},
        "bin_edges": edges.tolist(), "bin_centres": centres,
        "points": {name: {"sizes": s.tolist(), "degrees": d.tolist()} for name, (s, d) in panel.subgraphs.items()},
    }

  out = _cached(ctx, "two_sample.json", compute)
  return out


def probe(config, ctx, structure_hp, attribute_hp) -> dict:
  """The probe's rows per (task kind, ``graph_conv_ratio``) (``{}`` when ``probe_graphs`` is 0)."""
  if config.probe_graphs == 0:
    return {}
  hp = dataclasses.replace(attribute_hp, graph_conv_ratios=(0.0, config.probe_high_ratio), degree_input_prob=0.0,
                           pagerank_input_prob=0.0, eigvec_input_prob=0.0)
  sharding = mesh_lib.data_sharding(ctx.mesh)
  batch = mesh_lib.padded_size(config.batch_size, ctx.mesh)

  def compute():
    summaries = measure_probe(structure_hp, hp, graphs=config.probe_graphs, batch_size=batch,
                                  seed=config.seed + 1, place=lambda keys: jax.device_put(keys, sharding))
    rows = [dict(task=t, graph_conv_ratio=r, **s._asdict()) for (t, r), s in summaries.items()]
    threshold = ALPHA / max(len(rows), 1)
    for row in rows:
      row["helps"] = bool(row["p_graph_helps"] < threshold)
    return {"graphs": config.probe_graphs, "threshold": threshold, "rows": rows}

  return _cached(ctx, "probe.json", compute)


def attribute_panel(config, ctx) -> dict:
  """The attribute generator against the reference's (``{}`` when ``attribute_panel_graphs`` is 0): this project's
  default :class:`methods.graphpfn.AttributeConfig` and the NumPy port of the reference's pretraining draw, on the
  same ``attribute_panel_graphs`` graphs of :data:`graphpfn_scm_oracle.SMALL` sizes; one row per statistic."""
  if config.attribute_panel_graphs == 0:
    return {}

  def compute():
    hp = graphpfn_scm_oracle.SMALL
    panel = graphpfn_scm_oracle.scm_two_sample_panel(graphs=config.attribute_panel_graphs, seed=config.seed,
                                                     structure_hp=hp)
    return {"graphs": config.attribute_panel_graphs, "alpha": ALPHA, "threshold": panel.results[0].threshold,
            "nodes": [hp.n_nodes_min, hp.n_nodes_max], "ours_ok": int(panel.ours_ok),
            "rows": [r._asdict() for r in panel.rows]}

  return _cached(ctx, "attribute_panel.json", compute)


def verdicts(panel: dict) -> list[dict]:
  """Per sampler (the default first, then each variant): rejecting tests, smallest p-value, pass."""
  out = []
  for name, res in panel.get("results", {}).items():
    rejected = [f"{r['statistic']}/{r['test']}" for r in res if r["reject"]]
    out.append({"variant": name, "rejected": rejected, "min_p": min(r["p_value"] for r in res),
                "threshold": res[0]["threshold"], "tests": len(res), "pass": not rejected})
  return out


# What each sampler of the panel is (the keys: "reference" and :data:`methods.graphpfn.structure.VARIANTS`).
VARIANT_DOC = {
    "reference": "this project's default (the reference's prior)",
    "size_weighted": "first-level edges spread by block density times both sizes (degree grows with size)",
    "no_cap": "first-level degree not capped at min_first_level_nodes - 1",
    "equal_weights": "equal node weights instead of U(0, 1)",
    "unconstrained_groups": "group sizes with empty groups allowed, no minimum group size",
    "n_choose_2": "diagonal block pairs n(n-1)/2 instead of n^2",
}
