"""gymnax Pendulum-v1 and MountainCarContinuous-v0 for offline RL, in pure JAX.

Agents act in ``[-1, 1]^A``; :class:`Task` maps actions to the environment's
range. :func:`rollout` runs a batch of episodes with ``lax.scan`` (vmapped over
episodes) and returns D4RL-style arrays: ``terminals`` mark true terminations
(MountainCar reaching the goal), ``timeouts`` the time limit -- they are kept
apart, as ``qlearning_dataset`` needs. Scripted controllers give the "expert"
behaviour used to make datasets:

* Pendulum: energy-based swing-up (``u ∝ (E* - E) thetȧ``) with a PD
  stabiliser near the top, where ``E = thetȧ^2 / 2 + (3 g / 2 l) cos theta``
  (the energy of gymnax's dynamics ``thetä = 3 g / (2 l) sin theta + 3 u / (m l^2)``).
* MountainCar: push along the velocity (pumps energy every swing) at 60% throttle.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

TASKS = ("pendulum", "mountaincar")
GYMNAX_IDS = {"pendulum": "Pendulum-v1", "mountaincar": "MountainCarContinuous-v0"}

# (obs [E, S], key) -> action in [-1, 1], [E, A]
Policy = Callable[[jax.Array, jax.Array], jax.Array]


class Task(NamedTuple):
  name: str
  env: object
  params: object
  obs_dim: int
  action_dim: int
  action_scale: float  # environment action = action_scale * agent action
  max_steps: int


def make(name: str) -> Task:
  """The :class:`Task` ``"pendulum"`` or ``"mountaincar"``."""
  if name not in GYMNAX_IDS:
    raise ValueError(f"unknown classic-control task {name!r}; allowed: {TASKS}")
  import gymnax  # pylint: disable=g-import-not-at-top  (its import starts a JAX backend)

  env, params = gymnax.make(GYMNAX_IDS[name])
  space = env.action_space(params)
  obs_dim = env.observation_space(params).shape[0]
  return Task(name, env, params, obs_dim, int(space.shape[0]) if space.shape else 1,
              float(space.high), int(params.max_steps_in_episode))


class Episodes(NamedTuple):
  """``[E, T, ...]`` arrays of ``E`` episodes of at most ``T`` steps (``valid`` marks real steps)."""

  observations: jax.Array  # [E, T, S]
  actions: jax.Array  # [E, T, A] in [-1, 1]
  rewards: jax.Array  # [E, T]
  next_observations: jax.Array  # [E, T, S]
  terminals: jax.Array  # [E, T] bool, true termination
  timeouts: jax.Array  # [E, T] bool, time limit on the last step
  valid: jax.Array  # [E, T] bool


def _is_goal(task: Task, state) -> jax.Array:
  if task.name == "mountaincar":
    p = task.params
    return (state.position >= p.goal_position) & (state.velocity >= p.goal_velocity)
  return jnp.zeros((), bool)


def rollout(task: Task, policy: Policy, key: jax.Array, num_episodes: int) -> Episodes:
  """``num_episodes`` episodes of ``policy`` from random initial states, in one scan.

  Args:
    task: from :func:`make`.
    policy: ``(obs [E, S], key) -> action [E, A]`` in ``[-1, 1]``.
    key: PRNG key for resets, policy noise and the environment.
    num_episodes: ``E``.

  Returns:
    :class:`Episodes` with ``T = task.max_steps``.
  """
  k_reset, k_steps = jax.random.split(key)
  obs, state = jax.vmap(task.env.reset, in_axes=(0, None))(jax.random.split(k_reset, num_episodes), task.params)

  def step(carry, k):
    obs, state, alive = carry
    k_pi, k_env = jax.random.split(k)
    action = jnp.clip(policy(obs, k_pi), -1.0, 1.0)
    env_keys = jax.random.split(k_env, num_episodes)
    next_obs, next_state, reward, done, _ = jax.vmap(task.env.step_env, in_axes=(0, 0, 0, None))(
        env_keys, state, task.action_scale * action, task.params
    )
    goal = jax.vmap(lambda s: _is_goal(task, s))(next_state)
    timeout = (next_state.time >= task.max_steps) & ~goal
    out = (obs, action, reward, next_obs, goal, timeout, alive)
    alive = alive & ~done
    return (next_obs, next_state, alive), out

  init = (obs, state, jnp.ones((num_episodes,), bool))
  _, out = jax.lax.scan(step, init, jax.random.split(k_steps, task.max_steps))
  out = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), out)  # [E, T, ...]
  o, a, r, no, term, tout, valid = out
  return Episodes(o, a, r.astype(jnp.float32), no, term & valid, tout & valid, valid)


def returns(episodes: Episodes) -> jax.Array:
  """Undiscounted return of each episode: ``[E]``."""
  return jnp.sum(jnp.where(episodes.valid, episodes.rewards, 0.0), axis=1)


def evaluate(task: Task, act: Callable[[jax.Array], jax.Array], key: jax.Array, num_episodes: int) -> jax.Array:
  """Returns ``[E]`` of the deterministic policy ``act: obs [E, S] -> action [E, A]``."""
  return returns(rollout(task, lambda obs, _: act(obs), key, num_episodes))


# --- scripted behaviour policies ---------------------------------------------------------

def pendulum_expert(obs: jax.Array, task: Task) -> jax.Array:
  """Energy-based swing-up with PD stabilisation at the top; ``[E, 3] -> [E, 1]`` in ``[-1, 1]``."""
  p = task.params
  cos, sin, thdot = obs[..., 0], obs[..., 1], obs[..., 2]
  theta = jnp.arctan2(sin, cos)  # 0 = upright
  w0 = 3.0 * p.g / (2.0 * p.l)
  energy = 0.5 * thdot**2 + w0 * cos
  swing = 0.5 * (w0 - energy) * thdot  # dE/dt = 3 u thetȧ / (m l^2): pump towards E* = w0
  balance = -(12.0 * theta + 2.5 * thdot)
  u = jnp.where(cos > 0.8, balance, swing)
  return jnp.clip(u / p.max_torque, -1.0, 1.0)[..., None]


MOUNTAINCAR_THROTTLE = 0.6  # a grid over {0.6, 0.8, 1} gave the best return (~95.6) at 0.6


def mountaincar_expert(obs: jax.Array, task: Task) -> jax.Array:
  """Push along the velocity at 60% throttle (right when at rest); ``[E, 2] -> [E, 1]``."""
  del task
  return MOUNTAINCAR_THROTTLE * jnp.where(obs[..., 1] >= 0.0, 1.0, -1.0)[..., None]


EXPERTS = {"pendulum": pendulum_expert, "mountaincar": mountaincar_expert}


def behaviour_policy(task: Task, *, noise_std=0.0, random_prob=0.0) -> Policy:
  """The scripted expert degraded by Gaussian noise and uniform random actions.

  ``noise_std = random_prob = 0`` is the expert; ``random_prob = 1`` the
  uniform random policy. Both may be scalars or ``[E]`` arrays (one value per
  episode, e.g. a curriculum). Each step, with probability ``random_prob`` the
  action is uniform on ``[-1, 1]^A``; otherwise it is the expert's plus
  ``N(0, noise_std^2)``, clipped.
  """
  expert = EXPERTS[task.name]

  def per_episode(x, obs):  # scalar or [E] -> [E, 1]
    return jnp.broadcast_to(jnp.asarray(x, jnp.float32), obs.shape[:-1])[..., None]

  def policy(obs, key):
    k_noise, k_coin, k_uniform = jax.random.split(key, 3)
    a = expert(obs, task)
    a = jnp.clip(a + per_episode(noise_std, obs) * jax.random.normal(k_noise, a.shape), -1.0, 1.0)
    uniform = jax.random.uniform(k_uniform, a.shape, minval=-1.0, maxval=1.0)
    coin = jax.random.uniform(k_coin, a.shape[:-1] + (1,)) < per_episode(random_prob, obs)
    return jnp.where(coin, uniform, a)

  return policy
