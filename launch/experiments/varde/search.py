"""The run loop shared by ``varde_mcts`` and ``varde_bpi``: units, tallies, keys.

One unit is one (environment, budget): every algorithm runs on every run of
the environment (random instances x seeds, the run axis sharded over the mesh)
and the runs are reduced to sums (:class:`Tally`), which are checkpointed
after each unit. The sums are also kept per cluster (the random instance; each
run of a fixed environment is its own cluster), so that the tables can show
paired differences between algorithms (same instances, same keys) with
instance-clustered standard errors. Tables and figures: :mod:`launch.experiments.varde.search_report`.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from envs import mdps
from launch import mesh as mesh_lib
from launch import metrics
from launch.experiments.varde import search_report


class Tally(NamedTuple):
  """Sums over runs for one (environment, budget); ``[P]`` per algorithm, ``[C]`` per cluster."""

  runs: np.ndarray  # []
  regret: np.ndarray  # [P]
  wrong: np.ndarray  # [P]
  cluster_regret: np.ndarray  # [P, C] regret summed within each cluster
  cluster_runs: np.ndarray  # [C]

  @classmethod
  def zeros(cls, num_algorithms: int, num_clusters: int) -> "Tally":
    z = np.zeros((num_algorithms,), np.float32)
    return cls(np.zeros((), np.float32), z, z.copy(), np.zeros((num_algorithms, num_clusters), np.float32),
               np.zeros((num_clusters,), np.float32))

  def __add__(self, other: "Tally") -> "Tally":  # type: ignore[override]
    return Tally(*(np.asarray(a, np.float32) + np.asarray(b, np.float32) for a, b in zip(self, other)))


def tally(regret, valid, cluster, num_clusters: int, tol: float = 1e-5, scale=1.0) -> Tally:
  """Sums over the valid runs of ``regret [P, R]`` (jax arrays; usable inside jit).

  A run counts as a wrong decision when its regret exceeds ``tol * scale``
  (``scale [R]``: the instance's largest ``|mean reward|``, so that the count
  does not depend on the rewards' unit).
  ``cluster [R]`` (int32 in ``[0, num_clusters)``) names each run's cluster.
  """
  v = valid.astype(jnp.float32)[None, :]
  c = jnp.where(valid, cluster, 0)
  per = jax.vmap(lambda x: jax.ops.segment_sum(x, c, num_segments=num_clusters))(regret * v)
  wrong = regret > tol * jnp.broadcast_to(scale, valid.shape)[None, :]
  return Tally(jnp.sum(valid.astype(jnp.float32)), jnp.sum(regret * v, -1), jnp.sum(wrong * v, -1), per,
               jax.ops.segment_sum(valid.astype(jnp.float32), c, num_segments=num_clusters))


def cluster_of(run, instance, fixed: bool):
  """The cluster of a run: its instance, or the run itself in a fixed environment (one instance)."""
  return run if fixed else instance


def num_clusters(num_runs: int, num_instances: int) -> int:
  """How many clusters :func:`cluster_of` gives: the instances, or every run of a fixed environment."""
  return num_runs if num_instances == 1 else num_instances


def root_regret(mdp: mdps.TabularMDP, horizon: int, action: jax.Array) -> jax.Array:
  """``V*(s0) - Q*(s0, a)`` of the ``horizon``-step problem."""
  q = mdps.finite_horizon_q(mdp, horizon)[horizon - 1, mdp.s0]
  return jnp.max(q) - q[action]


def make_unit_fn(config, mesh, env_index: int, make: Callable, num_instances: int,
                 regrets: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]):
  """Jitted ``(run_ids [P], budget) -> Tally`` of one environment.

  Run ``i`` searches instance ``(i // runs_per_instance) % num_instances``
  (built by ``make(key)``) with its own key; ``regrets(mdp, keys, budget)``
  gives the ``[P, R]`` regrets of every algorithm on the batch of runs.
  """
  n_clusters = num_clusters(config.num_instances * config.runs_per_instance, num_instances)
  run_base = jax.random.fold_in(jax.random.key(config.seed + 1), env_index)

  def unit(ids, budget):
    valid = ids >= 0
    i = jnp.maximum(ids, 0)
    inst = (i // config.runs_per_instance) % num_instances
    mdp = jax.vmap(lambda j: make(instance_key(config.seed, env_index, j)))(inst)
    keys = jax.vmap(lambda j: jax.random.fold_in(jax.random.fold_in(run_base, budget), j))(i)
    scale = jnp.max(jnp.abs(mdp.reward_mean.reshape(mdp.reward_mean.shape[0], -1)), -1)
    return tally(regrets(mdp, keys, budget), valid, cluster_of(i, inst, num_instances == 1), n_clusters, scale=scale)

  return jax.jit(unit, in_shardings=(mesh_lib.data_sharding(mesh), mesh_lib.replicated(mesh)),
                 out_shardings=mesh_lib.replicated(mesh))


def padded_ids(num_runs: int, mesh) -> jax.Array:
  """Global ``[P]`` int32 run ids ``0..num_runs-1`` padded with -1 to the mesh size, sharded."""
  padded = mesh_lib.padded_size(num_runs, mesh)
  ids = np.full((padded,), -1, np.int32)
  ids[:num_runs] = np.arange(num_runs, dtype=np.int32)
  return mesh_lib.global_array(ids.shape, mesh_lib.data_sharding(mesh), lambda idx: ids[idx])


def instance_key(seed: int, env_index: int, instance: jax.Array) -> jax.Array:
  """The key that builds random instance ``instance`` of environment ``env_index``."""
  return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), env_index), instance)


def run_units(experiment: str, config, ctx, names: list, unit_tally: Callable[[int, int], Tally],
              extra: dict, num_clusters: Callable[[int], int]) -> dict:
  """Runs every (environment, budget) unit in turn; returns ``results.json``'s content.

  The tallies of all units are checkpointed after each one, so a killed run
  resumes at the next unit and ends with the same integer-valued sums.

  Args:
    experiment: ``varde_mcts`` or ``varde_bpi``.
    config: the run's config (``envs``, ``budgets``).
    ctx: the run's context.
    names: the algorithms, in tally order.
    unit_tally: ``(environment index, budget) -> Tally`` of one unit.
    extra: ``budget_unit`` and ``metric`` for the tables.
    num_clusters: ``environment index -> C``, the clusters of its runs.
  """
  units = [(e, b) for e in range(len(config.envs)) for b in config.budgets]
  initial = {f"{config.envs[e]}_T{b}": Tally.zeros(len(names), num_clusters(e))._asdict() for e, b in units}
  done, state, _ = ctx.restore_or(initial)
  tallies = {k: Tally(**{f: jnp.asarray(x) for f, x in v.items()}) for k, v in state.items()}
  progress = metrics.Progress(len(units), unit="units", start=done)
  start = time.perf_counter()
  for u in range(done, len(units)):
    e, budget = units[u]
    env = config.envs[e]
    key = f"{env}_T{budget}"
    tallies[key] = tallies[key] + unit_tally(e, budget)
    t = tallies[key]
    progress.label = f"[{experiment} {env} T={budget}] "
    ctx.writer.log(u + 1, budget=budget, runs=float(t.runs),
                   **{f"regret/{env}/{n}": float(t.regret[i] / max(t.runs, 1)) for i, n in enumerate(names)})
    progress.update(u + 1)
    ctx.save(u + 1, {k: v._asdict() for k, v in tallies.items()}, force=u + 1 == len(units))
  tallies = {k.replace("_T", "/T"): v for k, v in tallies.items()}
  results = search_report.summarize(experiment, config.envs, config.budgets, names, tallies, extra)
  results["wall_time_s"] = time.perf_counter() - start
  search_report.make_figures(results, ctx.writer)
  return results
