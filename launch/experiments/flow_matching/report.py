"""Tables and figures of the ``flow_matching`` experiment (every number with its interval over seeds)."""

from __future__ import annotations

import numpy as np

from launch import tables


def _g(x, nd=3):
  return "nan" if x is None or not np.isfinite(x) else f"{x:.{nd}g}"


def _ci(i, nd=3):
  """``mean [lo, hi]`` of an interval dict."""
  return f"{_g(i['mean'], nd)} [{_g(i['lo'], nd)}, {_g(i['hi'], nd)}]"


def _header(r):
  c = r["costs"]
  return (f"{r['dataset']}: generative / feature / feature-test split {r['splits']['generative']} / "
          f"{r['splits']['feature']} / {r['splits']['feature_test']} images; {r['seeds']} training seeds per model "
          f"(each with its own autoencoder); {r['num_samples']} samples per model and noise set (validation and "
          f"test noises shared by every model); latents {r['latent_shape']} ({r['tokens']} DiT tokens); "
          f"{r['sampler']['solver']} x {r['sampler']['steps']} steps. Feature network (FID / KID features) test "
          f"accuracy {r['feature_test_accuracy']:.3f}. Autoencoder: held-out reconstruction MSE "
          f"{_ci(r['reconstruction_mse_held_out'])}, FID of reconstructions {_ci(r['fid_reconstructions'])} (the "
          f"floor of any flow); held-out real images ({r['n_held_out_real']}): FID {_g(r['fid_held_out_real'])}. "
          f"Parameters large {c['large']['params']:,} / small {c['small']['params']:,}. Intervals: "
          f"{round(100 * r['protocol']['level'])}% Student-t over seeds.")


def _rows_quality(r):
  return [[name, _ci(q["fid"]), _ci(q["kid"])] for name, q in r["quality"].items()]


def _rows_c2f(r):
  c = r["coarse_to_fine"]
  return [[f"{x['t_split']:g}", f"{x['small_forwards']} + {x['large_forwards']}", _ci(x["fid_val"]),
           _ci(x["kid_val"]), f"{x['fid_ratio']:.3f}", f"{x['kid_ratio']:.3f}",
           "yes" if x["passes"] else "no", f"{x['speedup_flops']:.2f}x"] for x in c["rows"]]


def c2f_note(r) -> str:
  c, k = r["coarse_to_fine"], r["costs"]
  return (f"Comparable quality (fixed before the runs): {c['rule']}. Chosen t_split = {c['t_split']:g} "
          f"({c['speedup_flops']:.2f}x fewer sampling FLOPs than the large model alone). On the test noises: FID "
          f"{_ci(c['fid_test'])} (ratio to large {c['fid_ratio_test']:.3f}; paired difference "
          f"{_ci(c['fid_test_minus_large'])}), KID {_ci(c['kid_test'])} (ratio {c['kid_ratio_test']:.3f}; paired "
          f"difference {_ci(c['kid_test_minus_large'])}). Costs: forward FLOPs per sample large "
          f"{k['large']['forward_flops']:.3g} / small {k['small']['forward_flops']:.3g}; training FLOPs large "
          f"{k['large']['training_flops']:.3g} / small {k['small']['training_flops']:.3g} (each "
          f"{k['large']['training_steps']} steps), autoencoder {k['autoencoder']['training_flops']:.3g} (shared). "
          "Wall-clock speedups: `make bench`.")


def _rows_reduction(r):
  out = []
  for x in r["reduction"]:
    d = x.get("fid_minus_random") or x.get("fid_minus_full")
    dk = x.get("kid_minus_random") or x.get("kid_minus_full")
    ref = "random" if "fid_minus_random" in x else ("full" if d else "")
    out.append([f"{x['fraction']:g}", x["criterion"], str(x["rows"]), _ci(x["fid"]), _ci(x["kid"]),
                f"{_ci(d)} ({ref})" if d else "", f"{_ci(dk)} ({ref})" if dk else "", str(x["steps_to_quality"])])
  return out


def _rows_stability(r):
  out = []
  for x in r["stability"]:
    out.append([x["pair"], f"{_g(x['fid_large']['mean'])} / {_g(x['fid_other']['mean'])}"]
               + [f"{_ci(x[k])} ({_g(x[k + '_shuffled']['mean'])})" for k in ("cosine", "latent_rel_l2", "psnr",
                                                                            "nn_match")])
  return out


def _rows_conditional(r):
  return [[x["labels"], f"{x['fraction']:g}", f"{x['scale']:g}", _ci(x["accuracy"]),
           _ci(x["accuracy_minus_random"]) if "accuracy_minus_random" in x else "", _ci(x["fid"]), _ci(x["kid"])]
          for x in r["conditional"]]


HEADERS = {
    "quality": ["model (test noises)", "FID", "KID"],
    "c2f": ["t_split", "forwards small + large", "FID (val)", "KID (val)", "FID / large", "KID / large",
            "comparable", "speedup FLOPs"],
    "reduction": ["fraction", "criterion", "rows", "FID", "KID", "FID paired difference", "KID paired difference",
                  "steps to quality"],
    "stability": ["pair (same test noises)", "FID large / other", "feature cosine (shuffled)",
                  "latent rel. L2 (shuffled)", "PSNR dB (shuffled)", "NN match (shuffled)"],
    "conditional": ["labels chosen by", "labelled", "guidance w", "conditional accuracy", "accuracy - random",
                    "FID", "KID"],
}


def _sections(r):
  out = [("Quality of each model alone", "quality", _rows_quality(r)),
         ("Coarse-to-fine: small model for t < t_split, large after (validation noises)", "c2f", _rows_c2f(r))]
  if r["reduction"]:
    out.append(("Data reduction on the large model (100% row: all data; paired differences against random at the "
                "same fraction, or against all data)", "reduction", _rows_reduction(r)))
  out.append(("Stability beside quality (large_s vs another model of the same seed; shuffled pairing in "
              "parentheses)", "stability", _rows_stability(r)))
  if r["conditional"]:
    out.append(("Class-conditional flows with classifier-free guidance, labels kept on a subset chosen by each "
                "criterion", "conditional", _rows_conditional(r)))
  return out


def _table(head, rows, md):
  if md:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(x) + " |" for x in rows]
  return tables.text(head, rows, align="<" * len(head))


def format_tables(results: dict) -> str:
  lines = [_header(results)]
  for title, key, rows in _sections(results):
    lines += ["", title] + _table(HEADERS[key], rows, False)
    if key == "c2f":
      lines.append(c2f_note(results))
  return "\n".join(lines)


def markdown(results: dict) -> str:
  lines = [_header(results)]
  for title, key, rows in _sections(results):
    lines += ["", f"**{title}**", ""] + _table(HEADERS[key], rows, True)
    if key == "c2f":
      lines += ["", c2f_note(results)]
  return "\n".join(lines) + "\n"


def headline(results: dict) -> str:
  """The README's table: quality of each model alone and coarse-to-fine at the chosen split."""
  r = results
  lines = _table(HEADERS["quality"], _rows_quality(r), True)
  return "\n".join(lines) + "\n\n" + c2f_note(r) + "\n"


def displayed(image: np.ndarray) -> np.ndarray:
  """What a figure shows of one ``[H, W, C]`` image: RGB(A) in colour, any other ``C`` (1, 2, 5, ...) its first channel."""
  return image if image.shape[-1] in (3, 4) else image[..., 0]


def make_figures(results, alone, c2f_test, data, hp, writer) -> None:
  """``sample_grid.png`` (the same test noises across models), ``t_split_curves.png``, ``data_reduction.png``."""
  # matplotlib is heavy; it is imported only when figures are written.
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  rows = [("real (held-out)", data.test_x)] + [(n, alone[n]["img"]) for n in ("large_s0", "large_alt_s0",
                                                                               "small_s0")]
  rows.append((f"c2f t_split {results['coarse_to_fine']['t_split']:g}", c2f_test[0]["img"]))
  rows += [(n, alone[n]["img"]) for n in alone if n.endswith("_s0") and n.startswith(("random", "loss"))][:2]
  cols = min(hp.run.grid_columns, len(data.test_x), hp.protocol.num_samples)
  fig, axes = plt.subplots(len(rows), cols, figsize=(cols * 0.8, len(rows) * 0.85), squeeze=False)
  for i, (label, imgs) in enumerate(rows):
    for j in range(cols):
      img = np.asarray(imgs[j])
      axes[i, j].imshow(displayed(img), cmap="gray_r", vmin=0, vmax=1)
      axes[i, j].set_xticks([])
      axes[i, j].set_yticks([])
    axes[i, 0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=7)
  fig.suptitle("Samples from the same test noises (column = noise; real row: held-out images)", fontsize=9)
  writer.save_figure(fig, "sample_grid")

  c2f = results["coarse_to_fine"]["rows"]
  ts = [x["t_split"] for x in c2f]
  fig, ax = plt.subplots(1, 2, figsize=(8, 3))
  for k, (key, label) in enumerate((("fid_val", "FID"), ("kid_val", "KID"))):
    m = np.array([x[key]["mean"] for x in c2f])
    ax[k].errorbar(ts, m, yerr=[m - [x[key]["lo"] for x in c2f], [x[key]["hi"] for x in c2f] - m], fmt="o-",
                   capsize=2, label="coarse-to-fine (validation)")
    margin = results["protocol"]["fid_margin" if k == 0 else "kid_margin"]
    ax[k].axhline((1 + margin) * m[0], ls="--", c="r", lw=0.8, label="fixed margin")
    ax[k].set(xlabel="t_split (small model before)", ylabel=f"{label} (feature network)")
    ax[k].legend(fontsize=7)
  fig.tight_layout()
  writer.save_figure(fig, "t_split_curves")

  red = results["reduction"]
  if red:
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(red)), 3))
    m = np.array([x["fid"]["mean"] for x in red])
    ax.bar(range(len(red)), m, yerr=[m - [x["fid"]["lo"] for x in red], [x["fid"]["hi"] for x in red] - m],
           capsize=2)
    ax.set_xticks(range(len(red)))
    ax.set_xticklabels([f"{x['criterion']} {x['fraction']:g}" for x in red], rotation=30, fontsize=7)
    ax.set_ylabel("FID, large model (interval over seeds)")
    fig.tight_layout()
    writer.save_figure(fig, "data_reduction")
