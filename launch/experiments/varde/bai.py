"""Experiment ``varde_bai``: VarDE against the BAI baselines on E1-E4.

Config: ``launch/configs/varde_bai.py`` (its keys, budget grids and algorithm
suite); tables and figures: :mod:`launch.experiments.varde.bai_report`. For
each budget the seeds are split in chunks; one chunk of all algorithms is one
jitted call whose seed axis is sharded over the mesh, and its integer tallies
are checkpointed, so a killed run resumes and ends with the same numbers as an
uninterrupted one.
"""

from __future__ import annotations

import functools
import math
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from envs import bandits
from launch import mesh as mesh_lib
from launch import metrics
from launch.configs import varde_bai as varde_config
from launch.experiments.varde import bai_report
from launch.runtime import Context, Experiment
from methods import varde


def make_instance_fn(config: ml_collections.ConfigDict, means: np.ndarray):
  """``(k_inst, k_reward) -> (means, stds, pull)`` for :func:`methods.varde.sweep`."""
  stds = jnp.asarray(config.stds, jnp.float32) if config.stds else None

  def instance(k_inst, k_reward):
    arms = bandits.make_arms(
        k_inst, jnp.asarray(means), std_mode=config.std_mode, noise=config.noise, df=config.df, stds=stds
    )
    return arms.means, arms.stds, functools.partial(bandits.pull, arms, k_reward)

  return instance


def make_chunk_fn(config, mesh, budget: int, means: np.ndarray):
  """Jitted ``seed_ids [P] -> SweepStats`` (ids < 0 are padding), sharded over ``mesh``."""
  names, algorithms, neyman = varde_config.algorithm_suite(config, len(means), budget)
  return names, neyman, sweep_fn(config, mesh, budget, algorithms, make_instance_fn(config, means), neyman)


def sweep_fn(config, mesh, budget: int, algorithms, instance, neyman: dict):
  """Jitted ``seed_ids [P] -> SweepStats`` of ``algorithms`` on ``instance`` (seed ``i``'s key: ``fold_in(seed, i)``)."""
  base_key = jax.random.key(config.seed)

  def chunk(seed_ids):
    keys = jax.vmap(lambda i: jax.random.fold_in(base_key, i))(jnp.maximum(seed_ids, 0))
    return varde.sweep(
        algorithms, instance, keys, seed_ids >= 0, budget=budget, neyman_taus=tuple(neyman.values())
    )

  return jax.jit(chunk, in_shardings=mesh_lib.data_sharding(mesh), out_shardings=mesh_lib.replicated(mesh))


def chunk_seed_ids(config, mesh, chunk: int) -> jax.Array:
  """Global ``[P]`` int32 seed ids of a chunk, padded with -1 to the mesh size."""
  start = chunk * config.chunk_size
  n = min(config.chunk_size, config.num_seeds - start)
  padded = mesh_lib.padded_size(config.chunk_size, mesh)
  ids = np.full((padded,), -1, np.int32)
  ids[:n] = np.arange(start, start + n, dtype=np.int32)
  return mesh_lib.global_array(ids.shape, mesh_lib.data_sharding(mesh), lambda idx: ids[idx])


def _saved(stats: varde.SweepStats) -> dict:
  """The checkpointed fields: all but empty ones (no VarDE variant run: no Neyman shares; orbax stores no 0-size array)."""
  return {f: x for f, x in stats._asdict().items() if np.size(x)}


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs the sweep; returns (and the runner writes) ``results.json``'s content."""
  means = varde_config.resolve_means(config)
  budgets = varde_config.resolve_budgets(config)
  num_chunks = math.ceil(config.num_seeds / config.chunk_size)
  units = [(b, c) for b in range(len(budgets)) for c in range(num_chunks)]

  built = [make_chunk_fn(config, ctx.mesh, t, means) for t in budgets]
  names = built[0][0]
  zeros = {f"T{t}": varde.SweepStats.zeros(len(names), len(means), len(built[i][1])) for i, t in enumerate(budgets)}
  done, state, _ = ctx.restore_or({k: _saved(v) for k, v in zeros.items()})
  tallies = {k: zeros[k]._replace(**{f: np.asarray(x) for f, x in v.items()}) for k, v in state.items()}
  progress = metrics.Progress(len(units) * config.chunk_size, unit="seeds", start=done * config.chunk_size)
  start = time.perf_counter()
  for unit in range(done, len(units)):
    b, c = units[unit]
    budget = budgets[b]
    out = mesh_lib.to_host(built[b][2](chunk_seed_ids(config, ctx.mesh, c)))
    key = f"T{budget}"
    tallies[key] = tallies[key] + varde.SweepStats(*out)
    t = tallies[key]
    progress.label = f"[varde_bai {config.problem} T={budget}] "
    ctx.writer.log(
        unit + 1,
        budget=budget,
        seeds=int(t.runs),
        seeds_per_s=progress.rate((unit + 1) * config.chunk_size),
        **{f"error/{n}": float(e) / max(int(t.runs), 1) for n, e in zip(names, t.errors)},
    )
    progress.update((unit + 1) * config.chunk_size)
    ctx.save(unit + 1, {k: _saved(v) for k, v in tallies.items()}, force=unit + 1 == len(units))

  results = bai_report.summarize(config, budgets, names, list(built[0][1]), tallies, means)
  results["wall_time_s"] = time.perf_counter() - start
  bai_report.make_figures(results, ctx.writer)
  return results


EXPERIMENT = Experiment(
    declaration=varde_config.SECTIONS,
    get_config=varde_config.get_config,
    run=run,
    summary=bai_report.format_table,
    markdown=bai_report.markdown_table,
    headline=bai_report.headline_table,
)
