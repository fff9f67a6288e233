"""VarDE BPI's forced-exploration floor: the guarantee, against an adversarial rule and in real runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import mdps
from methods.varde import bpi


@pytest.mark.parametrize("c", [0.25, 0.5, 1.0])
@pytest.mark.parametrize("shape", [(6, 2), (10, 3)])
def test_floor_holds_at_every_step_against_a_rule_that_wants_one_pair(c, shape):
  """From zero counts, a rule that always asks for pair 0: ``min n_t >= n0(t) - 1`` for every ``t``."""
  steps = 6000

  def body(n, t):
    pair = bpi.floor_select(n, t, jnp.int32(0), c)
    n = n.reshape(-1).at[pair].add(1).reshape(n.shape)
    return n, (jnp.min(n), bpi.exploration_floor(t + 1, n.size, c))

  _, (min_n, n0) = jax.jit(lambda: jax.lax.scan(body, jnp.zeros(shape, jnp.int32), jnp.arange(steps)))()
  min_n, n0 = np.asarray(min_n), np.asarray(n0)
  assert (min_n >= n0 - 1).all()
  assert (min_n == n0 - 1).any()  # the bound is attained: it is not loose
  assert n0[-1] >= 3


def test_floor_guarantee_in_varde_runs_on_riverswim_and_none_without_it():
  mdp = mdps.riverswim(6, gamma=0.9, reward_std=0.5)
  keys = jax.random.split(jax.random.key(0), 32)
  budgets = (256, 1024)
  mins = {}
  for c in (1.0, 0.0):
    hp = bpi.BPIHparams(floor_c=c)

    @jax.jit
    def counts(budget, hp=hp):
      alg = bpi.make_algorithm("varde", hp, budget)
      return jax.vmap(lambda k: bpi.run_bpi(alg, mdp, k, budget=budget, hp=hp).counts)(keys)

    mins[c] = {b: np.asarray(counts(jnp.int32(b))).reshape(len(keys), -1).min(-1) for b in budgets}
  for b in budgets:
    n0 = int(bpi.exploration_floor(b, 12, 1.0))
    assert (mins[1.0][b] >= n0 - 1).all(), (b, n0, mins[1.0][b])
  # Without the floor, occupancy weighting leaves pairs below it.
  assert (mins[0.0][1024] < int(bpi.exploration_floor(1024, 12, 1.0)) - 1).mean() > 0.5


def test_floor_constant_is_validated():
  with pytest.raises(ValueError, match="floor_c"):
    bpi.BPIHparams(floor_c=1.5)
