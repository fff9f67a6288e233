"""Experiment ``varde_bai``: VarDE against the BAI baselines on E1-E4.

Config: ``launch/configs/varde_bai.py``. For each budget the seeds are split in
chunks; one chunk of all algorithms is one jitted call whose seed axis is
sharded over the mesh, and its integer tallies are checkpointed, so a killed
run resumes and ends with the same numbers as an uninterrupted one.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from envs import bandits
from launch import config_schema as cs
from launch import mesh as mesh_lib
from launch import metrics
from launch.configs import common
from launch.configs import varde_bai as varde_config
from launch.experiments import varde_report
from launch.runtime import Context, Experiment
from methods import varde
from methods.common import hparams

# Budgets run when ``config.budgets == ()``: the paper's budgets plus a grid for
# the error-against-budget figure.
BUDGET_GRIDS = {
    "smoke": {name: p.budgets[:1] for name, p in bandits.PROBLEMS.items()},
    "cpu": {
        "E1": (50, 100, 150, 250, 400),
        "E2": (250, 500, 1000, 2000),
        "E3": (500, 1000, 2000),
        "E4": (100, 200, 400),
    },
    "paper": {
        "E1": (50, 75, 100, 150, 200, 300, 400, 600),
        "E2": (250, 500, 750, 1000, 1500, 2000, 3000),
        "E3": (500, 1000, 1500, 2000, 3000, 4000),
        "E4": (100, 150, 200, 300, 400, 600),
    },
}


def algorithm_suite(
    config: ml_collections.ConfigDict, num_arms: int, budget: int
) -> tuple[list[str], list[varde.BAIAlgorithm], dict[str, Optional[float]]]:
  """Expands ``config.algorithms`` (keys of ``methods.varde.ALGORITHMS``) for ``(K, T)``.

  Returns:
    names, algorithms and ``{name: tau}`` for the VarDE variants: the
    temperature of each one's Neyman limit (``None`` for uniform weights).
  """
  v = hparams.from_config(varde.VarDEHparams, config.varde)
  b = hparams.from_config(varde.BaselineHparams, config.baselines)
  suite = varde.build_suite(config.algorithms, num_arms, budget, v, b)
  names = [e.name for e in suite]
  algorithms = [e.algorithm for e in suite]
  neyman = {e.name: e.neyman_tau for e in suite if e.neyman}
  return names, algorithms, neyman


def resolve_budgets(config: ml_collections.ConfigDict) -> tuple[int, ...]:
  if config.budgets:
    return tuple(config.budgets)
  return BUDGET_GRIDS[config.preset][config.problem]


def resolve_means(config: ml_collections.ConfigDict) -> np.ndarray:
  """``[K]`` arm means: a named problem's, or ``config.means`` for ``problem=custom``."""
  if config.problem == "custom":
    return np.asarray(config.means, np.float32)
  return bandits.problem_means(config.problem)


def _custom_problem(config: ml_collections.ConfigDict):
  """Named errors for a user-defined bandit (``problem=custom``)."""
  if config.problem != "custom":
    for key in ("means", "stds"):
      if config[key]:
        yield key, f"only used with problem=custom (problem={config.problem!r})"
    return
  yield from bandits.check_custom(config.means, config.stds, config.std_mode)
  if not config.budgets:
    yield "budgets", "problem=custom needs explicit budgets, e.g. --config.budgets='(500,)'"


def _feasibility(config: ml_collections.ConfigDict):
  """Every budget must fit every algorithm's warm start / first phase."""
  if list(_custom_problem(config)):
    return
  num_arms = len(resolve_means(config))
  for budget in resolve_budgets(config):
    try:
      names, _, _ = algorithm_suite(config, num_arms, budget)
    except ValueError as e:
      yield "budgets", f"T={budget} with K={num_arms} arms: {e}"
      return
  if config.reference not in names:
    yield "reference", f"{config.reference!r} is not run; algorithms run: {names}"


class _ProblemName(cs.Constraint):
  """One of the paper's problems, or ``custom`` (``config.means`` / ``config.stds``)."""

  def check(self, value):
    if value in varde_config.PROBLEMS or value == "custom":
      return None
    return f"{value!r} is not allowed; allowed values: {list(varde_config.PROBLEMS)} or 'custom' (config.means)"


def schema() -> cs.Schema:
  constraints = {
      **common.BASE_CONSTRAINTS,
      "experiment": cs.OneOf(("varde_bai",)),
      "problem": _ProblemName(),
      "budgets": cs.Each(cs.Range(lo=1)),
      "means": cs.Each(cs.Range()),
      "stds": cs.Each(cs.Range()),
      "num_seeds": cs.Range(lo=1),
      "chunk_size": cs.Range(lo=1),
      "std_mode": cs.OneOf(bandits.STD_MODES),
      "noise": cs.OneOf(bandits.NOISE_KINDS),
      "df": cs.Range(lo=2, lo_open=True),
      "algorithms": cs.Each(cs.OneOf(varde_config.ALGORITHMS), nonempty=True),
  }
  unique = lambda c: [("algorithms", m)] if (m := cs.Unique().check(c.algorithms)) else []  # noqa: E731
  return cs.Schema(
      varde_config.get_config(),
      constraints,
      checks=(common.mesh_check, unique, lambda c: list(_custom_problem(c)),
              lambda c: list(_feasibility(c))),
      sections=(cs.Section("varde", varde.VarDEHparams), cs.Section("baselines", varde.BaselineHparams)),
  )


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
  names, algorithms, neyman = algorithm_suite(config, len(means), budget)
  base_key = jax.random.key(config.seed)
  instance = make_instance_fn(config, means)

  def chunk(seed_ids):
    keys = jax.vmap(lambda i: jax.random.fold_in(base_key, i))(jnp.maximum(seed_ids, 0))
    return varde.sweep(
        algorithms, instance, keys, seed_ids >= 0, budget=budget, neyman_taus=tuple(neyman.values())
    )

  fn = jax.jit(
      chunk,
      in_shardings=mesh_lib.data_sharding(mesh),
      out_shardings=mesh_lib.replicated(mesh),
  )
  return names, neyman, fn


def chunk_seed_ids(config, mesh, chunk: int) -> jax.Array:
  """Global ``[P]`` int32 seed ids of a chunk, padded with -1 to the mesh size."""
  start = chunk * config.chunk_size
  n = min(config.chunk_size, config.num_seeds - start)
  padded = mesh_lib.padded_size(config.chunk_size, mesh)
  ids = np.full((padded,), -1, np.int32)
  ids[:n] = np.arange(start, start + n, dtype=np.int32)
  return mesh_lib.global_array(ids.shape, mesh_lib.data_sharding(mesh), lambda idx: ids[idx])


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs the sweep; returns (and the runner writes) ``results.json``'s content."""
  means = resolve_means(config)
  budgets = resolve_budgets(config)
  num_chunks = math.ceil(config.num_seeds / config.chunk_size)
  units = [(b, c) for b in range(len(budgets)) for c in range(num_chunks)]

  built = [make_chunk_fn(config, ctx.mesh, t, means) for t in budgets]
  names = built[0][0]
  initial = {
      f"T{t}": varde.SweepStats.zeros(len(names), len(means), len(built[i][1]))._asdict()
      for i, t in enumerate(budgets)
  }
  done, state, _ = ctx.restore_or(initial)
  tallies = {k: varde.SweepStats(**{f: np.asarray(x) for f, x in v.items()}) for k, v in state.items()}
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
    ctx.save(unit + 1, {k: v._asdict() for k, v in tallies.items()}, force=unit + 1 == len(units))

  results = varde_report.summarize(config, budgets, names, list(built[0][1]), tallies, means)
  results["wall_time_s"] = time.perf_counter() - start
  varde_report.make_figures(results, ctx.writer)
  return results


EXPERIMENT = Experiment(
    name="varde_bai",
    get_config=varde_config.get_config,
    schema=schema,
    run=run,
    summary=varde_report.format_table,
    markdown=varde_report.markdown_table,
)
