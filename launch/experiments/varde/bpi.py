"""Experiment ``varde_bpi``: best-policy identification with a generative model.

Config: ``launch/configs/varde_bpi.py``; environments:
:mod:`launch.experiments.varde.bpi_envs`; the run loop:
:mod:`launch.experiments.varde.search`. One unit is one (environment,
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

from envs.errors import MDPFileError
from launch import mesh as mesh_lib
from launch.configs import varde_bpi as bpi_config
from launch.experiments.varde import bpi_envs
from launch.experiments.varde import search
from launch.experiments.varde import search_report
from launch.runtime import Context, Experiment
from methods.varde import bpi


def make_unit_fn(config, mesh, env_index: int):
  """Jitted ``(run_ids [P], budget) -> Tally`` of every algorithm on one environment."""
  name = config.envs[env_index]
  hp = bpi_config.SECTIONS.build(config, bpi.BPIHparams)
  make = bpi_envs.make_env(name, bpi_config.SECTIONS.build(config, bpi_config.EnvConfig), config.mdp_file,
                           config.start_state)

  def regrets(mdp, keys, budget):
    out = []
    for alg_name in config.algorithms:
      alg = bpi.make_algorithm(alg_name, hp, budget)
      one = lambda m, k: bpi.policy_regret(m, bpi.run_bpi(alg, m, k, budget=budget, hp=hp).policy)  # noqa: E731,B023
      out.append(jax.vmap(one)(mdp, keys))
    return jnp.stack(out)

  return search.make_unit_fn(config, mesh, env_index, make, bpi_envs.num_instances(name, config.num_instances),
                             regrets)


def num_clusters(config, env_index: int) -> int:
  """Clusters of an environment's runs: its random instances, or every run of a fixed one."""
  n_inst = bpi_envs.num_instances(config.envs[env_index], config.num_instances)
  return search.num_clusters(config.num_instances * config.runs_per_instance, n_inst)


def _sizes(config, name, file_shape=None):
  """``(S, A)`` of environment ``name`` (without building random instances); ``file_shape`` that of the user's file."""
  e = config.env
  if name == "riverswim":
    return e.riverswim_states, 2
  if name == "gridworld":
    return e.grid_size**2, 4
  if name == "file":
    return file_shape
  return e.garnet_states, e.garnet_actions


def _data_checks(config):
  """The user's MDP file loads, and the smallest budget covers every environment's warm start."""
  if "file" in config.envs:
    if not config.mdp_file:
      yield "mdp_file", "envs=file needs --config.mdp_file=<path>.npz"
      return
    if not os.path.exists(config.mdp_file):
      yield "mdp_file", f"{config.mdp_file!r} does not exist"
      return
    try:
      file_shape = bpi_envs.load_mdp_file(config.mdp_file, samples=max(config.budgets)).reward_mean.shape
    except MDPFileError as e:
      yield "mdp_file", str(e)
      return
    if config.start_state >= file_shape[0]:
      yield "start_state", f"{config.start_state} is not a state of {config.mdp_file!r} (states 0..{file_shape[0] - 1})"
      return
  else:
    file_shape = None
  for name in config.envs:
    s, a = _sizes(config, name, file_shape)
    warm = s * a * config.bpi.warm_start
    if min(config.budgets) < warm:
      yield "budgets", f"{name}: budget {min(config.budgets)} is below the warm start S A warm_start = {warm}"


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs every (environment, budget) unit; returns ``results.json``'s content."""
  fns: dict = {}
  ids = search.padded_ids(config.num_instances * config.runs_per_instance, ctx.mesh)

  def unit_tally(e: int, budget: int) -> search.Tally:
    if e not in fns:
      fns[e] = make_unit_fn(config, ctx.mesh, e)
    return search.Tally(*mesh_lib.to_host(fns[e](ids, jnp.asarray(budget, jnp.int32))))

  return search.run_units("varde_bpi", config, ctx, list(config.algorithms), unit_tally,
                          {"budget_unit": "samples", "metric": "policy regret V*(s0) - V^pi_hat(s0)"},
                          lambda e: num_clusters(config, e))


EXPERIMENT = Experiment(
    declaration=bpi_config.SECTIONS,
    get_config=bpi_config.get_config,
    run=run,
    summary=search_report.format_table,
    markdown=search_report.markdown_table,
    headline=search_report.headline_table,
    checks=(_data_checks,),
    inputs=lambda config: [("mdp_file", config.mdp_file)] if "file" in config.envs else [],
)
