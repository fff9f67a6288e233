"""VarDE tree search against ``mctx.gumbel_muzero_policy``: simulations per second.

Same environment (a batch of random SyntheticTrees, ``k = 4``, depth 4, leaf
returns with ``sigma = 1``), same batch, same simulation budget, same leaf
value (one random rollout to the horizon) and the same simulator inside
mctx's ``recurrent_fn`` (``methods/varde/mctx_adapter.py``). This project's
search also keeps each edge's second moment and re-samples every chance
outcome. Both sides are timed in alternating rounds
(``timing.timed_together``), so a slow spell of the machine falls on both.
Compile time is excluded (reported separately); the root simple regret of
both at that budget is in the notes (mean and standard error over the batch,
exact values by dynamic programming). VarDE runs with its default
hyperparameters (``methods.varde.mcts.MCTSHparams``).

A last row (``launch.bench.varde_2048``) plays 2048 with VarDE's search and
with ``mctx.stochastic_muzero_policy`` on the same simulator, leaf value and
budget: simulations per second and the score reached, side by side.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from envs import trees
from launch import mesh as mesh_lib
from launch.bench import timing
from launch.bench import varde_2048
from launch.experiments.varde import mcts as varde_mcts
from launch.experiments.varde import search as varde_search
from methods.varde import mcts
from methods.varde import mctx_adapter


def run(quick: bool) -> list[dict]:
  batch, sims, depth = (64, 64, 4) if quick else (256, 256, 4)
  env = jax.vmap(lambda k: trees.synthetic_tree(k, 4, depth, sigma=1.0))(jax.random.split(jax.random.key(0), batch))
  roots = jnp.zeros((batch,), jnp.int32)
  regret = jax.jit(jax.vmap(functools.partial(varde_search.root_regret, horizon=depth)))
  rows = []
  policies = (("VarDE", mcts.make_policy("varde", mcts.MCTSHparams())), ("UCT", mcts.uct_policy(c=1.0)))
  for ours_name, policy in policies[:1] if quick else policies:
    ours = jax.jit(lambda e, r, k, p=policy: mcts.search(e, r, k, policy=p, num_simulations=sims, horizon=depth).action)
    theirs = jax.jit(lambda e, r, k: mctx_adapter.mctx_search(e, r, k, policy="mctx_gumbel", num_simulations=sims,
                                                               horizon=depth)[0])
    args = (env, roots, jax.random.key(1))
    t_o, t_t = timing.timed_together([(ours, args), (theirs, args)])
    r_o, r_t = np.asarray(regret(env, action=t_o.output)), np.asarray(regret(env, action=t_t.output))
    rate_o, rate_t = batch * sims / t_o.warm, batch * sims / t_t.warm
    se = lambda x: x.std() / math.sqrt(len(x))  # noqa: E731
    print(f"{ours_name}: {rate_o:.0f} sims/s vs mctx gumbel {rate_t:.0f} sims/s", flush=True)
    rows.append({
        "benchmark": f"tree search, {ours_name} vs Gumbel MuZero (SyntheticTree k=4 d={depth}, batch {batch}, {sims} sims)",
        "ours": rate_o,
        "peer": rate_t,
        "unit": "sims/s",
        "peer_name": "mctx.gumbel_muzero_policy (same simulator)",
        "ratio": rate_o / rate_t,
        "notes": (
            f"{mesh_lib.describe_devices()}; compile {t_o.compile_seconds:.1f}s / {t_t.compile_seconds:.1f}s excluded; "
            f"root regret {r_o.mean():.3f} ± {se(r_o):.3f} ({ours_name}, with second moments) vs "
            f"{r_t.mean():.3f} ± {se(r_t):.3f} (mctx)"
        ),
    })
  return rows + varde_2048.run(quick)
