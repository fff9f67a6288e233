"""Sampling and evaluation of the ``flow_matching`` experiment (identical noise for every model).

Every model samples the same noise ``x0`` (one per held-out image; the labels
of class-conditional models are the held-out labels) with one jitted
coarse-to-fine sampler, sharded over the sample batch: a large model alone is
``t_split = 0``, a small one ``t_split = 1``. Samples are decoded by the
autoencoder and embedded by the classifier; quality is measured against the
training images, with the held-out images as the floor.
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
def sampler_fn(small: fm.NetConfig, large: fm.NetConfig, flow: fm.FlowConfig, solver: str, steps: int, mesh):
  """Jitted ``(small_params, large_params, x0 [B, ...], y [B], n_small []) -> x1``, ``B`` sharded."""
  _, small_apply = fm.core.make_velocity(small, flow)
  _, large_apply = fm.core.make_velocity(large, flow)

  def fn(ps, pl, x0, y, n_small):
    x = fm.samplers.integrate(lambda x, t: small_apply(ps, x, t, y), x0, start=0, stop=n_small,
                              num_steps=steps, solver=solver)
    return fm.samplers.integrate(lambda x, t: large_apply(pl, x, t, y), x, start=n_small, stop=steps,
                                 num_steps=steps, solver=solver)

  sh, rep = mesh_lib.data_sharding(mesh), mesh_lib.replicated(mesh)
  return jax.jit(fn, in_shardings=(rep, rep, sh, sh, rep), out_shardings=sh)


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
  fn = sampler_fn(hp.nets["small"], hp.nets["large"], hp.flow, solver, steps, mesh)
  by_name = {g.name: g for g in groups}
  params = {}
  for g, s in zip(groups, states):
    for i, m in enumerate(g.members):
      params[m.name] = (g.arch, member_params(s, i))
  ref_small = params[by_name["small"].members[0].name][1]
  ref_large = params[by_name["large"].members[0].name][1]

  def draw(name, n_small=None):
    arch, p = params[name]
    if n_small is None:
      n_small = steps if arch == "small" else 0
    ps, pl = (p, ref_large) if arch == "small" else (ref_small, p)
    return np.asarray(mesh_lib.to_host(fn(ps, pl, x0, yd, jnp.int32(n_small))))[:n_eval]

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

  # Coarse-to-fine: quality and paired similarity to the large model alone, cost model, wall clock.
  large0, small0 = seeds[0], smalls[0]
  x_dummy = jnp.zeros((n_eval,) + latent_shape)
  flops = {"small": forward_flops(hp.nets["small"], hp.flow, ref_small, x_dummy, jnp.asarray(data["test_y"])),
           "large": forward_flops(hp.nets["large"], hp.flow, ref_large, x_dummy, jnp.asarray(data["test_y"]))}
  ps, pl = params[small0][1], params[large0][1]
  c2f, base_time = [], _time_large(fn, ps, pl, x0, yd, rc.timing_repeats)
  for ts in sorted(set(rc.t_splits) | {hp.sampler.t_split}):  # the config's t_split is always evaluated
    k = fm.samplers.small_steps(ts, steps)
    times = []
    for _ in range(rc.timing_repeats + 1):  # the first call may compile
      t0 = time.perf_counter()
      out = jax.block_until_ready(fn(ps, pl, x0, yd, jnp.int32(k)))
      times.append(time.perf_counter() - t0)
    wall = min(times[1:])
    s = _embed(hp, aux, np.asarray(mesh_lib.to_host(out))[:n_eval], scale, size)
    samples[f"c2f_{ts:g}"] = s
    sa, sb = samples[large0], s
    row = {"t_split": ts, "small_steps": k, **quality(s),
           "stability_to_large": fm.metrics.stability(sa["feat"], sb["feat"], sa["lat"], sb["lat"], sa["img"],
                                                      sb["img"], seed=config.seed),
           **fm.samplers.cost_model(ts, flops["small"], flops["large"], steps),
           "wall_s": wall}
    c2f.append(row)
  base_time = min([base_time] + [r["wall_s"] for r in c2f if r["small_steps"] == 0])  # large alone, best timing
  for r in c2f:
    r["speedup_wall"] = base_time / r["wall_s"]
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
      "sampler": {"solver": solver, "steps": steps}, "flops_per_forward": flops,
      "params": {a: int(sum(x.size for x in jax.tree.leaves(p))) for a, p in (("small", ps), ("large", pl))},
      "quality": q, "stability": stability, "coarse_to_fine": c2f, "decode_s": decode_s,
      "reduction": reduction,
  }
  report.make_figures(results, samples, data, rc, ctx.writer, large0, small0)
  return results


def _time_large(fn, ps, pl, x0, y, repeats):
  times = []
  for _ in range(repeats + 1):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(ps, pl, x0, y, jnp.int32(0)))
    times.append(time.perf_counter() - t0)
  return min(times[1:])
