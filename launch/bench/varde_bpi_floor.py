r"""VarDE best-policy identification with and without its forced-exploration floor.

  python -m launch.bench.varde_bpi_floor --out=runs/varde_bpi_floor [--quick]

Environments as in ``launch/configs/varde_bpi.py``'s defaults -- RiverSwim (6
states, reward noise 0.5, ``gamma = 0.9``; 128 runs), Garnet MDPs (10 states, 3
actions, 3 successors, ``gamma = 0.9``, reward stds ``U[0.1, 2]``, Gaussian or
Student-t with 3 degrees of freedom; 32 instances x 4 runs) -- and the 3x3
slippery gridworld (goal reward noise 0.5, ``gamma = 0.95``; 128 runs). VarDE
with ``floor_c`` in ``{0, 0.5, 1}`` (``bpi.BPIHparams``; 0 is no floor),
uniform sampling and MDP-GapE, all on the same instances with the same keys;
regret ``V*(s0) - V^pi(s0)`` by dynamic programming. Printed: mean regret
(instance-clustered s.e.) and the paired difference to VarDE without the
floor (clustered s.e.); written to ``--out``/``bpi_floor.json``.
"""

from __future__ import annotations

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
from methods.varde import bpi

FLAGS = flags.FLAGS
ENVS = ("riverswim", "gridworld", "garnet_high_variance", "garnet_heavy_tailed")
VARIANTS = (("varde", 0.0), ("varde", 0.5), ("varde", 1.0), ("uniform", 0.0), ("mdp_gape", 0.0))


def make_env(name: str):
  """``(instance_key -> TabularMDP, fixed)``."""
  if name == "riverswim":
    river = mdps.riverswim(6, gamma=0.9, reward_std=0.5)
    return (lambda k: river), True
  if name == "gridworld":
    grid = mdps.gridworld(3, reward_std=0.5, gamma=0.95)
    return (lambda k: grid), True
  df = 3.0 if name == "garnet_heavy_tailed" else math.inf
  return (lambda k: mdps.garnet(k, 10, 3, 3, gamma=0.9, reward_std=(0.1, 2.0), df=df)), False


def clustered(x: np.ndarray, cluster: np.ndarray) -> tuple[float, float]:
  """Mean and instance-clustered standard error (equal cluster sizes)."""
  means = np.array([x[cluster == c].mean() for c in np.unique(cluster)])
  return float(x.mean()), float(means.std(ddof=1) / math.sqrt(len(means)))


def regrets(env: str, algorithm: str, floor_c: float, budgets, num_instances: int, runs_per_instance: int):
  """``({budget: regret [R]}, cluster [R])`` on the instances and keys shared by every variant."""
  make, fixed = make_env(env)
  n = num_instances * runs_per_instance
  inst = np.arange(n) // runs_per_instance
  base = jax.random.fold_in(jax.random.key(0), ENVS.index(env))
  mdp = jax.vmap(lambda j: make(jax.random.fold_in(base, j)))(jnp.asarray(0 * inst if fixed else inst))
  hp = bpi.BPIHparams(floor_c=floor_c)

  @jax.jit
  def fn(budget):
    alg = bpi.make_algorithm(algorithm, hp, budget)
    keys = jax.vmap(lambda j: jax.random.fold_in(jax.random.fold_in(base, 10_000 + budget), j))(jnp.arange(n))
    one = lambda m, k: bpi.policy_regret(m, bpi.run_bpi(alg, m, k, budget=budget, hp=hp).policy)  # noqa: E731
    return jax.vmap(one)(mdp, keys)

  out = {b: np.asarray(fn(jnp.int32(b))) for b in budgets}
  return out, (np.arange(n) if fixed else inst)


def main(argv):
  del argv
  budgets = (256, 1024) if FLAGS.quick else (256, 1024, 4096)
  t0 = time.time()
  results = {}
  for env in ENVS:
    _, fixed = make_env(env)
    n_inst, per = ((32, 1) if fixed else (8, 4)) if FLAGS.quick else ((128, 1) if fixed else (32, 4))
    res = {}
    for alg, c in VARIANTS:
      res[f"{alg}" + (f"_floor{c}" if alg == "varde" else "")], cluster = regrets(env, alg, c, budgets, n_inst, per)
    ref = res["varde_floor0.0"]
    results[env] = {
        name: {str(b): clustered(r[b], cluster) + clustered(r[b] - ref[b], cluster) for b in budgets}
        for name, r in res.items()
    }
    print(f"\n{env} ({len(cluster)} runs, {len(np.unique(cluster))} clusters): regret (s.e.); "
          f"difference to varde_floor0.0 (s.e.), by samples {budgets}", flush=True)
    for name, d in results[env].items():
      print(f"  {name:16s} " + " | ".join(f"{v[0]:.4f} ({v[1]:.4f}); {v[2]:+.4f} ({v[3]:.4f})" for v in d.values()),
            flush=True)
  results["seconds"] = time.time() - t0
  os.makedirs(FLAGS.out, exist_ok=True)
  with open(os.path.join(FLAGS.out, "bpi_floor.json"), "w") as f:
    json.dump(results, f, indent=1)
  print(f"\n{results['seconds']:.0f} s; written to {FLAGS.out}/bpi_floor.json")


if __name__ == "__main__":
  flags.DEFINE_string("out", "runs/varde_bpi_floor", "Output directory.")
  flags.DEFINE_bool("quick", False, "Fewer runs and budgets (a smoke test of the script).")
  app.run(main)
