"""Resumable minibatch Adam training shared by the autoencoder and the feature network.

A :class:`FitState` holds parameters, optimizer moments and the step count.
Step ``s`` draws its batch indices and any noise from ``fold_in(key, s)``, so
``n`` steps in one call and ``n / 2`` steps, a copy of the state and ``n / 2``
more give bit-identical states (one compiled program).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax


class FitState(NamedTuple):
  """Training state of a network fitted by :func:`fit_step` (checkpointed)."""

  params: dict  # network weights
  opt_state: tuple  # Adam moments and the schedule's count
  step: jax.Array  # [] int32, optimizer steps taken


def optimizer(learning_rate: float, steps: int) -> optax.GradientTransformation:
  """Adam with a cosine decay of the learning rate from ``learning_rate`` to 10% of it over ``steps``."""
  return optax.adam(optax.cosine_decay_schedule(learning_rate, steps, alpha=0.1))


def start(params: dict, learning_rate: float, steps: int) -> FitState:
  """The state before the first step."""
  return FitState(params, optimizer(learning_rate, steps).init(params), jnp.zeros((), jnp.int32))


# loss(params, batch_indices [B], key) -> (scalar loss, metrics dict of scalars)
LossFn = Callable[[dict, jax.Array, jax.Array], tuple[jax.Array, dict]]


def fit_step(state: FitState, loss: LossFn, num_rows: int | jax.Array, key: jax.Array, *, batch_size: int,
             learning_rate: float, steps: int) -> tuple[FitState, dict]:
  """One Adam step on ``batch_size`` rows drawn with replacement from ``[0, num_rows)``.

  Args:
    state: the training state.
    loss: ``loss(params, idx [B], key)`` returning ``(loss, metrics)``.
    num_rows: number of training rows.
    key: the run's key; this step uses ``fold_in(key, state.step)`` (batch
      indices from its first split, the loss's noise from the second).
    batch_size, learning_rate, steps: the optimizer's settings (static).

  Returns:
    ``(new state, metrics)`` with ``metrics["loss"]`` the batch loss.
  """
  kb, kl = jax.random.split(jax.random.fold_in(key, state.step))
  idx = jax.random.randint(kb, (batch_size,), 0, num_rows)
  (value, metrics), grads = jax.value_and_grad(loss, has_aux=True)(state.params, idx, kl)
  updates, opt_state = optimizer(learning_rate, steps).update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  return FitState(params, opt_state, state.step + 1), dict(metrics, loss=value)
