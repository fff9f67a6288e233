"""OPG: orthogonality on raw gradients, first-order invariance of the BC loss, ablation switches."""

import chex
import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import pytest

from methods import reg
from methods.reg import opg


def _setup(seed=0, n=256, obs_dim=5, act_dim=3, hidden=(64, 64)):
  hp = reg.Hparams(critic="reg", extraction="opg", hidden=hidden)
  state = reg.init(jax.random.key(seed), obs_dim, act_dim, hp=hp)
  k = jax.random.split(jax.random.key(seed + 1), 3)
  obs = jax.random.normal(k[0], (n, obs_dim))
  batch = reg.Batch(obs, jnp.tanh(jax.random.normal(k[1], (n, act_dim))), jnp.zeros(n), obs, jnp.zeros(n))
  # Make the critic informative: a few random critic parameters scaled up.
  critic = jax.tree.map(lambda x: 3.0 * x, state.critic)
  return hp, state._replace(critic=critic), batch, reg.make_nets(act_dim, hp)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_orthogonal_to_bc_gradient_on_raw_gradients(seed):
  hp, state, batch, nets = _setup(seed)
  g_pg, g_bc, _ = reg.opg_gradients(state.actor, state.critic, batch, nets, hp, jax.random.key(9))
  perp, _ = reg.orthogonal_component(g_pg, g_bc, projection="flat")
  a, _ = ravel_pytree(perp)
  b, _ = ravel_pytree(g_bc)
  p, _ = ravel_pytree(g_pg)
  cos = float(jnp.vdot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b)))
  assert abs(cos) < 1e-5, cos
  assert abs(float(jnp.vdot(p, b) / (jnp.linalg.norm(p) * jnp.linalg.norm(b)))) > 1e-3  # the raw ones are not
  _, info = reg.opg_combine(g_pg, g_bc, eta=1.0)
  assert abs(float(info.cos_perp_bc)) < 1e-5


def test_orthogonal_even_when_gradients_nearly_align():
  g_bc = jax.random.normal(jax.random.key(0), (10_000,))
  g_pg = 3.0 * g_bc + 1e-3 * jax.random.normal(jax.random.key(1), (10_000,))
  perp = opg.project_out(g_pg, g_bc)
  assert abs(float(opg._cos(perp, g_bc))) < 1e-5  # pylint: disable=protected-access


def test_per_layer_projection_is_orthogonal_in_every_block():
  hp, state, batch, nets = _setup(3)
  g_pg, g_bc, _ = reg.opg_gradients(state.actor, state.critic, batch, nets, hp, jax.random.key(9))
  perp, conflict = reg.orthogonal_component(g_pg, g_bc, projection="layer")
  blocks = opg._layer_blocks(g_pg)  # pylint: disable=protected-access
  assert len(blocks) == 4  # three Dense layers and the log-std
  lp, lb = jax.tree.leaves(perp), jax.tree.leaves(g_bc)
  for idx in blocks.values():
    a = jnp.concatenate([lp[i].ravel() for i in idx])
    b = jnp.concatenate([lb[i].ravel() for i in idx])
    denom = jnp.linalg.norm(a) * jnp.linalg.norm(b)
    if float(denom) > 0:
      assert abs(float(jnp.vdot(a, b) / denom)) < 1e-5
  assert 0.0 <= float(conflict) <= 1.0


def test_tiny_pure_orthogonal_step_leaves_bc_loss_unchanged_to_first_order():
  """BC(phi - eps g_perp) - BC(phi) = O(eps^2), while a raw policy-gradient step changes it at O(eps)."""
  with jax.enable_x64(True):
    hp, state, batch, nets = _setup(4)
    to64 = lambda t: jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), t)  # noqa: E731
    actor, critic, batch = to64(state.actor), to64(state.critic), to64(batch)
    g_pg, g_bc, bc0 = reg.opg_gradients(actor, critic, batch, nets, hp, jax.random.key(9))
    _, info = reg.opg_combine(g_pg, g_bc, eta=1.0)
    g, _ = reg.opg_combine(g_pg, g_bc, eta=1.0, direction="perp")
    unit = lambda t: jax.tree.map(lambda x: x / jnp.linalg.norm(ravel_pytree(t)[0]), t)  # noqa: E731
    g, g_pg = unit(g), unit(g_pg)
    bc = lambda params: reg.rules.bc_loss(params, batch, nets)  # noqa: E731
    step = lambda d, eps: jax.tree.map(lambda p, x: p - eps * x, actor, d)  # noqa: E731
    d_perp = [abs(float(bc(step(g, eps)) - bc0)) for eps in (1e-4, 5e-5)]
    d_pg = abs(float(bc(step(g_pg, 1e-4)) - bc0))
    assert abs(float(info.cos_pg_bc)) > 0.05
    assert d_perp[0] < 1e-2 * d_pg, (d_perp, d_pg)
    # Second order: halving the step divides the change by about 4 (not 2).
    assert 3.0 < d_perp[0] / d_perp[1] < 5.0, d_perp


def test_ablation_switches():
  hp, state, batch, nets = _setup(5)
  g_pg, g_bc, _ = reg.opg_gradients(state.actor, state.critic, batch, nets, hp, jax.random.key(9))
  perp, _ = reg.orthogonal_component(g_pg, g_bc)
  eta = 0.7
  close = lambda a, b: chex.assert_trees_all_close(a, b, rtol=1e-5, atol=1e-7)  # noqa: E731
  close(reg.opg_combine(g_pg, g_bc, eta=eta)[0], jax.tree.map(lambda b, p: b + eta * p, g_bc, perp))
  close(reg.opg_combine(g_pg, g_bc, eta=eta, direction="perp")[0], jax.tree.map(lambda p: eta * p, perp))
  close(reg.opg_combine(g_pg, g_bc, eta=eta, direction="bc")[0], g_bc)
  close(reg.opg_combine(g_pg, g_bc, eta=eta, projection="none")[0], jax.tree.map(lambda b, p: b + eta * p, g_bc, g_pg))
  # Conflict only: an aligned policy gradient is left alone, an opposed one projected.
  aligned = jax.tree.map(lambda b: 2.0 * b, g_bc)
  close(reg.orthogonal_component(aligned, g_bc, conflict_only=True)[0], aligned)
  opposed = jax.tree.map(lambda b, p: p - 5.0 * b, g_bc, g_pg)
  out, conflict = reg.orthogonal_component(opposed, g_bc, conflict_only=True)
  assert float(conflict) == 1.0
  assert abs(float(opg._cos(ravel_pytree(out)[0], ravel_pytree(g_bc)[0]))) < 1e-5  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="projection"):
    reg.orthogonal_component(g_pg, g_bc, projection="diagonal")
  with pytest.raises(ValueError, match="direction"):
    reg.opg_combine(g_pg, g_bc, eta=1.0, direction="sideways")
