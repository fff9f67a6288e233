"""IQL update throughput: this project's jitted update against PyTorch.

The peer runs where this project runs: on the CPU (best of one thread and all
cores), or on the same GPU when JAX's backend is a GPU and PyTorch sees CUDA.

Rows (same networks -- 256x256 ReLU MLPs for the twin Q, V and actor --, the
same batch size 256 and the same dataset shapes, HalfCheetah-sized: 17-dim
observations, 6-dim actions):

1. one seed: ``methods.reg.train_chunk`` (``lax.scan`` over 500 updates per
   jitted call, minibatches sampled on the device) against the PyTorch peer's
   eager update loop (``launch/bench/reg_torch.py``), updates per second;
2. the same, one update per jitted call (dispatch overhead included);
3. six seeds vmapped in one call (seed-updates per second) against the PyTorch
   loop (which runs seeds one after another, so its rate is row 1's).

Compilation is excluded from the JAX rates and reported in the notes.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from launch import mesh as mesh_lib
from launch.bench import timing
from launch.bench import reg_torch
from methods import reg

OBS, ACT = 17, 6


def _data(n: int) -> dict:
  rng = np.random.default_rng(0)
  return {
      "observations": rng.standard_normal((n, OBS)).astype(np.float32),
      "actions": rng.uniform(-0.99, 0.99, (n, ACT)).astype(np.float32),
      "rewards": rng.standard_normal(n).astype(np.float32),
      "next_observations": rng.standard_normal((n, OBS)).astype(np.float32),
      "terminals": (rng.uniform(size=n) < 0.01).astype(np.float32),
  }


def run(quick: bool) -> list[dict]:
  hidden = (256, 256)
  chunk = 100 if quick else 500
  torch_updates = 50 if quick else 500
  seeds = 6
  data = _data(100_000)
  batch = reg.Batch(*(jnp.asarray(data[k]) for k in ("observations", "actions", "rewards", "next_observations",
                                                     "terminals")))
  hp = reg.Hparams(hidden=hidden, batch_size=256)
  state = reg.init(jax.random.key(0), OBS, ACT, hp=hp)
  if jax.default_backend() == "gpu" and reg_torch.cuda_available():
    # Like for like on a GPU machine: the peer runs on the same GPU.
    torch_rate = reg_torch.updates_per_second(data, torch_updates, hidden, 256, device="cuda")
    peer_name, peer_note = "PyTorch CUDA eager loop", "torch on the same GPU"
  else:
    # The peer's best of one thread and all cores (oversubscribed threads are slower on a busy machine).
    rates = {t: reg_torch.updates_per_second(data, torch_updates, hidden, 256, threads=t)
             for t in sorted({1, os.cpu_count() or 1})}
    threads = max(rates, key=rates.get)
    torch_rate = rates[threads]
    peer_name, peer_note = "PyTorch CPU eager loop", f"torch: best of threads {sorted(rates)} ({threads})"
    print(f"PyTorch IQL: {rates} updates/s by thread count", flush=True)
  rows = []

  scan = jax.jit(functools.partial(reg.train_chunk, num_updates=chunk, hp=hp))
  t = timing.timed(scan, state, batch, repeats=3)
  ours = chunk / t.warm
  rows.append({
      "benchmark": f"IQL update, 256x256, batch 256, 1 seed, lax.scan of {chunk}",
      "ours": ours, "peer": torch_rate, "unit": "updates/s", "peer_name": peer_name,
      "ratio": ours / torch_rate,
      "notes": f"{mesh_lib.describe_devices()}; compile {t.compile_seconds:.1f}s excluded; {peer_note}",
  })

  single = jax.jit(functools.partial(reg.update, hp=hp))
  b = reg.sample_batch(batch, jax.random.key(1), 256)

  def loop(s):
    for _ in range(20):
      s, _ = single(s, b)
    return s

  ours1 = 20 / timing.timed(loop, state, repeats=3).warm
  rows.append({
      "benchmark": "IQL update, 256x256, batch 256, 1 seed, one update per jitted call",
      "ours": ours1, "peer": torch_rate, "unit": "updates/s", "peer_name": peer_name,
      "ratio": ours1 / torch_rate, "notes": "fixed batch (no sampling); dispatch per update",
  })

  states = jax.vmap(functools.partial(reg.init, obs_dim=OBS, action_dim=ACT, hp=hp))(
      jax.random.split(jax.random.key(0), seeds))
  vscan = jax.jit(jax.vmap(functools.partial(reg.train_chunk, num_updates=chunk // 5, hp=hp), in_axes=(0, None)))
  tv = timing.timed(vscan, states, batch, repeats=2)
  oursv = seeds * (chunk // 5) / tv.warm
  rows.append({
      "benchmark": f"IQL update, 256x256, batch 256, {seeds} seeds vmapped",
      "ours": oursv, "peer": torch_rate, "unit": "seed-updates/s", "peer_name": f"{peer_name}, seeds in turn",
      "ratio": oursv / torch_rate, "notes": f"compile {tv.compile_seconds:.1f}s excluded",
  })
  return rows
