"""Flow-matching benchmarks: coarse-to-fine sampling speedup, and training throughput against PyTorch.

Rows (the latent preset of :data:`launch.bench.flow_matching_sizes.CPU`:
latents 7x7x4 of 28x28 images, DiTs on 1x1 patches, 49 tokens):

1. coarse-to-fine sampling (the small DiT for ``t < t_split``, the large one
   after, Euler steps of the preset) against the large model alone on the same
   grid, samples per second, one per ``t_split`` in :data:`T_SPLITS`. Both come
   from one jitted :func:`methods.flow_matching.samplers.coarse_to_fine` whose
   ``t_split`` is traced (the large model alone is ``t_split = 0``), sharded
   over the sample batch; each time is the best of several calls, the splits
   interleaved so that they share the machine's load. The ratio
   is the wall-clock speedup; the notes give the FLOP cost model's speedup
   (:func:`methods.flow_matching.costs.coarse_to_fine_cost`, analytic FLOPs of
   both networks) and the CPU-time speedup. Which ``t_split`` keeps
   comparable quality is the experiment's result (chosen on validation
   noises), not this benchmark's.
2. training steps per second of the large velocity network (one jitted
   ``lax.scan`` of Adam steps, EMA included) against the same DiT and step in
   PyTorch on the CPU (best of one thread and all cores).
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from launch import mesh as mesh_lib
from launch.bench import flow_matching_sizes
from launch.bench import flow_matching_torch
from launch.bench import timing
from methods import flow_matching as fm

T_SPLITS = (0.4, 0.6, 0.8)
PRESET = flow_matching_sizes.CPU
LATENT = fm.autoencoder.latent_shape(flow_matching_sizes.IMAGE, PRESET.ae)


def _sampling_rows(quick: bool) -> list[dict]:
  small, large, steps = PRESET.small, PRESET.large, PRESET.sampler_steps
  flow = fm.FlowConfig()
  _, small_apply = fm.core.make_velocity(small, flow)
  _, large_apply = fm.core.make_velocity(large, flow)
  mesh = mesh_lib.make_mesh()
  sh, rep = mesh_lib.data_sharding(mesh), mesh_lib.replicated(mesh)

  def sample(ps, pl, x0, t_split):
    return fm.samplers.coarse_to_fine(lambda x, t: small_apply(ps, x, t), lambda x, t: large_apply(pl, x, t), x0,
                                      t_split=t_split, num_steps=steps)

  fn = jax.jit(sample, in_shardings=(rep, rep, sh, rep), out_shardings=sh)
  batch = mesh_lib.padded_size(256 if quick else PRESET.num_samples, mesh)
  ps, pl = (flow_matching_sizes.trained_like(net, flow, LATENT, seed) for net, seed in ((small, 0), (large, 1)))
  x0 = jax.device_put(jax.random.normal(jax.random.key(2), (batch,) + LATENT), sh)
  calls = 2 if quick else 5
  splits = (0.0,) + T_SPLITS
  # One compilation serves every split; the splits are timed in alternating rounds, so they share the machine's load.
  timed = timing.timed_together([(fn, (ps, pl, x0, jnp.float32(t))) for t in splits], repeats=calls)
  by_split = dict(zip(splits, timed))
  large_alone = by_split[0.0]
  fs, fl = fm.costs.dit_flops(small, LATENT), fm.costs.dit_flops(large, LATENT)
  rows = []
  for t_split in T_SPLITS:
    ours = by_split[t_split]
    model = fm.costs.coarse_to_fine_cost(t_split, num_steps=steps, solver="euler", small_flops=fs, large_flops=fl)
    rows.append({
        "benchmark": f"coarse-to-fine sampling (t_split {t_split:g}, {steps} euler steps, {batch} samples) "
                     "vs large alone",
        "ours": batch / ours.warm, "peer": batch / large_alone.warm, "unit": "samples/s",
        "peer_name": "large DiT alone (this project)", "ratio": large_alone.warm / ours.warm,
        "notes": f"{mesh_lib.describe_devices()}; best of {timed[0].calls} interleaved calls; FLOP cost model "
                 f"{model.speedup:.2f}x (small w{small.width}/d{small.depth} {fs / 1e6:.2f} MFLOP, "
                 f"large w{large.width}/d{large.depth} {fl / 1e6:.2f} MFLOP per forward); "
                 f"CPU-time speedup {large_alone.cpu / ours.cpu:.2f}x",
    })
  return rows


def run(quick: bool) -> list[dict]:
  rows = _sampling_rows(quick)
  large = PRESET.large
  flow = fm.FlowConfig(batch_size=PRESET.flow_batch, learning_rate=PRESET.flow_lr)
  chunk = 50 if quick else 300
  data = jnp.asarray(np.random.default_rng(0).standard_normal((2048,) + LATENT), jnp.float32)
  labels = jnp.zeros(2048, jnp.int32)
  state = fm.core.init(jax.random.key(0), LATENT, net=large, flow=flow)
  train = jax.jit(functools.partial(fm.core.train_chunk, num_steps=chunk, net=large, flow=flow))
  ours = chunk / timing.timed(train, state, data, labels, jnp.int32(2048), jax.random.key(1), repeats=2).warm
  kw = dict(width=large.width, depth=large.depth, heads=large.heads, patch=large.patch, mlp_ratio=large.mlp_ratio,
            batch_size=flow.batch_size, steps=20 if quick else 150)
  rates = {t: flow_matching_torch.steps_per_second(LATENT, threads=t, **kw) for t in sorted({1, os.cpu_count() or 1})}
  threads = max(rates, key=rates.get)
  rows.append({
      "benchmark": f"flow-matching training step, DiT w{large.width}/d{large.depth} on {LATENT} latents, "
                   f"batch {flow.batch_size}",
      "ours": ours, "peer": rates[threads], "unit": "steps/s", "peer_name": "PyTorch CPU eager loop",
      "ratio": ours / rates[threads],
      "notes": f"lax.scan of {chunk} steps, compile excluded; torch: best of threads {sorted(rates)} ({threads})",
  })
  return rows
