"""Networks of the offline RL agents: MLPs, twin critics, value and actor.

All networks follow implicit_q_learning / JAX-CORL: ReLU MLPs with an optional
LayerNorm after each hidden layer (JAX-CORL's choice), a twin critic
``Q1, Q2: (s, a) -> R`` evaluated with a vmapped parameter axis, a state value
``V: s -> R`` and a Gaussian actor with a tanh-squashed mean and a
state-independent log standard deviation (IQL's actor). TD3+BC's deterministic
policy is the same actor's mean ``tanh(mu(s))``.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class MLP(nn.Module):
  """ReLU MLP ``[..., D_in] -> [..., D_out]`` (LayerNorm after each hidden layer if asked)."""

  hidden: Sequence[int]
  out_dim: int
  layer_norm: bool = False

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    for width in self.hidden:
      x = nn.Dense(width, kernel_init=nn.initializers.variance_scaling(2.0, "fan_avg", "uniform"))(x)
      if self.layer_norm:
        x = nn.LayerNorm()(x)
      x = nn.relu(x)
    return nn.Dense(self.out_dim, kernel_init=nn.initializers.variance_scaling(1e-2, "fan_avg", "uniform"))(x)


class ValueNet(nn.Module):
  """``V(s)``: ``[..., S] -> [...]``."""

  hidden: Sequence[int]
  layer_norm: bool = False

  @nn.compact
  def __call__(self, obs: jax.Array) -> jax.Array:
    return MLP(self.hidden, 1, self.layer_norm)(obs)[..., 0]


class TwinCritic(nn.Module):
  """``(Q1(s, a), Q2(s, a))``: ``[..., S], [..., A] -> [2, ...]`` (ensemble axis first)."""

  hidden: Sequence[int]
  layer_norm: bool = False
  num_qs: int = 2

  @nn.compact
  def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
    ensemble = nn.vmap(
        MLP,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=None,
        out_axes=0,
        axis_size=self.num_qs,
    )
    x = jnp.concatenate([obs, action], axis=-1)
    return ensemble(self.hidden, 1, self.layer_norm)(x)[..., 0]


class GaussianActor(nn.Module):
  """``pi(a | s) = N(tanh(mu(s)), diag(exp(log_std)^2))``; returns ``(mean [..., A], log_std [..., A])``.

  IQL's actor (ikostrikov/implicit_q_learning, ``policy.NormalTanhPolicy`` with
  ``tanh_squash_distribution=False``): the mean is squashed, the sample is not;
  evaluation acts with the mean.
  """

  hidden: Sequence[int]
  action_dim: int
  layer_norm: bool = False

  @nn.compact
  def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    mean = jnp.tanh(MLP(self.hidden, self.action_dim, self.layer_norm)(obs))
    log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
    return mean, jnp.broadcast_to(jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX), mean.shape)


def gaussian_log_prob(mean: jax.Array, log_std: jax.Array, action: jax.Array) -> jax.Array:
  """``log N(action; mean, diag(exp(2 log_std)))`` summed over the action axis: ``[..., A] -> [...]``."""
  z = (action - mean) * jnp.exp(-log_std)
  return jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)
