"""MuJoCo locomotion (gymnasium v5) for offline RL datasets and evaluation.

gymnasium's MuJoCo environments step in C through the ``mujoco`` package, so
this module is NumPy, not JAX (the one exception to ``envs -> jax only``; the
MuJoCo physics has no JAX port in this project's pinned set that matches the
D4RL tasks). Episodes run ``E`` environments in lockstep with a batched policy
call per step; they return the same padded ``[E, T, ...]`` layout as
:func:`envs.classic_control.rollout`, with ``terminals`` (the robot fell:
gymnasium's ``terminated``) kept apart from ``timeouts`` (``truncated``).
Actions are in ``[-1, 1]^A`` for HalfCheetah, Hopper and Walker2d.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

TASKS = ("halfcheetah", "hopper", "walker2d")
GYM_IDS = {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5", "walker2d": "Walker2d-v5"}
DIMS = {"halfcheetah": (17, 6), "hopper": (11, 3), "walker2d": (17, 6)}

# obs [E, S] (float32) -> action [E, A] in [-1, 1]
NumpyPolicy = Callable[[np.ndarray], np.ndarray]


class Episodes(NamedTuple):
  observations: np.ndarray  # [E, T, S]
  actions: np.ndarray  # [E, T, A]
  rewards: np.ndarray  # [E, T]
  next_observations: np.ndarray  # [E, T, S]
  terminals: np.ndarray  # [E, T] bool
  timeouts: np.ndarray  # [E, T] bool
  valid: np.ndarray  # [E, T] bool


def make_envs(task: str, num_envs: int, max_steps: int = 1000):
  """``num_envs`` gymnasium environments of ``task`` with a time limit of ``max_steps``."""
  if task not in GYM_IDS:
    raise ValueError(f"unknown MuJoCo task {task!r}; allowed: {TASKS}")
  import gymnasium as gym  # pylint: disable=g-import-not-at-top

  return [gym.make(GYM_IDS[task], max_episode_steps=max_steps) for _ in range(num_envs)]


def rollout(task: str, policy: NumpyPolicy, num_episodes: int, seed: int, max_steps: int = 1000) -> Episodes:
  """``num_episodes`` episodes of ``policy``, run in lockstep (seeded resets).

  Args:
    task: ``halfcheetah``, ``hopper`` or ``walker2d``.
    policy: batched NumPy policy ``[E, S] -> [E, A]``, called once per step on every
      episode's observation (finished episodes' rows are ignored).
    num_episodes: ``E``.
    seed: reset seeds are ``seed, seed + 1, ...``.
    max_steps: time limit ``T``.
  """
  obs_dim, act_dim = DIMS[task]
  envs = make_envs(task, num_episodes, max_steps)
  e, t = num_episodes, max_steps
  out = Episodes(
      np.zeros((e, t, obs_dim), np.float32), np.zeros((e, t, act_dim), np.float32), np.zeros((e, t), np.float32),
      np.zeros((e, t, obs_dim), np.float32), np.zeros((e, t), bool), np.zeros((e, t), bool), np.zeros((e, t), bool),
  )
  obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]).astype(np.float32)
  alive = np.ones(e, bool)
  for step in range(t):
    idx = np.nonzero(alive)[0]
    if not len(idx):
      break
    actions = np.clip(np.asarray(policy(obs), np.float32), -1.0, 1.0)  # all E rows (fixed shape)
    for i in idx:
      next_obs, reward, terminated, truncated, _ = envs[i].step(actions[i])
      out.observations[i, step] = obs[i]
      out.actions[i, step] = actions[i]
      out.rewards[i, step] = reward
      out.next_observations[i, step] = next_obs
      out.terminals[i, step] = terminated
      out.timeouts[i, step] = truncated and not terminated
      out.valid[i, step] = True
      obs[i] = next_obs
      alive[i] = not (terminated or truncated)
  for env in envs:
    env.close()
  return out


def returns(episodes: Episodes) -> np.ndarray:
  """Undiscounted return of each episode: ``[E]``."""
  return np.where(episodes.valid, episodes.rewards, 0.0).sum(axis=1)


class Stepper:
  """``E`` environments stepped together with automatic resets (for online training)."""

  def __init__(self, task: str, num_envs: int, seed: int, max_steps: int = 1000):
    self.envs = make_envs(task, num_envs, max_steps)
    self.seed = seed
    self.resets = 0
    self.obs = np.stack([self._reset(env) for env in self.envs]).astype(np.float32)
    self.episode_return = np.zeros(num_envs)
    self.finished: list[float] = []

  def _reset(self, env):
    obs, _ = env.reset(seed=self.seed + self.resets)
    self.resets += 1
    return obs

  def step(self, actions: np.ndarray):
    """Steps every environment; returns ``(obs, actions, rewards, next_obs, terminals, timeouts)`` ``[E, ...]``."""
    obs = self.obs.copy()
    e = len(self.envs)
    next_obs = np.zeros_like(obs)
    rewards, terms, touts = np.zeros(e, np.float32), np.zeros(e, bool), np.zeros(e, bool)
    for i, env in enumerate(self.envs):
      o, r, terminated, truncated, _ = env.step(actions[i])
      next_obs[i], rewards[i], terms[i], touts[i] = o, r, terminated, truncated and not terminated
      self.episode_return[i] += r
      if terminated or truncated:
        self.finished.append(float(self.episode_return[i]))
        self.episode_return[i] = 0.0
        self.obs[i] = self._reset(env)
      else:
        self.obs[i] = o
    return obs, np.asarray(actions, np.float32), rewards, next_obs, terms, touts
