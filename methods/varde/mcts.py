"""Monte Carlo tree search in stochastic environments: VarDE and its baselines.

Luong, Nguyen, Ta, Tran and Dam, "Variance Driven Exploration", ICML 2026,
Section 4. The paper's tree-search rule is not public: this is a
**reconstruction** from its principle (allocate simulations so as to minimise
the variance of the root decision). The pieces:

* :mod:`methods.varde.tree_rules`: VarDE's descent
  ``argmax_a w_a^2 sigma_hat_a^2 / (n_a (n_a + 1))``, the four backups
  (``mean``, ``max``, ``softmax_mean``, ``logsumexp``) with their decision
  functions and influence weights ``w`` (derived there), the scale-free
  temperature, and the baselines UCT, MENTS and Power-UCT;
* :mod:`methods.varde.tree_search`: the batched search over any simulator
  given as an mctx-style decision step plus a chance step;
* this module: the hyperparameters (:class:`MCTSHparams`, one declaration),
  :func:`make_policy`, and the tabular front end -- :func:`tabular_simulator`
  makes a :class:`~envs.mdps.TabularMDP` one instance of the simulator
  interface, and :func:`search` / :func:`search_one` search it.

The default backup, temperature and value scale were chosen by measurement
(the experiment ``varde_backups``, ``launch/configs/varde_backups.py``; its
tables are in ``docs/varde.md``).
"""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np

from envs import mdps
from methods.common import hparams
from methods.varde import tree_rules as rules
from methods.varde import tree_search
from methods.varde.tree_rules import BACKUPS  # noqa: F401  (re-exported)
from methods.varde.tree_rules import NodeView  # noqa: F401
from methods.varde.tree_rules import TAU_SCALES  # noqa: F401
from methods.varde.tree_rules import TreePolicy  # noqa: F401
from methods.varde.tree_rules import ments_policy
from methods.varde.tree_rules import power_uct_policy
from methods.varde.tree_rules import uct_policy
from methods.varde.tree_rules import varde_policy
from methods.varde.tree_search import SearchOutput  # noqa: F401
from methods.varde.tree_search import Tree  # noqa: F401

LEAF_VALUES = ("rollout", "zero")
POLICIES = ("varde", "uct", "ments", "power_uct")


@dataclasses.dataclass(frozen=True)
class MCTSHparams(hparams.Hyperparameters):
  """Tree-policy hyperparameters (Luong et al., 2026, Section 4; baselines' papers)."""

  backup: str = hparams.field(rules.DEFAULT_BACKUP, "VarDE's decision-node backup (its weights w follow).",
                              choices=rules.BACKUPS)
  tau: float = hparams.field(rules.DEFAULT_TAU, "VarDE's temperature, relative to the node's value scale (tau_scale).",
                             low=0, low_open=True)
  tau_scale: str = hparams.field(rules.DEFAULT_TAU_SCALE, "VarDE's value scale: return std, Q spread or none (value units).",
                                 choices=rules.TAU_SCALES)
  var_floor: float = hparams.field(0.01, "Floor on VarDE's edge variances, relative to scale^2.", low=0)
  floor_c: float = hparams.field(rules.DEFAULT_FLOOR_C, "VarDE's forced exploration: each edge >= floor(c sqrt(N / A)) visits (0: off).",
                                 low=0)
  uct_c: float = hparams.field(1.0, "Exploration constant c of UCT and Power-UCT (value units).", low=0)
  ments_tau: float = hparams.field(0.3, "Temperature of MENTS (value units, as in its paper).", low=0, low_open=True)
  ments_eps: float = hparams.field(0.1, "E2W exploration epsilon of MENTS.", low=0, low_open=True)
  power_p: float = hparams.field(2.0, "Power-mean exponent p of Power-UCT.", low=1)
  leaf_value: str = hparams.field("rollout", "Value of a new node: a random rollout or zero.", choices=LEAF_VALUES)


def make_policy(name: str, hp: MCTSHparams) -> rules.TreePolicy:
  """One of :data:`POLICIES` with hyperparameters ``hp``."""
  if name == "varde":
    return varde_policy(tau=hp.tau, var_floor=hp.var_floor, backup=hp.backup, tau_scale=hp.tau_scale,
                        floor_c=hp.floor_c)
  if name == "uct":
    return uct_policy(c=hp.uct_c)
  if name == "ments":
    return ments_policy(tau=hp.ments_tau, eps=hp.ments_eps)
  if name == "power_uct":
    return power_uct_policy(c=hp.uct_c, p=hp.power_p)
  raise ValueError(f"unknown tree policy {name!r}; allowed: {POLICIES}")


def tabular_simulator(mdp_like: mdps.TabularMDP, *, horizon: int, leaf_value: str = "rollout") -> tree_search.Simulator:
  """A :class:`~envs.mdps.TabularMDP` as a :class:`~methods.varde.tree_search.Simulator`.

  ``params`` is the MDP and an embedding its int32 state; the afterstate is
  ``(state, action)``; the decision step samples the reward
  (:func:`envs.mdps.decision_step`), the chance step the successor
  (:func:`envs.mdps.chance_step`; its outcome is the successor's index in
  ``succ[s, a]``); the leaf value is one uniformly random rollout of
  ``steps_left`` steps (``rollout``) or 0 (``zero``). With the search's key
  convention this reproduces :func:`envs.mdps.step` call for call.

  Args:
    mdp_like: any MDP of the right shape (only its static sizes are read).
    horizon: static maximum rollout length.
    leaf_value: ``"rollout"`` or ``"zero"``.
  """
  if leaf_value not in LEAF_VALUES:
    raise ValueError(f"leaf_value={leaf_value!r}; allowed: {LEAF_VALUES}")

  def decision_fn(mdp, key, action, state):
    out = tree_search.DecisionOutput(mdps.decision_step(mdp, key, state, action), mdp.gamma)
    return out, (state, action)

  def value_fn(mdp, key, state, steps_left):
    if leaf_value == "zero":
      return jnp.float32(0.0)
    return mdps.rollout(mdp, key, state, steps_left, horizon)

  return tree_search.Simulator(
      decision_fn=decision_fn,
      chance_fn=tree_search.chance_from_logits(lambda m, sa: mdps.chance_logits(m, *sa),
                                               lambda m, o, sa: mdps.chance_apply(m, sa[0], sa[1], o)),
      value_fn=value_fn,
      terminal_fn=lambda mdp, state: mdp.terminal[state],
      legal_fn=None,
      num_actions=mdp_like.num_actions,
      num_outcomes=mdp_like.num_outcomes,
      chance_logits_fn=lambda m, sa: mdps.chance_logits(m, *sa),
      chance_apply_fn=lambda m, o, sa: mdps.chance_apply(m, sa[0], sa[1], o),
  )


def search_one(
    mdp: mdps.TabularMDP, root_state: jax.Array, key: jax.Array, *, policy: rules.TreePolicy,
    num_simulations: int, horizon: int, leaf_value: str = "rollout", budget: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, tree_search.Tree]:
  """Unbatched search of a tabular MDP from ``root_state``; see :func:`search`.

  ``budget`` (traced, at most ``num_simulations``) runs fewer simulations in
  a tree sized for ``num_simulations``: one compilation serves every budget.
  """
  sim = tabular_simulator(mdp, horizon=horizon, leaf_value=leaf_value)
  return tree_search.search_one(sim, mdp, root_state, key, policy=policy, num_simulations=num_simulations,
                                horizon=horizon, budget=budget)


def _check_roots(root_state: jax.Array, num_states: int) -> None:
  """Concrete root states are int states of the MDP (a gather would clamp one past the end to the last state)."""
  if isinstance(root_state, jax.core.Tracer):
    return
  roots = np.asarray(root_state)
  if not np.issubdtype(roots.dtype, np.integer):
    raise ValueError(f"root_state has dtype {roots.dtype}; the roots are int32 state indices")
  bad = np.flatnonzero((roots < 0) | (roots >= num_states))
  if bad.size:
    raise ValueError(f"root_state[{bad[0]}] = {roots[bad[0]]} is not a state of the MDP (states 0..{num_states - 1}); "
                     f"{bad.size} of {roots.size} roots are out of range")


def search(
    mdp: mdps.TabularMDP, root_state: jax.Array, key: jax.Array, *, policy: rules.TreePolicy,
    num_simulations: int, horizon: int, leaf_value: str = "rollout",
) -> tree_search.SearchOutput:
  """Batched tree search of tabular MDPs: ``B`` roots, ``num_simulations`` simulations each.

  Args:
    mdp: environments with a leading ``[B]`` axis on every array (one per
      root; broadcast a single one with ``jax.tree.map``).
    root_state: ``[B]`` int32 root states.
    key: randomness of the simulator calls, the rollouts and the policy.
    policy: the tree policy.
    num_simulations: static simulation budget per root.
    horizon: static search depth ``H`` (nodes at depth ``H`` are leaves with
      value 0; the exact values are those of the ``H``-step problem).
    leaf_value: ``"rollout"`` (one uniformly random rollout to the horizon)
      or ``"zero"``.

  Returns:
    The recommended actions, root estimates and visit counts, and the trees.

  Raises:
    ValueError: concrete ``root_state`` that is not int or holds a state
      outside ``[0, S)``, naming the first such root.
  """
  chex.assert_rank(root_state, 1)
  chex.assert_shape(key, ())
  batch = root_state.shape[0]
  chex.assert_shape(mdp.reward_mean, (batch, None, None))
  _check_roots(root_state, mdp.num_states)
  sim = tabular_simulator(mdp, horizon=horizon, leaf_value=leaf_value)
  return tree_search.search(sim, mdp, root_state, key, policy=policy, num_simulations=num_simulations,
                            horizon=horizon)

