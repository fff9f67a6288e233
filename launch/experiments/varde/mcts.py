"""Experiment ``varde_mcts``: VarDE tree search against UCT, MENTS, Power-UCT and mctx.

Config: ``launch/configs/varde_mcts.py``; environments:
:mod:`launch.experiments.varde.mcts_envs`; the run loop:
:mod:`launch.experiments.varde.search`. One unit is one (environment,
budget): every policy searches from the root of every run (``num_instances``
random environments x ``runs_per_instance`` seeds, the run axis sharded over
the mesh) in one jitted call, and the unit's sums (regret, wrong root
actions, regret per cluster) are checkpointed, so a killed run resumes to the same
table. Exact root values come from finite-horizon dynamic programming on the
true environment. The VarDE tree rule is a reconstruction from the paper's
principle (Luong et al., "Variance Driven Exploration", ICML 2026, Section 4).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_collections

from launch import mesh as mesh_lib
from launch.configs import varde_mcts as mcts_config
from launch.experiments.varde import mcts_envs
from launch.experiments.varde import search
from launch.experiments.varde import search_report
from launch.runtime import Context, Experiment
from methods.varde import mcts
from methods.varde import mctx_adapter


def policy_fn(name: str, hp: mcts.MCTSHparams, num_simulations: int, horizon: int):
  """``(mdp, root_state, key, budget) -> action`` of one search (unbatched).

  This project's policies take the budget as a traced value (one compilation
  for every budget, trees sized for ``num_simulations``); mctx's are built for
  ``num_simulations`` exactly (``budget`` is ignored).
  """
  if name in mctx_adapter.MCTX_POLICIES:

    def run(mdp, root, key, budget):
      del budget
      batched = jax.tree.map(lambda x: x[None], mdp)
      action, _ = mctx_adapter.mctx_search(batched, root[None], key, policy=name, num_simulations=num_simulations,
                                           horizon=horizon, leaf_value=hp.leaf_value)
      return action[0]

    return run
  policy = mcts.make_policy(name, hp)
  return lambda mdp, root, key, budget: mcts.search_one(
      mdp, root, key, policy=policy, num_simulations=num_simulations, horizon=horizon, leaf_value=hp.leaf_value,
      budget=budget)[0]


def make_unit_fn(config, mesh, env_index: int, policies, num_simulations: int):
  """Jitted ``(run_ids [P], budget) -> Tally`` of ``policies`` on one environment."""
  env_name = config.envs[env_index]
  hp = mcts_config.SECTIONS.build(config, mcts.MCTSHparams)
  make, horizon = mcts_envs.make_env(env_name, mcts_config.SECTIONS.build(config, mcts_config.EnvConfig))
  fns = [policy_fn(p, hp, num_simulations, horizon) for p in policies]

  def regrets(mdp, keys, budget):
    out = []
    for fn in fns:
      actions = jax.vmap(lambda m, s, k: fn(m, s, k, budget))(mdp, mdp.s0, keys)  # noqa: B023
      out.append(jax.vmap(functools.partial(search.root_regret, horizon=horizon))(mdp, action=actions))
    return jnp.stack(out)

  return search.make_unit_fn(config, mesh, env_index, make, mcts_envs.num_instances(env_name, config.num_instances),
                             regrets)


def unit_tally(config, mesh, env_index: int, budget: int, cache: dict) -> search.Tally:
  """Sums of one (environment, budget) over all policies, in ``config.policies`` order.

  ``cache`` keeps this project's compiled search per environment across budgets.
  """
  ours = [p for p in config.policies if p not in mctx_adapter.MCTX_POLICIES]
  theirs = [p for p in config.policies if p in mctx_adapter.MCTX_POLICIES]
  ids = search.padded_ids(config.num_instances * config.runs_per_instance, mesh)
  b = jnp.asarray(budget, jnp.int32)
  parts = {}
  if ours:
    if ("ours", env_index) not in cache:
      cache[("ours", env_index)] = make_unit_fn(config, mesh, env_index, ours, max(config.budgets))
    parts.update(zip(ours, _split(mesh_lib.to_host(cache[("ours", env_index)](ids, b)))))
  if theirs:
    fn = make_unit_fn(config, mesh, env_index, theirs, budget)
    parts.update(zip(theirs, _split(mesh_lib.to_host(fn(ids, b)))))
  cols = [parts[p] for p in config.policies]
  fields = ("regret", "wrong", "cluster_regret")
  return search.Tally(cols[0].runs, *(jnp.stack([getattr(c, f) for c in cols]) for f in fields),
                      cols[0].cluster_runs)


def _split(t: search.Tally) -> list[search.Tally]:
  return [search.Tally(t.runs, t.regret[i], t.wrong[i], t.cluster_regret[i], t.cluster_runs)
          for i in range(len(t.regret))]


def num_clusters(config, env_index: int) -> int:
  """Clusters of an environment's runs: its random instances, or every run of a fixed one."""
  n_inst = mcts_envs.num_instances(config.envs[env_index], config.num_instances)
  return search.num_clusters(config.num_instances * config.runs_per_instance, n_inst)


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs every (environment, budget) unit; returns ``results.json``'s content."""
  cache: dict = {}
  return search.run_units(
      "varde_mcts", config, ctx, list(config.policies),
      lambda e, budget: unit_tally(config, ctx.mesh, e, budget, cache),
      {"budget_unit": "simulations", "metric": "root simple regret V*(s0) - Q*(s0, a_hat)"},
      lambda e: num_clusters(config, e))


EXPERIMENT = Experiment(
    declaration=mcts_config.SECTIONS,
    get_config=mcts_config.get_config,
    run=run,
    summary=search_report.format_table,
    markdown=search_report.markdown_table,
    headline=search_report.headline_table,
)
