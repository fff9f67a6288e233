r"""VarDE tree search: which backup, which temperature scale (the measurement behind the defaults).

  python -m launch.bench.varde_backup_ablation --out=runs/varde_backup_ablation [--quick]

Environments as in ``launch/configs/varde_mcts.py``'s defaults: SyntheticTrees
(``k = 4``, depth 4, leaf noise ``sigma`` 0.5 and 2), the 3x3 slippery
gridworld (horizon 8, goal reward noise 0.5) and random MDPs (10 states, 3
actions, horizon 4, reward noise 1, ``gamma = 0.9``). Metric: root simple
regret ``V*(s0) - Q*(s0, a_hat)`` by dynamic programming.

1. **Tuning** (instances of seed 1): for every backup, the value scale,
   the temperature ``tau`` and the forced-exploration constant ``floor_c``
   from a grid; for UCT, ``c`` from a grid; VarDE's chosen per backup (one
   setting for all environments, among the scale-free ``tau_scale`` values;
   the best ``tau`` in value units is kept for the mean backup as a
   reference), UCT's per environment (``c`` is in value units), by the mean
   over environments of the regret relative to the best UCT, at 256
   simulations.
2. **Evaluation** (fresh instances of seed 2, 64 instances x 4 runs; the
   gridworld is one instance, 256 runs): every backup at its chosen setting
   (and ``mean_value_units``) and UCT at its chosen ``c``, all on the same instances with the same search
   keys; paired differences to UCT with instance-clustered standard errors
   (the standard deviation of the per-instance mean differences over the
   square root of the number of instances; runs are the clusters on the
   gridworld).
3. **Scale check**: the best backup of stage 1 at its setting, and the same ``tau`` in value units
   (``tau_scale="none"``) on the gridworld and on a copy whose rewards are
   multiplied by 100 (regret divided by 100), same keys.

Everything is printed and written to ``--out``/``backup_ablation.json``.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from envs import mdps
from envs import trees
from methods.varde import mcts
from methods.varde import tree_rules as rules

FLAGS = flags.FLAGS
ENVS = ("tree_low_noise", "tree_high_noise", "gridworld", "random_mdp")
BUDGETS = (16, 64, 256)
TAUS = (0.3, 1.0, 3.0)
FLOORS = (0.0, 1.0)
UCT_CS = (0.25, 0.5, 1.0, 2.0, 4.0)
SCALE_FREE = ("return_std", "spread")


def make_env(name: str, reward_scale: float = 1.0):
  """``(instance_key -> TabularMDP, horizon, num_instances or None)``."""
  if name.startswith("tree"):
    sigma = 0.5 if name == "tree_low_noise" else 2.0
    make, horizon = (lambda k: trees.synthetic_tree(k, 4, 4, sigma)), 4
  elif name == "gridworld":
    grid = mdps.scale_rewards(mdps.gridworld(3, reward_std=0.5), reward_scale)
    return (lambda k: grid), 8, 1
  elif name == "random_mdp":
    make, horizon = (lambda k: mdps.random_mdp(k, 10, 3, gamma=0.9, reward_std=1.0)), 4
  else:
    raise ValueError(f"unknown environment {name!r}; allowed: {ENVS}")
  return make, horizon, None


def _policy(kind: str, backup: str, scale: str, param):
  """UCT with ``c = param[0]`` or VarDE with ``tau, floor_c = param`` (traced: one compilation for the grid)."""
  if kind == "uct":
    return rules.uct_policy(c=param[0])
  return rules.varde_policy(tau=param[0], backup=backup, tau_scale=scale, floor_c=param[1])


@functools.lru_cache(maxsize=None)
def regret_fn(env: str, kind: str, backup: str, scale: str):
  """Jitted ``(mdp [R], keys [R], param, budget, reward_scale) -> regret [R] / reward_scale``."""
  _, horizon, _ = make_env(env)

  def one(mdp, key, param, budget, reward_scale):
    policy = _policy(kind, backup, scale, param)
    action = mcts.search_one(mdp, mdp.s0, key, policy=policy, num_simulations=max(BUDGETS), horizon=horizon,
                             budget=budget)[0]
    q = mdps.finite_horizon_q(mdp, horizon)[horizon - 1, mdp.s0]
    return (jnp.max(q) - q[action]) / reward_scale

  return jax.jit(jax.vmap(one, in_axes=(0, 0, None, None, None)))


def runs(env: str, seed: int, num_instances: int, runs_per_instance: int, reward_scale: float = 1.0):
  """``(mdp [R], instance [R], keys [R])``: instances and search keys of one stage."""
  make, _, fixed = make_env(env, reward_scale)
  n_inst = fixed or num_instances
  n = num_instances * runs_per_instance
  inst = np.arange(n) // runs_per_instance % n_inst
  base = jax.random.fold_in(jax.random.key(seed), ENVS.index(env))
  mdp = jax.vmap(lambda j: make(jax.random.fold_in(base, j)))(jnp.asarray(inst))
  keys = jax.vmap(lambda j: jax.random.fold_in(jax.random.fold_in(base, 10_000), j))(jnp.arange(n))
  cluster = np.arange(n) if fixed else inst
  return mdp, cluster, keys


def clustered(x: np.ndarray, cluster: np.ndarray) -> tuple[float, float]:
  """Mean and instance-clustered standard error of ``x [R]`` (equal cluster sizes)."""
  means = np.array([x[cluster == c].mean() for c in np.unique(cluster)])
  return float(x.mean()), float(means.std(ddof=1) / math.sqrt(len(means)))


def _regrets(env, kind, backup, scale, param, data, budgets, reward_scale=1.0):
  mdp, _, keys = data
  fn = regret_fn(env, kind, backup, scale)
  param = jnp.asarray(param, jnp.float32).reshape(-1)[jnp.array([0, -1])]
  return {b: np.asarray(fn(mdp, keys, param, jnp.int32(b), jnp.float32(reward_scale))) for b in budgets}


def tune(num_instances, runs_per_instance):
  """Stage 1: the chosen ``(scale, tau, floor_c)`` per backup and ``c`` per environment."""
  data = {e: runs(e, 1, num_instances, runs_per_instance) for e in ENVS}
  uct = {e: {c: _regrets(e, "uct", "mean", "none", c, data[e], (256,))[256].mean() for c in UCT_CS} for e in ENVS}
  best_c = {e: min(uct[e], key=uct[e].get) for e in ENVS}
  print("UCT regret by c: " + "; ".join(f"{e} " + ", ".join(f"{c}: {v:.4f}" for c, v in uct[e].items())
                                        for e in ENVS), flush=True)
  table, chosen = {}, {}
  for backup in rules.BACKUPS:
    for scale in rules.TAU_SCALES:
      regrets = {e: {} for e in ENVS}
      for e in ENVS:
        for tau, floor in itertools.product(TAUS, FLOORS):
          regrets[e][(tau, floor)] = _regrets(e, "varde", backup, scale, (tau, floor), data[e], (256,))[256].mean()
      for tau, floor in itertools.product(TAUS, FLOORS):
        rel = [regrets[e][(tau, floor)] / uct[e][best_c[e]] for e in ENVS]
        table[f"{backup}/{scale}/{tau}/{floor}"] = float(np.mean(rel))
        print(f"tune {backup:13s} {scale:10s} tau={tau:<4} floor_c={floor:<4} regret/UCT {np.mean(rel):.3f} "
              f"({', '.join(f'{r:.2f}' for r in rel)})", flush=True)
    for units in ("scale_free", "value_units"):
      keys = [k for k in table if k.startswith(backup + "/") and (k.split("/")[1] in SCALE_FREE) == (units == "scale_free")]
      _, scale, tau, floor = min(keys, key=table.get).split("/")
      chosen[backup if units == "scale_free" else backup + "_value_units"] = (scale, float(tau), float(floor))
  return {"uct_regret": {e: {str(c): float(v) for c, v in uct[e].items()} for e in ENVS}, "uct_c": best_c,
          "varde_relative_regret": table, "chosen": chosen}


def evaluate(tuned, num_instances, runs_per_instance):
  """Stage 2: each backup against UCT on fresh instances, paired, clustered standard errors."""
  out = {}
  for e in ENVS:
    data = runs(e, 2, num_instances, runs_per_instance)
    cluster = data[1]
    base = _regrets(e, "uct", "mean", "none", tuned["uct_c"][e], data, BUDGETS)
    rows = {"uct": {b: clustered(base[b], cluster) for b in BUDGETS}}
    for name, (scale, tau, floor) in tuned["chosen"].items():
      if name.endswith("_value_units") and name != "mean_value_units":
        continue
      r = _regrets(e, "varde", name.replace("_value_units", ""), scale, (tau, floor), data, BUDGETS)
      rows[name] = {b: clustered(r[b], cluster) + clustered(r[b] - base[b], cluster) for b in BUDGETS}
    out[e] = {k: {str(b): v for b, v in d.items()} for k, d in rows.items()}
    print(f"\n{e} ({len(data[2])} runs, {len(np.unique(cluster))} clusters): regret (s.e.); VarDE - UCT (s.e.)")
    for k, d in rows.items():
      cells = [f"{v[0]:.4f} ({v[1]:.4f})" + (f"; {v[2]:+.4f} ({v[3]:.4f})" if len(v) > 2 else "") for v in d.values()]
      print(f"  {k:16s} " + " | ".join(cells), flush=True)
  return out


def scale_check(backup, scale, tau, floor, num_runs):
  """Stage 3: the gridworld and its rewards x100 copy, one ``tau``, same keys."""
  out = {}
  for sc in (scale, "none"):
    res = {}
    for factor in (1.0, 100.0):
      data = runs("gridworld", 3, num_runs, 1, reward_scale=factor)
      res[factor] = _regrets("gridworld", "varde", backup, sc, (tau, floor), data, BUDGETS, reward_scale=factor)
    cluster = np.arange(num_runs)
    out[sc] = {str(b): {"x1": clustered(res[1.0][b], cluster), "x100": clustered(res[100.0][b], cluster),
                        "diff": clustered(res[100.0][b] - res[1.0][b], cluster)} for b in BUDGETS}
    print(f"\nscale check, tau_scale={sc}, tau={tau}, floor_c={floor}, backup={backup}: gridworld regret x1 | "
          f"x100 / 100 | difference")
    for b, d in out[sc].items():
      print(f"  {b:>4} sims: {d['x1'][0]:.4f} ({d['x1'][1]:.4f}) | {d['x100'][0]:.4f} ({d['x100'][1]:.4f}) | "
            f"{d['diff'][0]:+.4f} ({d['diff'][1]:.4f})", flush=True)
  return out


def main(argv):
  del argv
  n_inst, per = (8, 2) if FLAGS.quick else (64, 4)
  t0 = time.time()
  tuned = tune(n_inst, per)
  print(f"\nchosen per backup: {tuned['chosen']}; UCT c per environment: {tuned['uct_c']}", flush=True)
  results = {"tuning": tuned, "evaluation": evaluate(tuned, n_inst, per)}
  winner = min(rules.BACKUPS, key=lambda b: tuned["varde_relative_regret"]["/".join(map(str, (b,) + tuned["chosen"][b]))])
  scale, tau, floor = tuned["chosen"][winner]
  print(f"\nbest backup on the tuning instances: {winner} ({scale}, tau={tau}, floor_c={floor})", flush=True)
  results["winner"] = [winner, scale, tau, floor]
  results["scale_check"] = scale_check(winner, scale, tau, floor, n_inst * per)
  results["seconds"] = time.time() - t0
  os.makedirs(FLAGS.out, exist_ok=True)
  with open(os.path.join(FLAGS.out, "backup_ablation.json"), "w") as f:
    json.dump(results, f, indent=1)
  print(f"\n{results['seconds']:.0f} s; written to {FLAGS.out}/backup_ablation.json")


if __name__ == "__main__":
  flags.DEFINE_string("out", "runs/varde_backup_ablation", "Output directory.")
  flags.DEFINE_bool("quick", False, "8 instances x 2 runs (a smoke test of the script).")
  app.run(main)
