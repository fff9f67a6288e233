"""Sampling and evaluation of the ``flow_matching`` experiment (identical noise for every model).

Every model samples the same noise ``x0`` (one per held-out image; the labels
of class-conditional models are the held-out labels) with one jitted
coarse-to-fine sampler, sharded over the sample batch: a large model alone is
``t_split = 0``, a small one ``t_split = 1``. Samples are decoded by the
autoencoder and embedded by the classifier; quality is measured against the
training images, with the held-out images as the floor. Coarse-to-fine uses
the ``coarse`` model (trained on ``t < coarse_t_max``) for ``t < t_split`` and
``large_s0`` after; :func:`choose_t_split` states the comparable-quality rule.
"""

from __future__ import annotations

import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from launch import mesh as mesh_lib
from launch.experiments import flow_matching_report as report
from methods import flow_matching as fm


@functools.lru_cache(maxsize=None)
def sampler_fn(small: fm.NetConfig, large: fm.NetConfig, flow: fm.FlowConfig, sampler: fm.SamplerConfig, mesh):
  """``(small_params, large_params, x0 [B, ...], y [B], t_split) -> (x1, (nfe_small, nfe_large))``, ``B`` sharded.

  Fixed-step solvers: one jitted program for every ``t_split`` (the number of
  small steps is traced). ``dopri5``: one jitted program per ``t_split`` (the
  segment ends are static); its NFE are read back from the device.
  """
  _, small_apply = fm.core.make_velocity(small, flow)
  _, large_apply = fm.core.make_velocity(large, flow)
  sh, rep = mesh_lib.data_sharding(mesh), mesh_lib.replicated(mesh)
  steps, solver = sampler.steps, sampler.solver
  if solver in fm.samplers.FORWARDS_PER_STEP:
    per = fm.samplers.FORWARDS_PER_STEP[solver]

    def fn(ps, pl, x0, y, n_small):
      x = fm.samplers.integrate(lambda x, t: small_apply(ps, x, t, y), x0, start=0, stop=n_small,
                                num_steps=steps, solver=solver)
      return fm.samplers.integrate(lambda x, t: large_apply(pl, x, t, y), x, start=n_small, stop=steps,
                                   num_steps=steps, solver=solver)

    jfn = jax.jit(fn, in_shardings=(rep, rep, sh, sh, rep), out_shardings=sh)

    def fixed(ps, pl, x0, y, t_split):
      k = fm.samplers.small_steps(t_split, steps)
      return jfn(ps, pl, x0, y, jnp.int32(k)), (k * per, (steps - k) * per)

    return fixed
  compiled = {}

  def adaptive(ps, pl, x0, y, t_split):
    if t_split not in compiled:
      def fn(ps, pl, x0, y):
        return fm.samplers.coarse_to_fine_solve(lambda x, t: small_apply(ps, x, t, y),
                                                lambda x, t: large_apply(pl, x, t, y), x0, sampler,
                                                t_split=t_split, split_nfe=True)

      compiled[t_split] = jax.jit(fn, in_shardings=(rep, rep, sh, sh), out_shardings=(sh, (rep, rep)))
    x, (ns, nl) = compiled[t_split](ps, pl, x0, y)
    return x, (int(ns), int(nl))

  return adaptive


def forward_flops(net: fm.NetConfig, flow: fm.FlowConfig, params, x, y) -> float:
  """XLA's FLOP count of one velocity evaluation on the batch ``x``."""
  _, apply = fm.core.make_velocity(net, flow)
  cost = jax.jit(apply).lower(params, x, jnp.zeros(x.shape[0]), y).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", math.nan))


def _embed(hp, aux, z_scaled, scale, image_size):
  z = jnp.asarray(z_scaled) / scale
  img = np.asarray(fm.auxiliary.decode(aux.autoencoder, z, cfg=hp.autoencoder, image_size=image_size))
  logits, feats = fm.auxiliary.classify(aux.classifier, img, cfg=hp.classifier)
  return {"lat": np.asarray(z_scaled).reshape(len(img), -1), "img": img, "feat": np.asarray(feats),
          "logits": np.asarray(logits)}


def _se(x):
  x = np.asarray(x, np.float64)
  return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def evaluate(config, hp, groups, states, aux, data, z_train, scale, subsets, ctx) -> dict:
  """Samples every model, computes every table; returns the results dict (figures written)."""
  from launch.experiments.flow_matching import member_params  # pylint: disable=g-import-not-at-top

  rc, mesh, steps, solver = hp.run, ctx.mesh, hp.sampler.steps, hp.sampler.solver
  n_eval, size = len(data["test_y"]), data["test_x"].shape[1]
  b = mesh_lib.padded_size(n_eval, mesh)
  latent_shape = z_train.shape[1:]
  x0 = jax.random.normal(jax.random.fold_in(jax.random.key(config.seed), 999), (b,) + latent_shape)
  y = np.concatenate([data["test_y"], data["test_y"][: b - n_eval]]).astype(np.int32)
  sh = mesh_lib.data_sharding(mesh)
  x0, yd = jax.device_put(x0, sh), jax.device_put(jnp.asarray(y), sh)
  fns = {a: sampler_fn(hp.nets[a], hp.nets["large"], hp.flow, hp.sampler, mesh) for a in ("small", "coarse")}
  by_name = {g.name: g for g in groups}
  params = {}
  for g, s in zip(groups, states):
    for i, m in enumerate(g.members):
      params[m.name] = (g.arch, member_params(s, i))
  ref_small = params[by_name["small"].members[0].name][1]
  ref_large = params[by_name["large"].members[0].name][1]

  nfe = {}

  def draw(name):  # every model alone: large ones at t_split = 0, small / coarse ones at t_split = 1
    arch, p = params[name]
    if arch == "large":
      out, n = fns["small"](ref_small, p, x0, yd, 0.0)
    else:
      out, n = fns[arch](p, ref_large, x0, yd, 1.0)
    nfe[name] = sum(n)
    return np.asarray(mesh_lib.to_host(out))[:n_eval]

  samples = {name: _embed(hp, aux, draw(name), scale, size) for name in params}
  real = {"lat": (z_train * scale).reshape(len(z_train), -1), "feat": None}
  _, real["feat"] = fm.auxiliary.classify(aux.classifier, data["train_x"], cfg=hp.classifier)
  real["feat"] = np.asarray(real["feat"])
  z_test = fm.auxiliary.encode(aux.autoencoder, data["test_x"], cfg=hp.autoencoder, image_size=size)
  test_logits, test_feat = fm.auxiliary.classify(aux.classifier, data["test_x"], cfg=hp.classifier)
  accuracy = float(np.mean(np.argmax(np.asarray(test_logits), 1) == data["test_y"]))
  rec = fm.auxiliary.decode(aux.autoencoder, z_test, cfg=hp.autoencoder, image_size=size)

  def quality(s):
    return fm.metrics.quality(real["feat"], s["feat"], real["lat"], s["lat"], s["logits"])

  q = {"real_heldout": fm.metrics.quality(real["feat"], np.asarray(test_feat), real["lat"],
                                          np.asarray(z_test).reshape(n_eval, -1) * scale, np.asarray(test_logits))}
  for name, s in samples.items():
    q[name] = quality(s)

  def stab(a, b_):
    sa, sb = samples[a], samples[b_]
    return fm.metrics.stability(sa["feat"], sb["feat"], sa["lat"], sb["lat"], sa["img"], sb["img"], seed=config.seed)

  large = [m.name for m in by_name["large"].members]
  seeds = [m for m in large if "_random" not in m]
  pairs = {f"{a} vs {c}": (a, c) for i, a in enumerate(seeds) for c in seeds[i + 1:]}
  pairs.update({f"{seeds[0]} vs {m}": (seeds[0], m) for m in large if "_random" in m})
  smalls = [m.name for m in by_name["small"].members if m.name != "degraded"]
  pairs[f"{seeds[0]} vs {smalls[0]}"] = (seeds[0], smalls[0])
  if len(smalls) > 1:
    pairs[f"{smalls[0]} vs {smalls[1]}"] = (smalls[0], smalls[1])
  pairs[f"{seeds[0]} vs degraded"] = (seeds[0], "degraded")
  stability = {k: stab(*v) for k, v in pairs.items()}

  # Coarse-to-fine: the coarse model (trained on t < coarse_t_max) for t < t_split, large_s0 after; quality,
  # paired similarity to large_s0 alone, NFE, FLOP cost model, wall clock. small_s0 as the first stage: quality.
  large0, small0 = seeds[0], smalls[0]
  x_dummy = jnp.zeros((n_eval,) + latent_shape)
  pc = params["coarse"][1]
  flops = {a: forward_flops(hp.nets[a], hp.flow, p, x_dummy, jnp.asarray(data["test_y"]))
           for a, p in (("small", ref_small), ("large", ref_large), ("coarse", pc))}
  ps, pl = params[small0][1], params[large0][1]
  fn = fns["coarse"]
  c2f, base_time = [], _time_large(fn, pc, pl, x0, yd, rc.timing_repeats)
  for ts in sorted(set(rc.t_splits) | {hp.sampler.t_split, 0.0}):  # the config's t_split is always evaluated
    times = []
    for _ in range(rc.timing_repeats + 1):  # the first call may compile
      t0 = time.perf_counter()
      out, (n_small, n_large) = fn(pc, pl, x0, yd, ts)
      jax.block_until_ready(out)
      times.append(time.perf_counter() - t0)
    wall = min(times[1:])
    s = _embed(hp, aux, np.asarray(mesh_lib.to_host(out))[:n_eval], scale, size)
    samples[f"c2f_{ts:g}"] = s
    sa, sb = samples[large0], s
    via_small = _embed(hp, aux, np.asarray(mesh_lib.to_host(fns["small"](ps, pl, x0, yd, ts)[0]))[:n_eval], scale,
                       size)
    row = {"t_split": ts, "small_steps": fm.samplers.small_steps(ts, steps), **quality(s),
           "fid_small_first": quality(via_small)["fid"],
           "stability_to_large": fm.metrics.stability(sa["feat"], sb["feat"], sa["lat"], sb["lat"], sa["img"],
                                                      sb["img"], seed=config.seed),
           **fm.samplers.cost_model(ts, flops["coarse"], flops["large"], steps),
           "nfe_small": n_small, "nfe_large": n_large,
           "speedup_flops": nfe[large0] * flops["large"] / (n_small * flops["coarse"] + n_large * flops["large"]),
           "wall_s": wall}
    c2f.append(row)
  base_time = min([base_time] + [r["wall_s"] for r in c2f if r["t_split"] == 0])  # large alone, best timing
  for r in c2f:
    r["speedup_wall"] = base_time / r["wall_s"]
  choice = choose_t_split(c2f, q, real["feat"], samples[large0]["feat"], large0, seeds, rc)
  t0 = time.perf_counter()
  jax.block_until_ready(fm.auxiliary.decode(aux.autoencoder, jnp.asarray(x_dummy), cfg=hp.autoencoder,
                                            image_size=size))
  decode_s = time.perf_counter() - t0

  reduction = {}
  if "reduction" in by_name:
    for f in rc.reduction_fractions:
      for c in rc.reduction_criteria:
        names = [m.name for m in by_name["reduction"].members if m.fraction == f and m.criterion == c]
        per = {k: [q[nm][k] for nm in names] for k in ("fid", "kid", "precision", "recall", "sw_latent")}
        reduction[f"{c}@{f:g}"] = {"criterion": c, "fraction": f, "size": len(subsets[names[0]]),
                                   **{k: float(np.mean(v)) for k, v in per.items()},
                                   **{f"{k}_se": _se(v) for k, v in per.items()}, "fid_per_seed": per["fid"]}
  results = {
      "dataset": config.dataset, "n_train": int(len(z_train)), "n_eval": n_eval,
      "latent_shape": list(latent_shape), "latent_scale": scale, "classifier_accuracy": accuracy,
      "autoencoder_test_mse": float(np.mean(np.square(np.asarray(rec) - data["test_x"]))),
      "sampler": {"solver": solver, "steps": steps, "nfe_large": nfe[large0], "nfe": nfe},
      "flops_per_forward": flops,
      "params": {a: int(sum(x.size for x in jax.tree.leaves(p))) for a, p in (("small", ps), ("large", pl),
                                                                               ("coarse", pc))},
      "coarse_t_max": rc.coarse_t_max, "quality": q, "stability": stability, "coarse_to_fine": c2f,
      "c2f_choice": choice, "decode_s": decode_s,
      "reduction": reduction,
  }
  report.make_figures(results, samples, data, rc, ctx.writer, large0, small0)
  return results


def choose_t_split(c2f, q, real_feat, large_feat, large0, seeds, rc) -> dict:
  """The comparable-quality rule and the t_split it picks.

  Coarse-to-fine at ``t_split`` has quality comparable to the large model
  alone iff ``FID(c2f) <= FID(large) + k SE``, ``k = comparable_se``, where
  ``SE`` is the bootstrap standard error of the large model's FID (its
  generated set resampled ``bootstrap`` times; the real set fixed). The chosen
  split is the largest ``t_split <= coarse_t_max`` (the coarse model is
  trained up to there) with comparable quality. The FID gap between the large
  models of different training seeds is reported beside it.
  """
  boot = fm.metrics.fid_bootstrap(real_feat, large_feat, num=rc.bootstrap, seed=0)
  se = float(np.std(boot, ddof=1))
  fid = q[large0]["fid"]
  threshold = fid + rc.comparable_se * se
  for r in c2f:
    r["comparable"] = bool(r["fid"] <= threshold)
  ok = [r for r in c2f if r["comparable"] and r["t_split"] <= rc.coarse_t_max]
  best = max(ok, key=lambda r: r["t_split"])
  return {"rule": f"FID <= FID({large0}) + {rc.comparable_se:g} SE (bootstrap, {rc.bootstrap} resamples); "
                  f"largest t_split <= coarse_t_max = {rc.coarse_t_max:g}",
          "fid_large": fid, "fid_se": se, "threshold": threshold,
          "seed_gap": max(abs(q[s]["fid"] - fid) for s in seeds),
          "t_split": best["t_split"], "fid": best["fid"], "kid": best["kid"],
          "speedup_wall": best["speedup_wall"], "speedup_flops": best["speedup_flops"]}


def _time_large(fn, ps, pl, x0, y, repeats):
  times = []
  for _ in range(repeats + 1):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(ps, pl, x0, y, 0.0)[0])
    times.append(time.perf_counter() - t0)
  return min(times[1:])
