"""Small tabular MDPs with known answers, shared by the tree-search tests."""

import jax
import jax.numpy as jnp
import numpy as np

from envs import mdps


def batch(mdp, b: int):
  """``b`` copies of ``mdp`` along a new leading axis."""
  return jax.tree.map(lambda x: jnp.broadcast_to(x, (b,) + x.shape), mdp)


def coin(b: int):
  """``b`` copies of a one-coin MDP: s0 --a0--> s1 (p = 1/2, then reward 1) or s2 (p = 1/2, then reward 0);
  a1 pays 0.4 and ends the episode. Root value 1/2 (action a0)."""
  p = np.zeros((4, 2, 4))
  p[0, 0, 1] = p[0, 0, 2] = 0.5
  p[0, 1, 3] = 1.0
  p[1:, :, 3] = 1.0
  rm = np.zeros((4, 2))
  rm[0, 1], rm[1, :] = 0.4, 1.0
  return batch(mdps.from_dense(p, rm, 0.0, 1.0, terminal=np.array([False, False, False, True])), b)
