"""Experiment ``varde_bpi``: best-policy identification with a generative model.

Config: ``launch/configs/varde_bpi.py``. One unit is one (environment,
budget); all algorithms run on all runs (``num_instances`` random MDPs x
``runs_per_instance`` seeds, the run axis sharded over the mesh) in one jitted
call compiled once per environment (the budget is a traced value), and the
unit's sums are checkpointed. The policy regret ``V*(s0) - V^pi(s0)`` of the
recommended greedy policy is exact (dynamic programming on the true MDP). The
VarDE allocation is a reconstruction from the paper's principle (Luong et al.,
"Variance Driven Exploration", ICML 2026, Section 4).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import ml_collections

from envs import mdps
from launch import config_schema as cs
from launch import mesh as mesh_lib
from launch.configs import common
from launch.configs import varde_bpi as bpi_config
from launch.experiments import varde_bpi_envs as envs_lib
from launch.experiments import varde_search_report as report
from launch.runtime import Context, Experiment
from methods.common import hparams
from methods.varde import bpi


def make_unit_fn(config, mesh, env_index: int):
  """Jitted ``(run_ids [P], budget) -> Tally`` of every algorithm on one environment."""
  name = config.envs[env_index]
  hp = hparams.from_config(bpi.BPIHparams, config.bpi)
  make = envs_lib.make_env(name, hparams.from_config(envs_lib.EnvConfig, config.env), config.mdp_file,
                           config.start_state)
  n_inst = envs_lib.num_instances(name, config.num_instances)
  run_base = jax.random.fold_in(jax.random.key(config.seed + 1), env_index)

  def unit(ids, budget):
    valid = ids >= 0
    i = jnp.maximum(ids, 0)
    inst = (i // config.runs_per_instance) % n_inst
    mdp = jax.vmap(lambda j: make(envs_lib.instance_key(config.seed, env_index, j)))(inst)
    keys = jax.vmap(lambda j: jax.random.fold_in(jax.random.fold_in(run_base, budget), j))(i)
    regrets = []
    for alg_name in config.algorithms:
      alg = bpi.make_algorithm(alg_name, hp, budget)
      one = lambda m, k: bpi.policy_regret(m, bpi.run_bpi(alg, m, k, budget=budget, hp=hp).policy)  # noqa: E731,B023
      regrets.append(jax.vmap(one)(mdp, keys))
    return report.tally(jnp.stack(regrets), valid)

  return jax.jit(unit, in_shardings=(mesh_lib.data_sharding(mesh), mesh_lib.replicated(mesh)),
                 out_shardings=mesh_lib.replicated(mesh))


def _sizes(config, name):
  """``(S, A)`` of environment ``name`` (without building random instances)."""
  e = config.env
  if name == "riverswim":
    return e.riverswim_states, 2
  if name == "file":
    return mdps.load_npz(config.mdp_file).reward_mean.shape
  return e.garnet_states, e.garnet_actions


def _checks(config):
  if "file" in config.envs:
    if not config.mdp_file:
      yield "mdp_file", "envs=file needs --config.mdp_file=<path>.npz"
      return
    if not os.path.exists(config.mdp_file):
      yield "mdp_file", f"{config.mdp_file!r} does not exist"
      return
    try:
      mdps.load_npz(config.mdp_file, s0=config.start_state)
    except mdps.MDPFileError as e:
      yield "mdp_file", str(e)
      return
  for name in config.envs:
    s, a = _sizes(config, name)
    warm = s * a * config.bpi.warm_start
    if min(config.budgets) < warm:
      yield "budgets", f"{name}: budget {min(config.budgets)} is below the warm start S A warm_start = {warm}"


def schema() -> cs.Schema:
  constraints = {
      **common.BASE_CONSTRAINTS,
      "experiment": cs.OneOf(("varde_bpi",)),
      "envs": hparams.All((cs.Each(cs.OneOf(bpi_config.ENVS), nonempty=True), cs.Unique())),
      "algorithms": hparams.All((cs.Each(cs.OneOf(bpi.ALGORITHMS), nonempty=True), cs.Unique())),
      "budgets": hparams.All((cs.Each(cs.Range(lo=1), nonempty=True), cs.Unique())),
      "num_instances": cs.Range(lo=1),
      "runs_per_instance": cs.Range(lo=1),
      "start_state": cs.Range(lo=0),
  }
  return cs.Schema(
      bpi_config.get_config(), constraints, checks=(common.mesh_check, lambda c: list(_checks(c))),
      sections=(cs.Section("bpi", bpi.BPIHparams), cs.Section("env", envs_lib.EnvConfig)),
  )


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs every (environment, budget) unit; returns ``results.json``'s content."""
  fns: dict = {}
  ids = report.padded_ids(config.num_instances * config.runs_per_instance, ctx.mesh, mesh_lib)

  def unit_tally(e: int, budget: int) -> report.Tally:
    if e not in fns:
      fns[e] = make_unit_fn(config, ctx.mesh, e)
    return report.Tally(*mesh_lib.to_host(fns[e](ids, jnp.asarray(budget, jnp.int32))))

  return report.run_units("varde_bpi", config, ctx, list(config.algorithms), unit_tally,
                          {"budget_unit": "samples", "metric": "policy regret V*(s0) - V^pi_hat(s0)"})


EXPERIMENT = Experiment(
    name="varde_bpi",
    get_config=bpi_config.get_config,
    schema=schema,
    run=run,
    summary=report.format_table,
    markdown=report.markdown_table,
)
