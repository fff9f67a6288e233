"""Sampling and evaluation of the ``flow_matching`` experiment (identical noise for every model).

Every model samples the same noise ``x0`` (one per held-out image; the labels
of class-conditional models are the held-out labels) with one jitted
coarse-to-fine sampler, sharded over the sample batch: a large model alone is
``t_split = 0``, a small one ``t_split = 1``. Samples are decoded by the
autoencoder and embedded by the classifier; quality is measured against the
training images, with the held-out images as the floor. Coarse-to-fine uses
the ``coarse`` model (trained on ``t < coarse_t_max``) for ``t < t_split`` and
``large_s0`` after, at every split of ``t_split_sweep`` (with
``sampler.t_split`` and 0); :func:`choose_t_split` states the comparable-quality
rule and picks the reported split (``c2f_choice.t_split``).
"""

from __future__ import annotations

import functools
import math
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from launch import mesh as mesh_lib
from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import report
from launch.experiments.flow_matching import training
from methods import flow_matching as fm


def _two_stage_program(small_apply, large_apply, steps: int, solver: str):
  """The launch-side coarse-to-fine program of the fixed-step solvers.

  ``(small_params, large_params, x0 [B, ...], y [B], n_small) -> x1``: the
  small model takes grid steps ``0 .. n_small - 1`` (``n_small`` traced, so one
  compilation serves every split), the large one the rest of the
  ``steps``-step uniform grid.
  """

  def fn(ps, pl, x0, y, n_small):
    x = fm.samplers.integrate(lambda x, t: small_apply(ps, x, t, y), x0, start=0, stop=n_small,
                              num_steps=steps, solver=solver)
    return fm.samplers.integrate(lambda x, t: large_apply(pl, x, t, y), x, start=n_small, stop=steps,
                                 num_steps=steps, solver=solver)

  return fn


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
    jfn = jax.jit(_two_stage_program(small_apply, large_apply, steps, solver), in_shardings=(rep, rep, sh, sh, rep),
                  out_shardings=sh)

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


class Models(NamedTuple):
  """Every trained model and what each samples from: the same noise and labels."""

  params: dict  # member name -> (arch, EMA params)
  fns: dict  # "small" | "coarse" -> sampler_fn of that architecture first, the large one after
  x0: jax.Array  # [B, *latent] noise, B = held-out images padded to the mesh, sharded
  y: jax.Array  # [B] labels (the held-out ones), sharded
  test_y: np.ndarray  # [n_eval] held-out labels
  n_eval: int  # held-out images (samples kept per model)
  size: int  # image side


def _models(config, hp: fm_config.Hp, groups, states, data, latent_shape, mesh) -> Models:
  """The noise ``x0 ~ N(0, I)`` from ``fold_in(key(seed), 999)``, the samplers and every member's weights."""
  n_eval, size = len(data["test_y"]), data["test_x"].shape[1]
  b = mesh_lib.padded_size(n_eval, mesh)
  x0 = jax.random.normal(jax.random.fold_in(jax.random.key(config.seed), 999), (b,) + tuple(latent_shape))
  y = np.concatenate([data["test_y"], data["test_y"][: b - n_eval]]).astype(np.int32)
  sh = mesh_lib.data_sharding(mesh)
  x0, yd = jax.device_put(x0, sh), jax.device_put(jnp.asarray(y), sh)
  fns = {a: sampler_fn(hp.net(a), hp.large, hp.flow, hp.sampler, mesh) for a in ("small", "coarse")}
  params = {}
  for g, s in zip(groups, states):
    for i, m in enumerate(g.members):
      params[m.name] = (g.arch, training.member_params(s, i))
  return Models(params, fns, x0, yd, data["test_y"], n_eval, size)


def _sample_alone(hp: fm_config.Hp, aux, models: Models, ref_small, ref_large, scale) -> tuple[dict, dict]:
  """``(samples, nfe)`` of every model alone: large ones at ``t_split = 0``, small / coarse ones at 1."""
  nfe = {}

  def draw(name):
    arch, p = models.params[name]
    if arch == "large":
      out, n = models.fns["small"](ref_small, p, models.x0, models.y, 0.0)
    else:
      out, n = models.fns[arch](p, ref_large, models.x0, models.y, 1.0)
    nfe[name] = sum(n)
    return np.asarray(mesh_lib.to_host(out))[:models.n_eval]

  samples = {name: _embed(hp, aux, draw(name), scale, models.size) for name in models.params}
  return samples, nfe


def _quality(real, s) -> dict:
  return fm.metrics.quality(real["feat"], s["feat"], real["lat"], s["lat"], s["logits"])


def _real(hp: fm_config.Hp, aux, data, z_train, scale) -> tuple[dict, dict, dict]:
  """The training set's features and latents, the held-out set's quality and the auxiliary networks' scores."""
  size = data["test_x"].shape[1]
  real = {"lat": (z_train * scale).reshape(len(z_train), -1), "feat": None}
  _, real["feat"] = fm.auxiliary.classify(aux.classifier, data["train_x"], cfg=hp.classifier)
  real["feat"] = np.asarray(real["feat"])
  z_test = fm.auxiliary.encode(aux.autoencoder, data["test_x"], cfg=hp.autoencoder, image_size=size)
  test_logits, test_feat = fm.auxiliary.classify(aux.classifier, data["test_x"], cfg=hp.classifier)
  accuracy = float(np.mean(np.argmax(np.asarray(test_logits), 1) == data["test_y"]))
  rec = fm.auxiliary.decode(aux.autoencoder, z_test, cfg=hp.autoencoder, image_size=size)
  heldout = fm.metrics.quality(real["feat"], np.asarray(test_feat), real["lat"],
                               np.asarray(z_test).reshape(len(data["test_y"]), -1) * scale, np.asarray(test_logits))
  scores = {"classifier_accuracy": accuracy,
            "autoencoder_test_mse": float(np.mean(np.square(np.asarray(rec) - data["test_x"])))}
  return real, heldout, scores


def _stability(config, by_name, samples) -> tuple[dict, list, list]:
  """Paired stability of the model pairs; returns it, the large models' seed names and the small models'."""
  large = [m.name for m in by_name["large"].members]
  seeds = [m for m in large if "_random" not in m]
  pairs = {f"{a} vs {c}": (a, c) for i, a in enumerate(seeds) for c in seeds[i + 1:]}
  pairs.update({f"{seeds[0]} vs {m}": (seeds[0], m) for m in large if "_random" in m})
  smalls = [m.name for m in by_name["small"].members if m.name != "degraded"]
  pairs[f"{seeds[0]} vs {smalls[0]}"] = (seeds[0], smalls[0])
  if len(smalls) > 1:
    pairs[f"{smalls[0]} vs {smalls[1]}"] = (smalls[0], smalls[1])
  pairs[f"{seeds[0]} vs degraded"] = (seeds[0], "degraded")
  return {k: _paired(samples[a], samples[b], config.seed) for k, (a, b) in pairs.items()}, seeds, smalls


def _paired(sa, sb, seed) -> dict:
  return fm.metrics.stability(sa["feat"], sb["feat"], sa["lat"], sb["lat"], sa["img"], sb["img"], seed=seed)


def _timed(fn, args, repeats):
  """``(output, seconds)``: the best of ``repeats`` timed calls after one that may compile."""
  times = []
  for _ in range(repeats + 1):
    t0 = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out[0])
    times.append(time.perf_counter() - t0)
  return out, min(times[1:])


def _coarse_to_fine(config, hp: fm_config.Hp, aux, models: Models, samples, nfe, real, large0, small0, scale):
  """One row per evaluated split: quality, stability to ``large0``, NFE, FLOP cost model, wall clock.

  The coarse model (trained on ``t < coarse_t_max``) samples ``t < t_split``,
  ``large0`` the rest; ``small_s0`` as the first stage instead gives
  ``fid_small_first``. Adds each split's samples to ``samples``; returns the
  rows and the FLOPs of one forward of each architecture.
  """
  rc, steps = hp.run, hp.sampler.steps
  ref_small, ref_large = (models.params[n][1] for n in (small0, large0))
  pc, fn = models.params["coarse"][1], models.fns["coarse"]
  x_dummy = jnp.zeros((models.n_eval,) + models.x0.shape[1:])
  flops = {a: forward_flops(hp.net(a), hp.flow, p, x_dummy, jnp.asarray(models.test_y))
           for a, p in (("small", ref_small), ("large", ref_large), ("coarse", pc))}
  c2f, (_, base_time) = [], _timed(fn, (pc, ref_large, models.x0, models.y, 0.0), rc.timing_repeats)
  for ts in sorted(set(rc.t_split_sweep) | {hp.sampler.t_split, 0.0}):  # the config's t_split is always evaluated
    (out, (n_small, n_large)), wall = _timed(fn, (pc, ref_large, models.x0, models.y, ts), rc.timing_repeats)
    s = _embed(hp, aux, np.asarray(mesh_lib.to_host(out))[:models.n_eval], scale, models.size)
    samples[f"c2f_{ts:g}"] = s
    first = models.fns["small"](ref_small, ref_large, models.x0, models.y, ts)[0]
    via_small = _embed(hp, aux, np.asarray(mesh_lib.to_host(first))[:models.n_eval], scale, models.size)
    c2f.append({"t_split": ts, "small_steps": fm.samplers.small_steps(ts, steps), **_quality(real, s),
                "fid_small_first": _quality(real, via_small)["fid"],
                "stability_to_large": _paired(samples[large0], s, config.seed),
                **fm.samplers.cost_model(ts, flops["coarse"], flops["large"], steps),
                "nfe_small": n_small, "nfe_large": n_large,
                "speedup_flops": nfe[large0] * flops["large"] / (n_small * flops["coarse"] + n_large * flops["large"]),
                "wall_s": wall})
  base_time = min([base_time] + [r["wall_s"] for r in c2f if r["t_split"] == 0])  # large alone, best timing
  for r in c2f:
    r["speedup_wall"] = base_time / r["wall_s"]
  return c2f, flops


def _reduction(rc: fm_config.Run, by_name, q, subsets) -> dict:
  """Mean and SE over seeds of each (criterion, fraction) of the data-reduction models."""
  reduction = {}
  if "reduction" not in by_name:
    return reduction
  for f in rc.reduction_fractions:
    for c in rc.reduction_criteria:
      names = [m.name for m in by_name["reduction"].members if m.fraction == f and m.criterion == c]
      per = {k: [q[nm][k] for nm in names] for k in ("fid", "kid", "precision", "recall", "sw_latent")}
      reduction[f"{c}@{f:g}"] = {"criterion": c, "fraction": f, "size": len(subsets[names[0]]),
                                 **{k: float(np.mean(v)) for k, v in per.items()},
                                 **{f"{k}_se": _se(v) for k, v in per.items()}, "fid_per_seed": per["fid"]}
  return reduction


def evaluate(config, hp: fm_config.Hp, groups, states, aux, data, z_train, scale, subsets, ctx) -> dict:
  """Samples every model, computes every table; returns the results dict (figures written)."""
  rc, latent_shape = hp.run, z_train.shape[1:]
  models = _models(config, hp, groups, states, data, latent_shape, ctx.mesh)
  by_name = {g.name: g for g in groups}
  ref_small = models.params[by_name["small"].members[0].name][1]
  ref_large = models.params[by_name["large"].members[0].name][1]
  samples, nfe = _sample_alone(hp, aux, models, ref_small, ref_large, scale)
  real, heldout, aux_scores = _real(hp, aux, data, z_train, scale)
  q = {"real_heldout": heldout, **{name: _quality(real, s) for name, s in samples.items()}}
  stability, seeds, smalls = _stability(config, by_name, samples)
  large0, small0 = seeds[0], smalls[0]
  c2f, flops = _coarse_to_fine(config, hp, aux, models, samples, nfe, real, large0, small0, scale)
  choice = choose_t_split(c2f, q, real["feat"], samples[large0]["feat"], large0, seeds, rc)
  t0 = time.perf_counter()
  x_dummy = jnp.zeros((models.n_eval,) + tuple(latent_shape))
  jax.block_until_ready(fm.auxiliary.decode(aux.autoencoder, x_dummy, cfg=hp.autoencoder, image_size=models.size))
  decode_s = time.perf_counter() - t0
  sizes = {a: int(sum(x.size for x in jax.tree.leaves(models.params[n][1])))
           for a, n in (("small", small0), ("large", large0), ("coarse", "coarse"))}
  results = {
      "dataset": config.dataset, "n_train": int(len(z_train)), "n_eval": models.n_eval,
      "latent_shape": list(latent_shape), "latent_scale": scale, **aux_scores,
      "sampler": {"solver": hp.sampler.solver, "steps": hp.sampler.steps, "nfe_large": nfe[large0], "nfe": nfe},
      "flops_per_forward": flops, "params": sizes,
      "coarse_t_max": rc.coarse_t_max, "quality": q, "stability": stability, "coarse_to_fine": c2f,
      "c2f_choice": choice, "decode_s": decode_s,
      "reduction": _reduction(rc, by_name, q, subsets),
  }
  report.make_figures(results, samples, data, rc, ctx.writer, large0, small0)
  return results


def choose_t_split(c2f, q, real_feat, large_feat, large0, seeds, rc) -> dict:
  """The comparable-quality rule and the t_split it picks.

  Coarse-to-fine at ``t_split`` has quality comparable to the large model
  alone iff ``FID(c2f) <= FID(large) + k SE``, ``k = comparable_se``, where
  ``SE`` is the bootstrap standard error of the large model's FID (its
  generated set resampled ``bootstrap`` times; the real set fixed). The chosen
  split (``t_split`` of the returned dict, ``c2f_choice.t_split`` in the
  results) is the largest evaluated split ``<= coarse_t_max`` (the coarse model
  is trained up to there) with comparable quality. The FID gap between the
  large models of different training seeds is reported beside it.
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

