"""Flow-matching benchmarks: coarse-to-fine sampling speedup, and training throughput against PyTorch.

Rows (the ``cpu`` preset's architectures: latents 4x4x2, DiTs on 2x2 patches):

1. coarse-to-fine sampling (the ``coarse`` DiT for ``t < sampler.t_split`` =
   0.7, the large one after, 60 Euler steps) against the large model alone at
   the same 60 steps, samples per second, one jitted call each, sharded over
   the sample batch (ratio = the wall-clock speedup; goal >= 2x at comparable
   quality). ``sampler.t_split`` is the split the experiment's rule picks in
   the ``cpu`` run: the largest ``t_split <= coarse_t_max`` whose FID is within
   ``comparable_se`` = 2 bootstrap standard errors of the large model's (the
   coarse model is trained on ``t < coarse_t_max`` only); the quality numbers
   are in the README's ``flow_matching_cpu`` table; the notes give the FLOP
   cost model's speedup.
2. training steps per second of the large velocity network (one jitted
   ``lax.scan`` of Adam steps, EMA included) against the same DiT and step in
   PyTorch on the CPU (best of one thread and all cores).
"""

from __future__ import annotations

import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from launch import mesh as mesh_lib
from launch.bench import flow_matching_torch
from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import evaluation as fm_evaluation
from methods import flow_matching as fm

LATENT = (4, 4, 2)


def _best(fn, args, calls):
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(calls):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t0)
  return best


def _params(net, flow, seed):
  state = fm.core.init(jax.random.key(seed), LATENT, net=net, flow=flow)
  leaves, tree = jax.tree.flatten(state.params)  # trained-like (non-zero) output layers
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  return jax.tree.unflatten(tree, [x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


def run(quick: bool) -> list[dict]:
  config = fm_config.get_config("cpu")
  small, large = (fm.NetConfig(**config[a].to_dict()) for a in ("coarse", "large"))
  flow = fm.FlowConfig(**config.flow.to_dict())
  sampler = fm.SamplerConfig(**config.sampler.to_dict())
  steps, t_split = config.sampler.steps, config.sampler.t_split
  mesh = mesh_lib.make_mesh()
  batch = mesh_lib.padded_size(256 if quick else 1024, mesh)
  fn = fm_evaluation.sampler_fn(small, large, flow, sampler, mesh)
  ps, pl = _params(small, flow, 0), _params(large, flow, 1)
  sh = mesh_lib.data_sharding(mesh)
  x0 = jax.device_put(jax.random.normal(jax.random.key(2), (batch,) + LATENT), sh)
  y = jax.device_put(jnp.zeros(batch, jnp.int32), sh)
  calls = 2 if quick else 5
  t_large = _best(lambda *a: fn(*a)[0], (ps, pl, x0, y, 0.0), calls)
  t_c2f = _best(lambda *a: fn(*a)[0], (ps, pl, x0, y, t_split), calls)
  flops = {n: fm_evaluation.forward_flops(c, flow, p, jnp.zeros((batch,) + LATENT), None)
           for n, c, p in (("small", small, ps), ("large", large, pl))}
  model = fm.samplers.cost_model(t_split, flops["small"], flops["large"], steps)
  rows = [{
      "benchmark": f"coarse-to-fine sampling (t_split {t_split}, {steps} {sampler.solver} steps, {batch} samples) "
                   "vs large alone",
      "ours": batch / t_c2f, "peer": batch / t_large, "unit": "samples/s", "peer_name": "large DiT alone (this project)",
      "ratio": t_large / t_c2f,
      "notes": f"{mesh_lib.describe_devices()}; FLOP cost model {model['speedup_grid']:.2f}x; coarse "
               f"w{small.width}/d{small.depth} trained on t < {config.coarse_t_max:g}, large "
               f"w{large.width}/d{large.depth}; t_split = the largest with FID within {config.comparable_se:g} "
               "bootstrap SE of the large model's (README flow_matching_cpu)",
  }]

  chunk = 50 if quick else 300
  data = jnp.asarray(np.random.default_rng(0).standard_normal((2048,) + LATENT), jnp.float32)
  labels = jnp.zeros(2048, jnp.int32)
  state = fm.core.init(jax.random.key(0), LATENT, net=large, flow=flow)
  train = jax.jit(functools.partial(fm.core.train_chunk, num_steps=chunk, net=large, flow=flow))
  t_train = _best(lambda s: train(s, data, labels, jnp.int32(2048), jax.random.key(1)), (state,), 2)
  ours = chunk / t_train
  kw = dict(width=large.width, depth=large.depth, heads=large.heads, patch=large.patch, mlp_ratio=large.mlp_ratio,
            batch_size=flow.batch_size, steps=20 if quick else 150)
  rates = {t: flow_matching_torch.steps_per_second(LATENT, threads=t, **kw) for t in sorted({1, os.cpu_count() or 1})}
  threads = max(rates, key=rates.get)
  rows.append({
      "benchmark": f"flow-matching training step, DiT w{large.width}/d{large.depth}, batch {flow.batch_size}",
      "ours": ours, "peer": rates[threads], "unit": "steps/s", "peer_name": "PyTorch CPU eager loop",
      "ratio": ours / rates[threads],
      "notes": f"lax.scan of {chunk} steps, compile excluded; torch: best of threads {sorted(rates)} ({threads})",
  })
  return rows
