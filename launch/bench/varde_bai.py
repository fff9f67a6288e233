"""VarDE BAI: the jitted, vmapped, sharded sweep against a NumPy per-pull loop.

Rows:
1. VarDE (tau = 0.1) alone on E1 (T = 150): this project's sweep over the
   seeds against the NumPy loop of ``launch.bench.varde_numpy`` (one seed, one
   pull at a time, single-threaded BLAS) -- the same algorithm, seeds per
   second.
2. The whole E1 sweep (every algorithm of the ``cpu`` config) against the same
   NumPy loop, in algorithm-runs per second (one run = one algorithm on one
   seed for the whole budget).
3. VarDE alone again, against the NumPy implementation a skilled user writes:
   ``launch.bench.varde_numpy.varde_vectorised``, all seeds advancing one pull
   at a time as arrays, on as many seeds as the JAX side (same problem, same
   budget). Its notes say where the sweep's time goes: the same sweep with
   its reward draws taken out, with every seed pulling the same arm at each
   step, and with both (:func:`_ablations`), each against the same peer.
4. VarDE alone against the same algorithm fused by hand as arrays in JAX
   (``launch.bench.varde_arrays``: the NumPy peer of row 3 in ``jax.numpy``,
   one ``lax.scan``, sharded the same way): whether the sweep's speed against
   NumPy is set by its per-seed, ``vmap``-ed design or by XLA on the machine.
   Its notes give the floor under both kernels: the same scan doing nothing
   but draw the rewards, with the hand-fused kernel's draws, with the
   sweep's common random numbers, and with a 32-bit integer hash inverted by
   ``ndtri`` (what a cheaper counter-based generator than threefry would
   leave), against the NumPy peer; and the rate of the whole hand-fused
   kernel drawing from that hash (what the rest of each pull leaves once
   the draws are cheap).

The JAX side uses every CPU core as a device (the seed axis is sharded over
them); its compile time is reported separately and excluded from the rate.
Rows 3 and 4 and the draws are timed in alternating rounds with the sweep
(``timing.timed_together``), each side's best warm call.
Error rates of both sides are printed to show they agree within noise.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from envs import bandits
from launch import mesh as mesh_lib
from launch.bench import timing
from launch.bench import varde_arrays
from launch.bench import varde_numpy
from launch.configs import varde_bai as varde_config
from launch.experiments.varde import bai as varde_bai

ABLATIONS = ("no draws", "one arm", "neither")


def _timed_sweep(config, mesh, budget, means, peers=()):
  """``(names, error rates, the sweep's timing.Timed, each peer's)``, the sweep timed in rounds with ``peers``."""
  names, _, fn = varde_bai.make_chunk_fn(config, mesh, budget, means)
  ids = varde_bai.chunk_seed_ids(config, mesh, 0)
  ours, *others = timing.timed_together([(fn, (ids,)), *peers])
  errors = np.asarray(mesh_lib.to_host(ours.output).errors) / config.num_seeds
  return names, errors, ours, others


def _ablations(config, mesh, budget: int, means: np.ndarray) -> list:
  """The VarDE-only sweep with parts of each pull taken out (:data:`ABLATIONS`), as ``(fn, (seed ids,))`` calls.

  ``no draws``: each reward is a fixed function of the arm and its pull
  count, in place of three threefry hashes and an inverse error function;
  ``one arm``: every seed pulls arm ``t mod K`` at step ``t``, the same arm
  for all seeds, so the argmax over arms and the reads and writes at a
  per-seed arm index become column slices; ``neither``: both. Otherwise the
  same sweep as :func:`launch.experiments.varde.bai.sweep_fn`'s; their
  error rates mean nothing.
  """
  _, (algorithm,), neyman = varde_config.algorithm_suite(config, len(means), budget)
  instance, k = varde_bai.make_instance_fn(config, means), len(means)

  def fixed(k_inst, k_reward):
    m, s, _ = instance(k_inst, k_reward)
    return m, s, lambda arm, index: m[arm] + s[arm] * (index.astype(jnp.float32) / budget - 0.5)

  one_arm = algorithm._replace(select=lambda state, key, t: (t % k).astype(jnp.int32))
  ids = varde_bai.chunk_seed_ids(config, mesh, 0)
  return [(varde_bai.sweep_fn(config, mesh, budget, [a], i, neyman), (ids,))
          for a, i in ((algorithm, fixed), (one_arm, instance), (one_arm, fixed))]


def _peer_rows(budget, num_seeds, means, error, runs_per_s, ours, others, num_arrays) -> tuple[dict, dict]:
  """Rows 3 and 4: the sweep (``runs_per_s``, VarDE ``error``) against the vectorised NumPy and hand-fused peers.

  ``others``: the timings of the peers timed with the sweep, in the order of
  :func:`run`'s ``peers``; ``num_arrays``: the seeds of the hand-fused runs.
  """
  vec, arrays, arrays_hash, *rest = others
  draws, ablated = rest[:len(varde_arrays.DRAWS)], rest[len(varde_arrays.DRAWS):]
  hash_rate = num_arrays / arrays_hash.warm
  vec_rate, arrays_rate = num_seeds / vec.warm, num_arrays / arrays.warm
  parts = ", ".join(f"{name} {num_seeds / t.warm / vec_rate:.1f}x" for name, t in zip(ABLATIONS, ablated))
  arrays_error, hash_error = (float(np.mean(np.asarray(t.output) != int(np.argmax(means))))
                              for t in (arrays, arrays_hash))
  draws_rate = {kind: num_arrays / d.warm for kind, d in zip(varde_arrays.DRAWS, draws)}
  vectorised = {
      "benchmark": f"E1 T={budget}, VarDE only ({num_seeds:,} runs), against NumPy vectorised over seeds",
      "ours": runs_per_s,
      "peer": vec_rate,
      "unit": "runs/s",
      "peer_name": "NumPy, all seeds one pull at a time as arrays",
      "ratio": runs_per_s / vec_rate,
      "notes": (
          f"{mesh_lib.describe_devices()}; NumPy float32, single-threaded BLAS; both timed in alternating "
          f"rounds, each its best call; VarDE error "
          f"{100 * error:.2f}% (JAX) vs {100 * vec.output:.2f}% (NumPy vectorised), {num_seeds:,} seeds each; "
          f"where the sweep's time goes, the same sweep against the NumPy peer with parts of each pull taken out "
          f"(timed in the same rounds): {parts} (no draws: rewards a fixed function of arm and pull count; one "
          f"arm: every seed pulls the same arm at each step, so no argmax over arms and no reads or writes at a "
          f"per-seed index)"
      ),
  }
  hand_fused = {
      "benchmark": f"E1 T={budget}, VarDE only ({num_seeds:,} runs), against VarDE fused by hand as JAX arrays",
      "ours": runs_per_s,
      "peer": arrays_rate,
      "unit": "runs/s",
      "peer_name": "jax.numpy, all seeds one pull at a time as arrays",
      "ratio": runs_per_s / arrays_rate,
      "notes": (
          f"{mesh_lib.describe_devices()}; both compiles excluded ({ours.compile_seconds:.1f}s ours, "
          f"{arrays.compile_seconds:.1f}s peer); the hand-fused peer is {arrays_rate / vec_rate:.1f}x "
          f"the NumPy vectorised peer; the reward draws alone (the same scan, nothing else) run at "
          f"{draws_rate['fused'] / vec_rate:.1f}x the NumPy peer with one hash per pull (hand-fused), "
          f"{draws_rate['common'] / vec_rate:.1f}x with the sweep's common random numbers and "
          f"{draws_rate['hash'] / vec_rate:.1f}x with a 32-bit integer hash and ndtri (no generator of the "
          f"project: the floor a cheaper one would leave); the whole hand-fused kernel drawing from that "
          f"hash runs at {hash_rate / vec_rate:.1f}x the NumPy peer; VarDE error "
          f"{100 * error:.2f}% (ours) vs {100 * arrays_error:.2f}% (hand-fused) and "
          f"{100 * hash_error:.2f}% (hand-fused, hash draws), {num_seeds:,} seeds each"
      ),
  }
  return vectorised, hand_fused


def run(quick: bool) -> list[dict]:
  num_seeds = 2_000 if quick else 20_000
  numpy_seeds = 200 if quick else 5_000
  budget = bandits.PROBLEMS["E1"].budgets[0]
  means = bandits.problem_means("E1")
  mesh = mesh_lib.make_mesh()
  rows = []

  t0 = time.perf_counter()
  np_error = varde_numpy.error_rate(means.astype(np.float64), budget, numpy_seeds, tau=0.1)
  np_rate = numpy_seeds / (time.perf_counter() - t0)
  # The VarDE-only sweep is timed in rounds with these peers: the vectorised NumPy peer, the
  # hand-fused kernel, the same kernel drawing from the 32-bit hash, and the reward draws alone
  # (the floor under each kernel), in that order, then its own ablations (:func:`_ablations`).
  arrays_in = varde_arrays.inputs(np.random.default_rng(1), means, mesh_lib.padded_size(num_seeds, mesh), mesh)
  peers = [(functools.partial(varde_numpy.error_rate_vectorised, tau=0.1), (means, budget, num_seeds)),
           (varde_arrays.make_sweep(means, budget, mesh, tau=0.1), arrays_in),
           (varde_arrays.make_sweep(means, budget, mesh, tau=0.1, noise="hash"), arrays_in)]
  peers += [(varde_arrays.make_draws(means, budget, mesh, kind=kind), arrays_in[2:]) for kind in varde_arrays.DRAWS]

  for algorithms, label in ((("varde",), "VarDE only"), (varde_config.ALGORITHMS, "all algorithms")):
    config = varde_config.get_config("cpu")
    config.num_seeds = config.chunk_size = num_seeds
    config.algorithms = algorithms
    varde_only = algorithms == ("varde",)
    if varde_only:
      config.varde.taus = (0.1,)
    timed_with = peers + _ablations(config, mesh, budget, means) if varde_only else ()
    names, errors, ours, others = _timed_sweep(config, mesh, budget, means, timed_with)
    runs_per_s = len(names) * num_seeds / ours.warm
    print(f"{label}: {len(names)} algorithms x {num_seeds} seeds in {ours.warm:.3f}s "
          f"(compile+run {ours.cold:.1f}s); NumPy VarDE {np_rate:.0f} seeds/s", flush=True)
    ref = names.index("varde_tau0.1")
    rows.append({
        "benchmark": f"E1 T={budget} sweep, {label} ({len(names)} x {num_seeds:,} runs)",
        "ours": runs_per_s,
        "peer": np_rate,
        "unit": "runs/s",
        "peer_name": "NumPy per-pull loop of VarDE",
        "ratio": runs_per_s / np_rate,
        "notes": (
            f"{mesh_lib.describe_devices()}; compile {ours.compile_seconds:.1f}s excluded; "
            f"VarDE error {100 * errors[ref]:.2f}% (JAX, {num_seeds:,} seeds) vs "
            f"{100 * np_error:.2f}% (NumPy, {numpy_seeds:,} seeds)"
        ),
    })
    if varde_only:
      vectorised, hand_fused = _peer_rows(budget, num_seeds, means, errors[ref], runs_per_s, ours, others,
                                          arrays_in[0].shape[0])
  return rows + [vectorised, hand_fused]
