"""The shared agent: shapes (chex), no recompiles across chunks, vmapped seeds, hparams validation."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods import reg

S, A, N = 4, 2, 300


def _data(seed=0):
  k = jax.random.split(jax.random.key(seed), 4)
  return reg.Batch(jax.random.normal(k[0], (N, S)), jnp.tanh(jax.random.normal(k[1], (N, A))),
                   jax.random.normal(k[2], (N,)), jax.random.normal(k[3], (N, S)), jnp.zeros(N))


def test_state_and_action_shapes():
  hp = reg.Hparams(hidden=(16, 8))
  state = reg.init(jax.random.key(0), S, A, hp=hp)
  chex.assert_shape(state.actor["params"]["MLP_0"]["Dense_0"]["kernel"], (S, 16))
  chex.assert_shape(state.actor["params"]["log_std"], (A,))
  chex.assert_shape(state.critic["params"]["VmapMLP_0"]["Dense_0"]["kernel"], (2, S + A, 16))  # twin Q
  chex.assert_shape(state.value["params"]["MLP_0"]["Dense_2"]["kernel"], (8, 1))
  chex.assert_shape(state.key, (2,))
  chex.assert_trees_all_equal(state.critic, state.critic_target)
  nets = reg.make_nets(A, hp)
  obs = jnp.zeros((7, S))
  chex.assert_shape(reg.act(state.actor, obs, action_dim=A, hp=hp), (7, A))
  chex.assert_shape(nets.critic.apply(state.critic, obs, jnp.zeros((7, A))), (2, 7))
  chex.assert_shape(nets.value.apply(state.value, obs), (7,))
  mean, log_std = nets.actor.apply(state.actor, obs)
  chex.assert_equal_shape([mean, log_std])
  assert float(jnp.max(jnp.abs(mean))) <= 1.0


@pytest.mark.parametrize("algorithm", sorted(reg.ALGORITHMS))
def test_every_algorithm_updates_and_keeps_shapes(algorithm):
  hp = reg.Hparams(hidden=(8, 8), batch_size=16, **reg.ALGORITHMS[algorithm])
  state = reg.init(jax.random.key(0), S, A, hp=hp)
  new, metrics = jax.jit(functools.partial(reg.train_chunk, num_updates=3, hp=hp))(state, _data())
  chex.assert_trees_all_equal_shapes_and_dtypes(state, new)
  assert int(new.step) == 3
  for k, v in metrics.items():
    chex.assert_rank(v, 0)
    assert np.isfinite(float(v)), k
  changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool(jnp.any(a != b)), state.actor, new.actor))
  assert any(changed)


def test_no_recompiles_across_chunks_and_buffer_sizes():
  hp = reg.Hparams(hidden=(8,), batch_size=16)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def chunk(state, data, size):
    return reg.train_chunk(state, data, size, num_updates=2, hp=hp)

  state = reg.init(jax.random.key(0), S, A, hp=hp)
  data = _data()
  for size in (50, 120, 300):  # a filling replay buffer: same shapes, traced size
    state, _ = chunk(state, data, jnp.int32(size))
  assert int(state.step) == 6


def test_vmapped_seeds_are_independent_and_match_single_runs():
  hp = reg.Hparams(hidden=(8,), batch_size=16)
  keys = jax.random.split(jax.random.key(0), 3)
  states = jax.vmap(functools.partial(reg.init, obs_dim=S, action_dim=A, hp=hp))(keys)
  chex.assert_shape(states.step, (3,))
  out, metrics = jax.jit(jax.vmap(functools.partial(reg.train_chunk, num_updates=4, hp=hp), in_axes=(0, None)))(
      states, _data())
  chex.assert_shape(metrics["critic_loss"], (3,))
  single, _ = jax.jit(functools.partial(reg.train_chunk, num_updates=4, hp=hp))(
      reg.init(keys[1], S, A, hp=hp), _data())
  chex.assert_trees_all_close(jax.tree.map(lambda x: x[1], out.actor), single.actor, rtol=1e-5, atol=1e-6)
  a0 = jax.tree.leaves(jax.tree.map(lambda x: x[0], out.actor))
  a1 = jax.tree.leaves(jax.tree.map(lambda x: x[1], out.actor))
  assert any(bool(jnp.any(x != y)) for x, y in zip(a0, a1))


def test_sampling_respects_the_buffer_size():
  data = _data()
  batch = reg.sample_batch(data, jax.random.key(0), 1000, 10)
  rows = {tuple(np.asarray(r)) for r in batch.observations}
  assert rows <= {tuple(np.asarray(r)) for r in data.observations[:10]}


@pytest.mark.parametrize("kwargs,match", [
    (dict(critic="cql"), "critic"),
    (dict(extraction="awr", critic="td3"), "awr"),
    (dict(critic="none", extraction="opg"), "opg"),
    (dict(extraction="td3bc", critic="iql"), "td3"),
    (dict(reg_ambiguity="kappa", reg_regularizer="kl"), "kappa"),
    (dict(opg_projection="diag"), "opg_projection"),
    (dict(expectile=1.0), "expectile"),
])
def test_invalid_hparams_are_named(kwargs, match):
  with pytest.raises(ValueError, match=match):
    reg.Hparams(**kwargs)
