"""Experiment ``varde_backups``: the backup ablation, UCT's tuned ``c`` and the scale-free ``tau`` check.

Config and the protocol: ``launch/configs/varde_backups.py``; tables:
:mod:`launch.experiments.varde.backups_report`. Three stages on separate
instances (tuning: seed + 1, evaluation: seed + 2, scale check: seed + 3);
every rule of a stage searches the same instances with the same keys, so
differences are paired, and their standard errors are clustered by instance
(by run in a fixed environment, whose runs share the one instance). A rule's
``(tau, floor_c)`` or UCT's ``c`` is a traced argument: one compilation per
(environment, backup, value scale) serves the whole grid and every budget.
The stages are checkpointed (after the tuning, after each environment of the
evaluation, after the scale check); a killed run resumes at the next one.
The VarDE tree rule is a reconstruction (Luong et al., "Variance Driven
Exploration", ICML 2026, Section 4; :mod:`methods.varde.tree_rules`).
"""

from __future__ import annotations

import functools
import itertools
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from envs import mdps
from launch import metrics
from launch.configs import varde_backups as backups_config
from launch.configs import varde_mcts as mcts_config
from launch.experiments.varde import backups_report
from launch.experiments.varde import mcts_envs
from launch.experiments.varde import search
from launch.experiments.varde import search_report
from launch.runtime import Context, Experiment
from methods.varde import mcts
from methods.varde import tree_rules as rules


def _policy(kind: str, backup: str, scale: str, var_floor: float, param: jax.Array) -> rules.TreePolicy:
  """UCT with ``c = param[0]``, or VarDE with ``tau, floor_c = param`` (traced)."""
  if kind == "uct":
    return rules.uct_policy(c=param[0])
  return rules.varde_policy(tau=param[0], var_floor=var_floor, backup=backup, tau_scale=scale, floor_c=param[1])


@functools.lru_cache(maxsize=None)
def regret_fn(kind: str, backup: str, scale: str, var_floor: float, horizon: int, num_simulations: int,
              leaf_value: str):
  """Jitted ``(mdp [R], keys [R], param [2], budget, reward_scale) -> regret [R] / reward_scale``."""

  def one(mdp, key, param, budget, reward_scale):
    policy = _policy(kind, backup, scale, var_floor, param)
    action = mcts.search_one(mdp, mdp.s0, key, policy=policy, num_simulations=num_simulations, horizon=horizon,
                             leaf_value=leaf_value, budget=budget)[0]
    return search.root_regret(mdp, horizon, action) / reward_scale

  return jax.jit(jax.vmap(one, in_axes=(0, 0, None, None, None)))


class Stage:
  """The runs of one stage on one environment: instances, clusters, keys, and its regret function."""

  def __init__(self, config, env_index: int, seed_offset: int, num_instances: int, runs_per_instance: int,
               reward_scale: float = 1.0):
    env = config.envs[env_index]
    self.env_cfg = backups_config.SECTIONS.build(config, mcts_config.EnvConfig)
    self.hp = backups_config.SECTIONS.build(config, mcts.MCTSHparams)
    make, self.horizon = mcts_envs.make_env(env, self.env_cfg)
    fixed = mcts_envs.num_instances(env, num_instances) == 1
    n = num_instances * runs_per_instance
    inst = np.arange(n) // runs_per_instance
    seed = config.seed + seed_offset
    self.mdp = jax.vmap(lambda j: mdps.scale_rewards(make(search.instance_key(seed, env_index, j)), reward_scale))(
        jnp.asarray(0 * inst if fixed else inst))
    base = jax.random.fold_in(jax.random.key(seed), 10_000 + env_index)
    self.keys = jax.vmap(lambda j: jax.random.fold_in(base, j))(jnp.arange(n))
    self.cluster = search.cluster_of(np.arange(n), inst, fixed)
    self.reward_scale = reward_scale
    self.num_simulations = max(tuple(config.budgets) + (config.tune_budget,))

  def regret(self, kind: str, param, budget: int, backup: str = "mean", scale: str = "none") -> np.ndarray:
    """``[R]`` regrets of one rule at ``budget`` simulations."""
    fn = regret_fn(kind, backup, scale, float(self.hp.var_floor), self.horizon, self.num_simulations,
                   self.hp.leaf_value)
    p = jnp.asarray(param, jnp.float32).reshape(-1)[jnp.array([0, -1])]
    return np.asarray(fn(self.mdp, self.keys, p, jnp.int32(budget), jnp.float32(self.reward_scale)))


def clustered(x: np.ndarray, cluster: np.ndarray) -> list[float]:
  """``[mean, s.e.]`` of ``x [R]`` with the standard error clustered by ``cluster [R]`` (equal sizes)."""
  counts = np.bincount(cluster)
  means = np.bincount(cluster, x)[counts > 0] / counts[counts > 0]
  return [float(x.mean()), search_report.stderr(means)]


def tune(config) -> dict:
  """Stage 1: UCT's ``c`` per environment and VarDE's ``(tau_scale, tau, floor_c)`` per backup."""
  stages = [Stage(config, e, 1, config.tune_instances, config.tune_runs) for e in range(len(config.envs))]
  b = config.tune_budget
  uct = {env: {str(c): float(s.regret("uct", c, b).mean()) for c in config.uct_cs}
         for env, s in zip(config.envs, stages)}
  best_c = {env: min(config.uct_cs, key=lambda c, env=env: uct[env][str(c)]) for env in config.envs}
  grid, chosen = {}, {}
  for backup in config.backups:
    for scale, tau, floor in itertools.product(config.tau_scales, config.taus, config.floors):
      rel = [float(s.regret("varde", (tau, floor), b, backup, scale).mean()) / max(uct[env][str(best_c[env])], 1e-9)
             for env, s in zip(config.envs, stages)]
      grid[f"{backup}/{scale}/{tau}/{floor}"] = float(np.mean(rel))
    best = min((k for k in grid if k.startswith(backup + "/")), key=grid.get)
    _, scale, tau, floor = best.split("/")
    chosen[backup] = [scale, float(tau), float(floor)]
  return {"uct_regret": uct, "uct_c": {k: float(v) for k, v in best_c.items()}, "varde_relative_regret": grid,
          "chosen": chosen}


def evaluate_env(config, env_index: int, tuned: dict) -> dict:
  """Stage 2 on one environment: ``{rule: {budget: mean, se, diff to UCT, diff se}}``."""
  env = config.envs[env_index]
  st = Stage(config, env_index, 2, config.num_instances, config.runs_per_instance)
  hp = st.hp
  rules_ = {"uct": ("uct", tuned["uct_c"][env], "mean", "none"),
            "varde": ("varde", (hp.tau, hp.floor_c), hp.backup, hp.tau_scale)}
  for backup, (scale, tau, floor) in tuned["chosen"].items():
    rules_[f"varde_{backup}"] = ("varde", (tau, floor), backup, scale)
  out = {}
  for budget in config.budgets:
    base = st.regret("uct", tuned["uct_c"][env], budget)
    for name, (kind, param, backup, scale) in rules_.items():
      r = base if name == "uct" else st.regret(kind, param, budget, backup, scale)
      m = clustered(r, st.cluster)
      d = clustered(r - base, st.cluster)
      out.setdefault(name, {})[str(budget)] = {"mean": m[0], "se": m[1], "diff": d[0], "diff_se": d[1]}
  return {"rules": out, "runs": int(len(st.cluster)), "clusters": int(len(np.unique(st.cluster)))}


def scale_check(config) -> dict:
  """Stage 3: the default rule on the gridworld and on its rewards-x``scale_factor`` copy, same keys."""
  e = config.envs.index("gridworld") if "gridworld" in config.envs else None
  if e is None:
    return {}
  runs = config.num_instances * config.runs_per_instance
  x1 = Stage(config, e, 3, runs, 1)
  xf = Stage(config, e, 3, runs, 1, reward_scale=config.scale_factor)
  hp = x1.hp
  out = {}
  for scale in (hp.tau_scale, "none"):
    res = {}
    for budget in config.budgets:
      a = x1.regret("varde", (hp.tau, hp.floor_c), budget, hp.backup, scale)
      b = xf.regret("varde", (hp.tau, hp.floor_c), budget, hp.backup, scale)
      res[str(budget)] = {"x1": clustered(a, x1.cluster), "xf": clustered(b, x1.cluster),
                          "diff": clustered(b - a, x1.cluster)}
    out[scale] = res
  return {"tau": hp.tau, "floor_c": hp.floor_c, "backup": hp.backup, "factor": config.scale_factor,
          "runs": runs, "scales": out}


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Tunes, evaluates every environment, checks the scale; returns ``results.json``'s content."""
  steps = len(config.envs) + 2
  done, _, meta = ctx.restore_or({"stage": np.zeros((), np.int32)})
  res = dict(meta or {})
  res.setdefault("evaluation", {})
  progress = metrics.Progress(steps, unit="stages", start=done)
  start = time.perf_counter()
  for step in range(done, steps):
    if step == 0:
      res["tuning"] = tune(config)
    elif step <= len(config.envs):
      env = config.envs[step - 1]
      res["evaluation"][env] = evaluate_env(config, step - 1, res["tuning"])
      rules_ = res["evaluation"][env]["rules"]
      ctx.writer.log(step, **{f"regret/{env}/{k}": v[str(max(config.budgets))]["mean"] for k, v in rules_.items()})
    else:
      res["scale_check"] = scale_check(config)
    progress.label = f"[varde_backups stage {step + 1}/{steps}] "
    progress.update(step + 1)
    ctx.save(step + 1, {"stage": np.asarray(step + 1, np.int32)}, res, force=step + 1 == steps)
  res.update(experiment="varde_backups", envs=list(config.envs), budgets=list(config.budgets),
             backups=list(config.backups), tune_budget=config.tune_budget,
             default={"backup": config.search.backup, "tau": config.search.tau,
                      "tau_scale": config.search.tau_scale, "floor_c": config.search.floor_c},
             grid={"taus": list(config.taus), "tau_scales": list(config.tau_scales), "floors": list(config.floors),
                   "uct_cs": list(config.uct_cs)},
             wall_time_s=time.perf_counter() - start)
  return res


EXPERIMENT = Experiment(
    declaration=backups_config.SECTIONS,
    get_config=backups_config.get_config,
    run=run,
    summary=backups_report.summary,
    markdown=backups_report.markdown,
    headline=backups_report.headline,
)
