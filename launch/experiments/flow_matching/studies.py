"""The ``flow_matching`` experiment's studies on top of the protocol: data reduction, stability, guidance.

* Data reduction (paper Sec. 6) on the large model: each criterion's subset
  at each fraction against random at the same fraction and against the
  full-data large model (the 100% row), FID / KID with intervals over seeds,
  paired differences, and steps to quality from the training-curve FIDs.
* Stability (paper Sec. 4): paired metrics between models sampled from the
  same test noises (another flow seed on the same autoencoder, the small
  architecture, reduced data), each beside both models' FIDs and the
  shuffled-pairing baseline.
* Class-conditional flows with classifier-free guidance, labels kept on a
  subset chosen by each criterion: conditional accuracy (by the feature
  network) and FID / KID per guidance scale.
"""

from __future__ import annotations

import numpy as np

from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import evaluation as ev_lib
from launch.experiments.flow_matching import training
from methods.flow_matching import evaluation, metrics

STABILITY_KEYS = ("cosine", "latent_rel_l2", "psnr", "nn_match")


def reduction(env: ev_lib.Env, groups, alone: dict, curves: dict, rows: dict) -> list[dict]:
  """One row per (fraction, criterion), the full-data row first."""
  hp, rc, lv = env.hp, env.hp.run, env.hp.protocol.level
  seeds = range(rc.seeds)
  steps = [rc.chunk_steps * (k + 1) for k in range(rc.flow_steps // rc.chunk_steps)]
  margin = hp.protocol.fid_margin

  def row(names, fraction, criterion, base):
    fid, kid = [alone[n]["fid"] for n in names], [alone[n]["kid"] for n in names]
    out = {"fraction": fraction, "criterion": criterion, "rows": int(len(rows[names[0]])),
           "fid": ev_lib.interval(fid, lv), "kid": ev_lib.interval(kid, lv),
           "steps_to_quality": evaluation.steps_to_quality(steps, np.stack([curves[n] for n in names]),
                                                           margin=margin)}
    for label, ref in base.items():
      out[f"fid_minus_{label}"] = ev_lib.paired(fid, [alone[n]["fid"] for n in ref], lv)
      out[f"kid_minus_{label}"] = ev_lib.paired(kid, [alone[n]["kid"] for n in ref], lv)
    return out

  full = [training.seeded("large", s) for s in seeds]
  out = [row(full, 1.0, "all", {})]
  for f in rc.reduction_fractions:
    rand = [training.seeded(training.reduced("random", f), s) for s in seeds]
    for c in rc.reduction_criteria:
      names = [training.seeded(training.reduced(c, f), s) for s in seeds]
      base = {"full": full} if c == "random" or "random" not in rc.reduction_criteria else {"random": rand,
                                                                                            "full": full}
      out.append(row(names, f, c, base))
  return out


def stability(env: ev_lib.Env, groups, alone: dict) -> list[dict]:
  """Paired metrics of each seed's large model against each other model of that seed, with intervals over seeds."""
  rc, lv = env.hp.run, env.hp.protocol.level
  others = [("other flow seed", "large_alt"), ("small architecture", "small")]
  others += [(f"{c} {fm_config.percent(f)}%", training.reduced(c, f)) for f in rc.reduction_fractions
             for c in rc.reduction_criteria]
  out = []
  for label, prefix in others:
    per = []
    for s in range(rc.seeds):
      a, b = alone[training.seeded("large", s)], alone[training.seeded(prefix, s)]
      per.append(metrics.stability(a["feat"], b["feat"], a["lat"], b["lat"], a["img"], b["img"], seed=s))
    row = {"pair": f"large vs {label}", "fid_large": ev_lib.interval([alone[training.seeded("large", s)]["fid"]
                                                                      for s in range(rc.seeds)], lv),
           "fid_other": ev_lib.interval([alone[training.seeded(prefix, s)]["fid"] for s in range(rc.seeds)], lv)}
    for k in STABILITY_KEYS:
      row[k] = ev_lib.interval([p[k] for p in per], lv)
      row[k + "_shuffled"] = ev_lib.interval([p[k + "_shuffled"] for p in per], lv)
    out.append(row)
  return out


def conditional(env: ev_lib.Env, groups, params: dict) -> list[dict]:
  """One row per (labelled-subset criterion, guidance scale): conditional accuracy, FID, KID over seeds."""
  hp, rc, lv = env.hp, env.hp.run, env.hp.protocol.level
  group = next((g for g in groups if g.conditional), None)
  if group is None:
    return []
  labels = evaluation.balanced_labels(hp.protocol.num_samples, hp.flow.num_classes)
  out = []
  for c in tuple(rc.reduction_criteria) + ("",):
    for w in hp.protocol.guidance_scales:
      acc, fid, kid = [], [], []
      for s in range(rc.seeds):
        model = params[training.seeded(training.conditional(c), s)]
        x1 = ev_lib.sample_guided(env, hp.large, training.flow_of(hp, group), model, labels, w)
        q = ev_lib.score(env, s, x1)
        acc.append(evaluation.conditional_accuracy(q["logits"], labels))
        fid.append(q["fid"])
        kid.append(q["kid"])
      out.append({"labels": c or "all", "fraction": rc.labelled_fraction if c else 1.0, "scale": w,
                  "accuracy": ev_lib.interval(acc, lv), "fid": ev_lib.interval(fid, lv),
                  "kid": ev_lib.interval(kid, lv), "_acc": acc})
  by = {(r["labels"], r["scale"]): r for r in out}
  for r in out:
    ref = by.get(("random", r["scale"]))
    if ref is not None and r["labels"] not in ("random", "all"):
      r["accuracy_minus_random"] = ev_lib.paired(r["_acc"], ref["_acc"], lv)
  for r in out:
    del r["_acc"]
  return out
