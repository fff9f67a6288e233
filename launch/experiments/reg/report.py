"""Results, tables and figures of the ``reg`` experiment.

Statistics: each (dataset, algorithm) has ``n`` independent seeds; its score
is the mean over seeds of the final normalised return (each seed's mean over
``final_eval_episodes`` episodes) with standard error ``sd / sqrt(n)``
(``ddof = 1``). The average over datasets of an algorithm has standard error
``sqrt(sum se_d^2) / D`` (datasets are independent).

Paired comparisons: seed ``i`` of every algorithm on a dataset starts from the
same key and is evaluated on the same episodes, so each algorithm's difference
from the reference (``reg_opg`` where it runs, else the first algorithm) is
taken seed by seed: per seed, the difference averaged over the datasets; its
mean and standard error over seeds (``paired``), beside the unpaired standard
error of the two averages.
"""

from __future__ import annotations

import math

import numpy as np

from launch.experiments.reg import data as reg_data

# D4RL -v2 normalised scores, CORL "last" (CORL's README), for context only.
D4RL_COLUMNS = ("hc-m", "hc-mr", "hc-me", "hop-m", "hop-mr", "hop-me", "w-m", "w-mr", "w-me")
D4RL_REFERENCE = {
    "TD3+BC": (48.10, 44.84, 90.78, 60.37, 64.42, 101.17, 82.71, 85.62, 110.03, 76.45),
    "CQL": (47.04, 45.04, 95.63, 59.08, 95.11, 99.26, 80.75, 73.09, 109.56, 78.28),
    "IQL": (48.31, 44.46, 94.74, 67.53, 97.43, 107.42, 80.91, 82.15, 111.72, 81.63),
    "ReBRAC": (64.04, 51.18, 103.80, 102.29, 94.98, 109.45, 85.82, 84.25, 111.86, 89.74),
}


def stderr(x) -> float:
  x = np.asarray(x, np.float64)
  return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")


NORMALISED = "normalised score"
RAW = "raw return"


def summarize(config, units, evals, tally: dict, datasets) -> dict:
  """``results.json`` content from the checkpointed tallies.

  Args:
    config: the run's config.
    units: ``(dataset, algorithm)`` in run order.
    evals: the chunks that were evaluated.
    tally: ``scores [U, n_evals, P]`` and ``digest [U, 8]``, and for datasets
      without an environment ``offline [U, M, P]`` and ``offline_mask [U, M]``
      (the final training metrics ``OFFLINE_METRICS``).
    datasets: ``{name: OfflineData}``.
  """
  n = config.num_seeds
  names = list(dict.fromkeys(u[0] for u in units))
  scored = [d for d in names if datasets[d].evaluable]
  res = {
      "experiment": "reg",
      "datasets": scored,
      "offline_datasets": [d for d in names if d not in scored],
      "algorithms": list(config.algorithms),
      "num_seeds": n,
      "num_updates": config.num_updates,
      "eval_updates": [c * config.updates_per_chunk for c in evals],
      "source": config.data.source,
      "scores": {d: {} for d in scored},
      "curves": {d: {} for d in scored},
      "offline": {d: {} for d in names if d not in scored},
      "param_digest": {d: {} for d in names},
      "dataset_info": {},
      "average": {},
  }
  for u, (d, a) in enumerate(units):
    res["param_digest"][d][a] = tally["digest"][u].tobytes().hex()
    if d in res["offline"]:
      res["offline"][d][a] = {
          m: {"mean": float(v.mean()), "se": stderr(v), "per_seed": v.tolist()}
          for i, m in enumerate(reg_data.OFFLINE_METRICS) if tally["offline_mask"][u, i]
          for v in [tally["offline"][u, i, :n].astype(np.float64)]
      }
      continue
    final = tally["scores"][u, -1, :n].astype(np.float64)
    res["scores"][d][a] = {"mean": float(final.mean()), "se": stderr(final), "per_seed": final.tolist()}
    curve = tally["scores"][u, :, :n].astype(np.float64)
    res["curves"][d][a] = {"mean": curve.mean(1).tolist(), "se": [stderr(c) for c in curve]}
  for d in names:
    ds = datasets[d]
    res["dataset_info"][d] = {
        "task": ds.task, "transitions": int(len(ds.transitions["rewards"])),
        "obs_dim": ds.obs_dim, "action_dim": ds.action_dim,
        "random_return": ds.random_return, "expert_return": ds.expert_return,
        "reward_scale": ds.reward_scale, **{k: v for k, v in ds.info.items() if isinstance(v, (int, float, str))},
    }
    res["dataset_info"][d]["score"] = ds.info.get("score", NORMALISED) if ds.evaluable else "none"
  if scored:
    for a in config.algorithms:
      means = [res["scores"][d][a]["mean"] for d in scored]
      ses = [res["scores"][d][a]["se"] for d in scored]
      res["average"][a] = {"mean": float(np.mean(means)), "se": float(math.sqrt(np.sum(np.square(ses))) / len(ses))}
    res["paired"] = paired_differences(res)
  return res


def paired_differences(res: dict) -> dict:
  """Each algorithm minus the reference, averaged over datasets, paired by seed (see the module docstring)."""
  algs, names = res["algorithms"], res["datasets"]
  ref = "reg_opg" if "reg_opg" in algs else algs[0]
  per_seed = lambda a: np.mean([res["scores"][d][a]["per_seed"] for d in names], axis=0)  # noqa: E731
  out = {"reference": ref, "differences": {}}
  for a in algs:
    if a != ref:
      diff = per_seed(a) - per_seed(ref)
      se_unpaired = math.hypot(res["average"][a]["se"], res["average"][ref]["se"])
      out["differences"][a] = {"mean": float(diff.mean()), "se": stderr(diff), "se_unpaired": se_unpaired}
  return out


def _markdown_paired(results: dict) -> list[str]:
  p = results.get("paired")
  if not p or not p["differences"]:
    return []
  ref = p["reference"]
  out = ["", f"Paired by seed (seed i of every algorithm shares its initial key and evaluation episodes): each "
         f"algorithm's score minus `{ref}`'s, averaged over the {len(results['datasets'])} datasets; mean ± s.e. over "
         f"{results['num_seeds']} seeds, beside the unpaired s.e. of the two averages.", "",
         f"| algorithm | minus `{ref}` | paired s.e. | unpaired s.e. | z (paired) |", "|---|---:|---:|---:|---:|"]
  for a, d in p["differences"].items():
    z = d["mean"] / d["se"] if d["se"] > 0 else float("nan")
    out.append(f"| `{a}` | {d['mean']:+.1f} | {d['se']:.1f} | {d['se_unpaired']:.1f} | {z:+.1f} |")
  return out


def score_label(results: dict) -> str:
  """What the score columns are: normalised scores, or raw returns where no reference returns were given."""
  kinds = {results["dataset_info"][d].get("score", NORMALISED) for d in results["datasets"]}
  if kinds == {RAW}:
    return "raw return (undiscounted episode return: no reference returns were given)"
  if kinds == {NORMALISED}:
    return "normalised score (100 = dataset's expert, 0 = uniform random)"
  return "score: " + "; ".join(f"{d}: {results['dataset_info'][d]['score']}" for d in results["datasets"])


def _cell(s: dict) -> str:
  return f"{s['mean']:.1f} ± {s['se']:.1f}"


def _offline_note(results: dict, d: str) -> str:
  i = results["dataset_info"][d]
  return (f"{d}: no environment (data.hdf5_task='none'; {i['obs_dim']}-dim observations, {i['action_dim']}-dim "
          "actions), so no policy was evaluated: offline training metrics at the end, mean ± s.e. over seeds")


def _offline_rows(results: dict, d: str) -> list[tuple[str, list[str]]]:
  """``(metric, cells per algorithm)`` of an unevaluated dataset (``-``: the algorithm has no such metric)."""
  algs = results["algorithms"]
  metrics = [m for m in reg_data.OFFLINE_METRICS if any(m in results["offline"][d][a] for a in algs)]
  return [(m, [_cell(results["offline"][d][a][m]) if m in results["offline"][d][a] else "-" for a in algs])
          for m in metrics]


def format_table(results: dict) -> str:
  """Plain-text table: rows datasets, columns algorithms, ``mean ± s.e.`` scores (and offline metrics)."""
  algs, names = results["algorithms"], results["datasets"]
  offline = results.get("offline_datasets", [])
  w = max(len(n) for n in names + offline + ["average"] + list(reg_data.OFFLINE_METRICS)) + 2
  cells = [_cell(results["scores"][d][a]) for d in names for a in algs]
  cells += [_cell(results["average"][a]) for a in algs] if names else []
  cells += [c for d in offline for _, row in _offline_rows(results, d) for c in row]
  cw = max([13] + [len(c) + 2 for c in list(algs) + cells])
  head = "dataset".ljust(w) + "".join(a.rjust(cw) for a in algs)
  lines = []
  if names:
    lines += [f"{score_label(results)}, {results['num_seeds']} seeds, {results['num_updates']:,} updates; "
              "mean ± s.e. over seeds", head]
    for d in names:
      lines.append(d.ljust(w) + "".join(_cell(results["scores"][d][a]).rjust(cw) for a in algs))
    lines.append("average".ljust(w) + "".join(_cell(results["average"][a]).rjust(cw) for a in algs))
  for d in offline:
    lines += [_offline_note(results, d) + f" ({results['num_seeds']} seeds, {results['num_updates']:,} updates)",
              "metric".ljust(w) + "".join(a.rjust(cw) for a in algs)]
    lines += [m.ljust(w) + "".join(c.rjust(cw) for c in cells) for m, cells in _offline_rows(results, d)]
  return "\n".join(lines)


def _markdown_offline(results: dict) -> list[str]:
  algs, out = results["algorithms"], []
  for d in results.get("offline_datasets", []):
    out += ["", _offline_note(results, d) + ".", "", "| metric | " + " | ".join(f"`{a}`" for a in algs) + " |",
            "|---|" + "---:|" * len(algs)]
    out += [f"| {m} | " + " | ".join(cells) + " |" for m, cells in _offline_rows(results, d)]
  return out


def markdown_table(results: dict) -> str:
  """The table in Markdown, dataset references, and D4RL's published numbers for context."""
  algs, names = results["algorithms"], results["datasets"]
  if not names:
    return "\n".join(_markdown_offline(results)[1:]) + "\n"
  label = score_label(results)
  md_label = ("Normalised score (100 = the dataset's expert, 0 = uniform random actions)" if label.startswith(NORMALISED)
              else label[0].upper() + label[1:])
  out = [
      f"{md_label}, mean ± s.e. over "
      f"{results['num_seeds']} seeds after {results['num_updates']:,} updates (data: {results['source']}). "
      "Best mean per row in bold.\n",
      "| dataset | " + " | ".join(f"`{a}`" for a in algs) + " |",
      "|---|" + "---:|" * len(algs),
  ]
  for d in names + ["average"]:
    row = results["average"] if d == "average" else results["scores"][d]
    best = max(row[a]["mean"] for a in algs)
    cells = [f"**{_cell(row[a])}**" if row[a]["mean"] == best else _cell(row[a]) for a in algs]
    out.append(f"| {d} | " + " | ".join(cells) + " |")
  out += _markdown_paired(results)
  behaviour = "behaviour (normalised return of its episodes)" if label.startswith(NORMALISED) else "behaviour"
  out += ["", f"| dataset | transitions | random return | expert return | {behaviour} |", "|---|---:|---:|---:|---|"]
  for d in names:
    i = results["dataset_info"][d]
    beh = i.get("behaviour", "")
    nr = i.get("normalized_return_mean")
    refs = (f"{i['random_return']:.1f} | {i['expert_return']:.1f}" if i.get("score", NORMALISED) == NORMALISED
            else "- | -")
    out.append(f"| {d} | {i['transitions']:,} | {refs} | {beh}{'' if nr is None else f' ({nr:.1f})'} |")
  out += _markdown_offline(results)
  if label.startswith(NORMALISED):
    out += ["", "For context, D4RL -v2 normalised scores published by CORL (\"last\" checkpoints; "
            "not produced here, different data and budgets):", "",
            "| algorithm | " + " | ".join(D4RL_COLUMNS) + " | average |",
            "|---|" + "---:|" * (len(D4RL_COLUMNS) + 1)]
    for name, row in D4RL_REFERENCE.items():
      out.append(f"| {name} | " + " | ".join(f"{x:.2f}" for x in row) + " |")
  return "\n".join(out) + "\n"


def make_figures(results: dict, writer) -> None:
  """``learning_curves.png``: normalised score against updates, one panel per dataset."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  names, algs = results["datasets"], results["algorithms"]
  if not names:  # no dataset was evaluated (no environment): no learning curves
    return
  cols = min(5, len(names))
  rows = math.ceil(len(names) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
  cmap = plt.get_cmap("tab10")
  x = np.asarray(results["eval_updates"])
  for ax, d in zip(axes.flat, names):
    for i, a in enumerate(algs):
      c = results["curves"][d][a]
      m, se = np.asarray(c["mean"]), np.nan_to_num(np.asarray(c["se"], float))
      style = dict(lw=2.2) if a in ("reg_opg", "iql", "reg") else dict(lw=1, ls="--")
      ax.plot(x, m, color=cmap(i % 10), label=a, **style)
      ax.fill_between(x, m - se, m + se, color=cmap(i % 10), alpha=0.15)
    ax.set_title(d, fontsize=9)
    ax.grid(alpha=0.3)
    ax.set_xlabel("updates", fontsize=8)
  for ax in axes.flat[len(names):]:
    ax.axis("off")
  axes[0][0].set_ylabel(f"{score_label(results).split(' (')[0]} (± s.e.)")
  handles, labels = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="lower center", ncol=min(len(algs), 5), fontsize=8, bbox_to_anchor=(0.5, -0.02 - 0.03 * (len(algs) > 5)))
  fig.tight_layout(rect=(0, 0.06, 1, 1))
  writer.save_figure(fig, "learning_curves")


def headline_table(results: dict) -> str:
  """The README's table: every algorithm's score averaged over the datasets."""
  algs = results["algorithms"]
  if not results["datasets"]:
    return "\n".join(_markdown_offline(results)[1:]) + "\n"
  best = max(results["average"][a]["mean"] for a in algs)
  cells = [f"**{_cell(results['average'][a])}**" if results["average"][a]["mean"] == best
           else _cell(results["average"][a]) for a in algs]
  label = score_label(results).split(" (")[0]
  text = (f"{label[0].upper()}{label[1:]} averaged over {len(results['datasets'])} datasets, mean ± s.e. over "
          f"{results['num_seeds']} seeds after {results['num_updates']:,} updates")
  p = results.get("paired")
  if not p or not p["differences"]:
    return (f"{text}.\n\n| " + " | ".join(f"`{a}`" for a in algs) + " |\n|" + "---:|" * len(algs) + "\n| "
            + " | ".join(cells) + " |\n")
  ref, diffs = p["reference"], p["differences"]
  paired = ["-" if a == ref else f"{diffs[a]['mean']:+.1f} ± {diffs[a]['se']:.1f}" for a in algs]
  return (f"{text}; second row: the difference from `{ref}`, paired by seed (the same initial keys and evaluation "
          "episodes), mean ± s.e. over seeds.\n\n| | " + " | ".join(f"`{a}`" for a in algs) + " |\n|---|"
          + "---:|" * len(algs) + "\n| average | " + " | ".join(cells) + f" |\n| minus `{ref}` | "
          + " | ".join(paired) + " |\n")
