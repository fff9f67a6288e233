"""Tables and figures of the ``flow_matching`` experiment."""

from __future__ import annotations

import numpy as np

QUALITY_KEYS = ("fid", "kid", "precision", "recall", "sw_latent", "class_entropy")


def _f(x, nd=3):
  return "nan" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}g}"


def _rows_quality(results):
  q = results["quality"]
  names = ["real_heldout"] + [k for k in q if k != "real_heldout" and not any(
      t in k for t in ("_cluster", "_loss", "_gradient", "_kcenter", "_herding", "small_random"))]
  return [[n] + [_f(q[n].get(k)) for k in QUALITY_KEYS] for n in names]


def _rows_stability(results):
  out = []
  for pair, s in results["stability"].items():
    out.append([pair, f"{s['cosine']:.3f} ({s['cosine_shuffled']:.3f})",
                f"{s['latent_rel_l2']:.3f} ({s['latent_rel_l2_shuffled']:.3f})",
                f"{s['psnr']:.1f} ({s['psnr_shuffled']:.1f})", f"{s['nn_match']:.3f} ({s['nn_match_shuffled']:.3f})"])
  return out


def _rows_c2f(results):
  return [[f"{r['t_split']:g}", f"{r['nfe_small']} + {r['nfe_large']}", _f(r["fid"]), _f(r["kid"]),
           "yes" if r["comparable"] else "no", _f(r["fid_small_first"]),
           f"{r['stability_to_large']['cosine']:.3f}",
           "identical" if r["stability_to_large"]["pixel_mse"] == 0 else f"{r['stability_to_large']['psnr']:.1f}",
           f"{r['speedup_flops']:.2f}x", f"{r['speedup_wall']:.2f}x"] for r in results["coarse_to_fine"]]


def c2f_note(results) -> str:
  """The comparable-quality rule, its numbers and the chosen split."""
  c = results["c2f_choice"]
  return (f"Comparable quality: {c['rule']}: threshold {c['fid_large']:.3g} + {c['threshold'] - c['fid_large']:.3g}"
          f" = {c['threshold']:.3g} (SE {c['fid_se']:.2g}; FID gap between large-model training seeds "
          f"{c['seed_gap']:.2g}). Chosen t_split = {c['t_split']:g}: FID {c['fid']:.3g}, KID {c['kid']:.3g}, "
          f"speedup {c['speedup_wall']:.2f}x wall clock ({c['speedup_flops']:.2f}x FLOPs) against the large model "
          f"alone at equal steps.")


def _rows_reduction(results):
  red = results["reduction"]
  out = []
  for key, r in red.items():
    base = red.get(f"random@{r['fraction']:g}")
    delta = "" if base is None or r["criterion"] == "random" else (
        f"{r['fid'] - base['fid']:+.3g} ± {np.hypot(r['fid_se'], base['fid_se']):.2g}")
    out.append([f"{r['fraction']:g}", r["criterion"], str(r["size"]), f"{r['fid']:.3g} ± {r['fid_se']:.2g}",
                delta, f"{r['kid']:.3g} ± {r['kid_se']:.2g}", f"{r['precision']:.3f}", f"{r['recall']:.3f}"])
  return out


HEADERS = {
    "quality": ["model", "FID", "KID", "precision", "recall", "SW latent", "class entropy"],
    "stability": ["pair (identical noise)", "cosine (shuffled)", "latent rel L2 (shuffled)", "PSNR dB (shuffled)",
                  "NN match (shuffled)"],
    "c2f": ["t_split", "NFE coarse + large", "FID", "KID", "comparable", "FID, small_s0 first", "cosine to large",
            "PSNR to large", "speedup FLOPs", "speedup wall"],
    "reduction": ["fraction", "criterion", "rows", "FID ± SE", "FID - random", "KID ± SE", "precision", "recall"],
}


def _header(results):
  return (f"{results['dataset']}: {results['n_train']} training images, {results['n_eval']} samples per model; "
          f"classifier test accuracy {results['classifier_accuracy']:.3f}; latents {results['latent_shape']}; "
          f"{results['sampler']['solver']} x {results['sampler']['steps']} steps; "
          f"params small {results['params']['small']:,} / coarse {results['params']['coarse']:,} / "
          f"large {results['params']['large']:,}")


def _sections(results):
  out = [("Quality (classifier features; real_heldout = floor, degraded = deliberately bad)", "quality",
          _rows_quality(results)),
         ("Stability: paired metrics from identical noise (shuffled-pairing baseline)", "stability",
          _rows_stability(results)),
         (f"Coarse-to-fine (coarse model, trained on t < {results['coarse_t_max']:g} only, for t < t_split; "
          "large_s0 after)", "c2f", _rows_c2f(results))]
  if results["reduction"]:
    out.append(("Data reduction (mean ± SE over seeds)", "reduction", _rows_reduction(results)))
  return out


def format_tables(results: dict) -> str:
  lines = [_header(results)]
  for title, key, rows in _sections(results):
    head = HEADERS[key]
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    lines += ["", title, "  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    if key == "c2f":
      lines.append(c2f_note(results))
  return "\n".join(lines)


def markdown(results: dict) -> str:
  lines = [_header(results) + "."]
  for title, key, rows in _sections(results):
    lines += ["", f"**{title}**", "", "| " + " | ".join(HEADERS[key]) + " |",
              "|" + "---|" * len(HEADERS[key])]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if key == "c2f":
      lines += ["", c2f_note(results)]
  return "\n".join(lines) + "\n"


def make_figures(results, samples, data, rc, writer, large0, small0) -> None:
  """``sample_grid.png`` (identical noise across models), ``t_split_curves.png``, ``data_reduction.png``."""
  # matplotlib is heavy; it is imported only when figures are written.
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  rows = [("real (held-out)", data["test_x"])]
  names = [large0] + [n for n in samples if n.startswith("large_") and n != large0]
  rows += [(n, samples[n]["img"]) for n in names + [small0, "degraded"]]
  rows += [(n, samples[n]["img"]) for n in samples if n.startswith("c2f_")]
  cols = min(rc.grid_columns, len(data["test_x"]))
  fig, axes = plt.subplots(len(rows), cols, figsize=(cols * 0.8, len(rows) * 0.85), squeeze=False)
  for r, (label, imgs) in enumerate(rows):
    for c in range(cols):
      ax = axes[r, c]
      ax.imshow(np.asarray(imgs[c]), cmap="gray_r", vmin=0, vmax=1)
      ax.set_xticks([])
      ax.set_yticks([])
    axes[r, 0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=7)
  fig.subplots_adjust(top=1 - 0.35 / fig.get_figheight(), hspace=0.15, wspace=0.1)
  fig.suptitle("Samples from identical noise (column = noise)", fontsize=9, y=1 - 0.1 / fig.get_figheight())
  writer.save_figure(fig, "sample_grid")

  c2f = results["coarse_to_fine"]
  ts = [r["t_split"] for r in c2f]
  fig, ax = plt.subplots(1, 3, figsize=(11, 3))
  ax[0].plot(ts, [r["fid"] for r in c2f], "o-", label="coarse model first")
  ax[0].plot(ts, [r["fid_small_first"] for r in c2f], "x--", label="small_s0 first")
  ax[0].axhline(results["c2f_choice"]["threshold"], ls="--", c="r", lw=0.8, label="comparable-quality limit")
  ax[0].axhline(results["quality"]["real_heldout"]["fid"], ls=":", c="k", label="held-out real")
  ax[0].set(xlabel="t_split", ylabel="FID (classifier features)")
  ax[0].legend(fontsize=7)
  ax[1].plot(ts, [r["stability_to_large"]["cosine"] for r in c2f], "o-", label="paired")
  ax[1].plot(ts, [r["stability_to_large"]["cosine_shuffled"] for r in c2f], "x--", label="shuffled")
  ax[1].set(xlabel="t_split", ylabel="cosine to large model")
  ax[1].legend(fontsize=7)
  ax[2].plot(ts, [r["speedup_flops"] for r in c2f], "o-", label="FLOP cost model")
  ax[2].plot(ts, [r["speedup_wall"] for r in c2f], "s-", label="wall clock")
  ax[2].set(xlabel="t_split", ylabel="speedup vs large alone")
  ax[2].legend(fontsize=7)
  fig.tight_layout()
  writer.save_figure(fig, "t_split_curves")

  red = results["reduction"]
  if red:
    fracs = sorted({r["fraction"] for r in red.values()}, reverse=True)
    crits = list(dict.fromkeys(r["criterion"] for r in red.values()))
    fig, ax = plt.subplots(figsize=(0.45 * len(crits) * len(fracs) + 2, 3))
    w = 0.8 / len(fracs)
    for j, f in enumerate(fracs):
      vals = [red[f"{c}@{f:g}"] for c in crits]
      ax.bar(np.arange(len(crits)) + j * w, [v["fid"] for v in vals], w, yerr=[v["fid_se"] for v in vals],
             label=f"{f:g} of the data", capsize=2)
    ax.set_xticks(np.arange(len(crits)) + w * (len(fracs) - 1) / 2)
    ax.set_xticklabels(crits, rotation=20, fontsize=7)
    ax.set_ylabel("FID (mean ± SE over seeds)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    writer.save_figure(fig, "data_reduction")


def headline(results: dict) -> str:
  """The README's table: coarse-to-fine sampling, its quality and speedup per split."""
  lines = ["| " + " | ".join(HEADERS["c2f"]) + " |", "|" + "---|" * len(HEADERS["c2f"])]
  lines += ["| " + " | ".join(r) + " |" for r in _rows_c2f(results)]
  return "\n".join(lines) + "\n\n" + c2f_note(results) + "\n"
