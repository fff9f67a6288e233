"""Datasets of the ``reg`` experiment: generation, TFDS preparation and loading.

Generated datasets (``data.source="generated"``), D4RL-style:

* classic control (gymnax, pure JAX): scripted behaviour from
  :mod:`envs.classic_control` -- ``expert`` is the scripted controller with
  small Gaussian noise, ``medium`` a noise-degraded one (Gaussian noise and
  uniform random actions), ``random`` uniform actions, ``medium-replay`` a
  curriculum from random to medium behaviour over episodes, ``medium-expert``
  medium and expert concatenated. References: the uniform policy's and the
  noise-free controller's mean returns.
* MuJoCo HalfCheetah / Hopper (gymnasium): behaviour policies are snapshots of
  the project's online TD3 (:mod:`methods.reg`, ``extraction="td3"``).
  ``expert`` is the best snapshot, ``medium`` the first snapshot reaching
  40% of the way from random to expert, ``medium-replay`` TD3's replay buffer
  up to that snapshot, both acting with N(0, 0.1^2) noise (TD3's exploration).
  References: uniform random and the expert snapshot's deterministic return.

Each dataset is staged and written by the TFDS builder
:class:`datasets.offline_rl.builder.OfflineRl` (array_record) and read back
through it; D4RL sources go through :mod:`datasets.offline_rl.d4rl` or
:mod:`datasets.offline_rl.tfds_d4rl`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import zlib
from typing import Optional

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from datasets.offline_rl import builder as rl_builder_module
from datasets.offline_rl import d4rl
from datasets.offline_rl import suite
from datasets.offline_rl import tfds_d4rl
from envs import classic_control
from envs import mujoco_tasks
from launch.configs import reg as reg_config
from launch.experiments.reg import file_checks
from methods import reg

CLASSIC = classic_control.TASKS
MUJOCO = ("halfcheetah", "hopper")
# (Gaussian noise std, probability of a uniform random action) of each behaviour.
CLASSIC_BEHAVIOUR = {
    "pendulum": {"expert": (0.1, 0.0), "medium": (0.5, 0.5)},
    "mountaincar": {"expert": (0.1, 0.0), "medium": (1.0, 0.75)},
}
MUJOCO_ACTION_NOISE = 0.1
NO_ENV = reg_config.NO_ENV  # data.hdf5_task of a file without an environment
# Training metrics reported (at the end) for a dataset that cannot be evaluated, where the algorithm has them.
OFFLINE_METRICS = ("actor_loss", "critic_loss", "value_loss", "q_mean", "v_mean")
MEDIUM_FRACTION = 0.4  # medium = first TD3 snapshot at 40% of the way from random to expert


@dataclasses.dataclass
class OfflineData:
  """One dataset ready for training (NumPy) and how to score it."""

  name: str  # e.g. "pendulum-medium" or "halfcheetah-medium-v2"
  task: str  # environment: pendulum | mountaincar | halfcheetah | hopper | walker2d, or none (NO_ENV)
  transitions: dict  # qlearning_dataset arrays, observations normalised, rewards scaled, actions clipped
  random_return: float
  expert_return: float
  obs_mean: np.ndarray  # [S]
  obs_std: np.ndarray  # [S]
  reward_scale: float
  info: dict

  @property
  def evaluable(self) -> bool:
    """Whether an environment exists to evaluate policies trained on this dataset."""
    return self.task in CLASSIC or self.task in mujoco_tasks.DIMS

  @property
  def obs_dim(self) -> int:
    return self.transitions["observations"].shape[1]

  @property
  def action_dim(self) -> int:
    return self.transitions["actions"].shape[1]

  def batch(self) -> reg.Batch:
    t = self.transitions
    return reg.Batch(t["observations"], t["actions"], t["rewards"], t["next_observations"], t["terminals"])


def _user_file(config) -> str:
  """``data.hdf5_file`` (a user's own D4RL-format file), or ``""``."""
  if config.data.source != "d4rl_hdf5":
    return ""
  return os.path.expanduser(config.data.get("hdf5_file", "") or "")


def dataset_names(config: ml_collections.ConfigDict) -> list[str]:
  """Names of the config's datasets (a user's file is named after its file name, extension dropped)."""
  if config.data.source == "generated":
    return [f"{t}-{k}" for t in config.data.tasks for k in config.data.kinds]
  if _user_file(config):
    return [os.path.splitext(os.path.basename(_user_file(config)))[0]]
  return list(config.data.d4rl_datasets)


def input_files(config: ml_collections.ConfigDict) -> list[tuple[str, str]]:
  """``(config key, path)`` of the user's files the run reads: D4RL HDF5 files or TFDS catalog folders.

  The datasets the run generates itself are not listed.
  """
  if config.data.source == "d4rl_hdf5":
    if _user_file(config):
      return [("data.hdf5_file", _user_file(config))]
    folder = os.path.expanduser(config.data.d4rl_dir)
    return [("data.d4rl_dir", os.path.join(folder, f"{n}.hdf5")) for n in config.data.d4rl_datasets]
  if config.data.source == "tfds_d4rl":
    root = os.path.expanduser(config.data.data_dir or os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets"))
    out = []
    for n in config.data.d4rl_datasets:
      parts = n.split("-")
      folder = os.path.join(root, f"d4rl_mujoco_{d4rl.task_of(n)}", f"{parts[-1]}-{'-'.join(parts[1:-1])}")
      if os.path.isdir(folder):  # elsewhere (TFDS's own default) TFDS finds it and reports what is missing
        out.append(("data.data_dir", folder))
    return out
  return []


def data_dir(config: ml_collections.ConfigDict, workdir: str) -> str:
  return config.data.data_dir or os.path.join(workdir, "data")


def name_key(seed: int, name: str) -> jax.Array:
  """``key(seed)`` folded with ``crc32(name)``: the same key for a name at any position of any list, in any process."""
  return jax.random.fold_in(jax.random.key(seed), zlib.crc32(name.encode()) & 0x7FFFFFFF)


# --- classic control ---------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _classic_collector(task_name: str, num_episodes: int):
  task = classic_control.make(task_name)

  @jax.jit
  def collect(key, noise, prob):
    policy = classic_control.behaviour_policy(task, noise_std=noise, random_prob=prob)
    return classic_control.rollout(task, policy, key, num_episodes)

  return task, collect


def _classic_rows(task_name: str, key, noise_fn, num_rows: int, batch_episodes: int = 256) -> dict:
  """Rows of episodes whose ``(noise, prob)`` per episode come from ``noise_fn(episode_ids)``."""
  _, collect = _classic_collector(task_name, batch_episodes)
  parts, rows, start = [], 0, 0
  while rows < num_rows:
    ids = np.arange(start, start + batch_episodes)
    noise, prob = noise_fn(ids)
    ep = jax.device_get(collect(jax.random.fold_in(key, start), jnp.asarray(noise, jnp.float32), jnp.asarray(prob, jnp.float32)))
    parts.append(suite.episodes_to_rows(*ep))
    rows += len(parts[-1]["rewards"])
    start += batch_episodes
  return suite.truncate(suite.concat(parts), num_rows)


def _classic_reference(task_name: str, key, episodes: int) -> tuple[float, float]:
  _, collect = _classic_collector(task_name, episodes)
  k1, k2 = jax.random.split(key)
  rand = classic_control.returns(collect(k1, jnp.zeros(episodes), jnp.ones(episodes)))
  expert = classic_control.returns(collect(k2, jnp.zeros(episodes), jnp.zeros(episodes)))
  return float(jnp.mean(rand)), float(jnp.mean(expert))


def generate_classic(task_name: str, config, seed: int) -> dict[str, tuple[dict, dict]]:
  """``{kind: (rows, metadata)}`` for a classic-control task."""
  n = config.data.classic_transitions
  key = name_key(seed, task_name)
  keys = jax.random.split(key, 6)
  random_return, expert_return = _classic_reference(task_name, keys[0], config.data.reference_episodes)
  (e_noise, e_prob), (m_noise, m_prob) = (CLASSIC_BEHAVIOUR[task_name][k] for k in ("expert", "medium"))
  const = lambda noise, prob: lambda ids: (np.full(len(ids), noise), np.full(len(ids), prob))  # noqa: E731
  n_replay_eps = max(n // classic_control.make(task_name).max_steps, 2)

  def curriculum(ids):  # random -> medium over the first n_replay_eps episodes, then medium
    frac = np.clip(ids / n_replay_eps, 0.0, 1.0)
    return (1.0 - frac) * 1.0 + frac * m_noise, (1.0 - frac) * 1.0 + frac * m_prob

  rows = {"random": _classic_rows(task_name, keys[1], const(0.0, 1.0), n)}
  if any(k != "random" for k in config.data.kinds):
    rows["medium"] = _classic_rows(task_name, keys[2], const(m_noise, m_prob), n)
    rows["expert"] = _classic_rows(task_name, keys[3], const(e_noise, e_prob), n)
    rows["medium-replay"] = _classic_rows(task_name, keys[4], curriculum, n)
    rows["medium-expert"] = suite.concat([rows["medium"], rows["expert"]])
  behaviour = {
      "random": "uniform actions",
      "medium": f"scripted expert + N(0, {m_noise}^2) noise, uniform action w.p. {m_prob}",
      "expert": f"scripted expert + N(0, {e_noise}^2) noise",
      "medium-replay": "curriculum from uniform to medium behaviour over episodes",
      "medium-expert": "medium rows then expert rows",
  }
  meta = dict(random_return=random_return, expert_return=expert_return, seed=seed)
  return {k: (r, dict(meta, behaviour=behaviour[k])) for k, r in rows.items()}


# --- MuJoCo: online TD3 behaviour policies -----------------------------------------------

def _td3_hparams(config) -> reg.Hparams:
  return reg.Hparams(critic="td3", extraction="td3", hidden=tuple(config.data.td3_hidden), batch_size=256,
                     actor_lr=config.data.td3_lr, critic_lr=config.data.td3_lr, discount=0.99, polyak=0.005)


def _numpy_policy(act_fn, params, noise: float, rng: np.random.Generator):
  def policy(obs):
    a = np.asarray(act_fn(params, jnp.asarray(obs)))
    if noise > 0:
      a = a + noise * rng.standard_normal(a.shape).astype(np.float32)
    return np.clip(a, -1.0, 1.0)

  return policy


def train_td3(task: str, config, seed: int):
  """Online TD3 on ``task``; returns ``(snapshots [(step, actor, return)], replay rows)``."""
  hp = _td3_hparams(config)
  obs_dim, act_dim = mujoco_tasks.DIMS[task]
  steps, start, every = config.data.td3_steps, config.data.td3_start_steps, config.data.td3_snapshot_every
  max_steps = config.data.mujoco_max_steps
  state = reg.init(jax.random.key(seed), obs_dim, act_dim, hp=hp)
  act_fn = jax.jit(functools.partial(reg.act, action_dim=act_dim, hp=hp))
  chunk = jax.jit(functools.partial(reg.train_chunk, num_updates=every // 5, hp=hp))
  buf = {k: np.zeros((steps,) + s, np.float32) for k, s in (
      ("observations", (obs_dim,)), ("actions", (act_dim,)), ("rewards", ()), ("next_observations", (obs_dim,)),
      ("terminals", ()), ("timeouts", ()))}
  rng = np.random.default_rng(seed)
  env = mujoco_tasks.Stepper(task, 1, seed, max_steps)
  snapshots = []
  for t in range(steps):
    if t < start:
      a = rng.uniform(-1, 1, (1, act_dim)).astype(np.float32)
    else:
      a = _numpy_policy(act_fn, state.actor, MUJOCO_ACTION_NOISE, rng)(env.obs)
    o, a, r, no, term, tout = env.step(a)
    for k, v in zip(buf, (o[0], a[0], r[0], no[0], term[0], tout[0])):
      buf[k][t] = v
    if t + 1 >= start and (t + 1) % (every // 5) == 0:
      data = reg.Batch(*(jnp.asarray(buf[k]) for k in ("observations", "actions", "rewards", "next_observations", "terminals")))
      state, _ = chunk(state, data, jnp.int32(t + 1))
    if (t + 1) % every == 0:
      ret = mujoco_tasks.returns(mujoco_tasks.rollout(
          task, _numpy_policy(act_fn, state.actor, 0.0, rng), 5, seed + 10_000 + t, max_steps)).mean()
      snapshots.append((t + 1, jax.device_get(state.actor), float(ret)))
      logging.info("[reg data] TD3 on %s: %d/%d steps, return %.1f (episodes done %d)",
                   task, t + 1, steps, ret, len(env.finished))
  rows = {k: (v.astype(bool) if k in ("terminals", "timeouts") else v) for k, v in buf.items()}
  rows["timeouts"][-1] = not rows["terminals"][-1]
  return snapshots, rows, act_fn


def generate_mujoco(task: str, config, seed: int) -> dict[str, tuple[dict, dict]]:
  """``{kind: (rows, metadata)}`` for a MuJoCo task from TD3 snapshots."""
  n, max_steps, ep = config.data.mujoco_transitions, config.data.mujoco_max_steps, config.data.reference_episodes
  snapshots, replay, act_fn = train_td3(task, config, seed)
  rng = np.random.default_rng(seed + 1)
  ref_eps = max(min(ep, 20), 2)
  rand_ret = float(mujoco_tasks.returns(mujoco_tasks.rollout(
      task, lambda o: rng.uniform(-1, 1, (len(o), mujoco_tasks.DIMS[task][1])), ref_eps, seed + 20_000, max_steps)).mean())
  expert_step, expert_actor, _ = max(snapshots, key=lambda x: x[2])  # the best snapshot
  expert_ret = float(mujoco_tasks.returns(mujoco_tasks.rollout(
      task, _numpy_policy(act_fn, expert_actor, 0.0, rng), ref_eps, seed + 30_000, max_steps)).mean())
  target = rand_ret + MEDIUM_FRACTION * (expert_ret - rand_ret)
  medium_step, medium_actor, medium_ret = next((x for x in snapshots if x[2] >= target), snapshots[-1])
  if expert_ret <= rand_ret:
    logging.warning("[reg data] TD3 on %s did not beat uniform actions (%.1f <= %.1f): raise data.td3_steps",
                    task, expert_ret, rand_ret)

  def collect(policy, base_seed):  # batches of episodes until n rows (episodes may end early on terminals)
    parts, rows, batch = [], 0, math.ceil(n / max_steps) + 1
    while rows < n:
      e = mujoco_tasks.rollout(task, policy, batch, base_seed + 1_000 * len(parts), max_steps)
      parts.append(suite.episodes_to_rows(*e))
      rows += len(parts[-1]["rewards"])
    return suite.truncate(suite.concat(parts), n)

  rows = {"random": collect(lambda o: rng.uniform(-1, 1, (len(o), mujoco_tasks.DIMS[task][1])), seed + 40_000)}
  rows["medium"] = collect(_numpy_policy(act_fn, medium_actor, MUJOCO_ACTION_NOISE, rng), seed + 50_000)
  rows["expert"] = collect(_numpy_policy(act_fn, expert_actor, MUJOCO_ACTION_NOISE, rng), seed + 60_000)
  rows["medium-replay"] = suite.truncate(replay, medium_step)
  rows["medium-expert"] = suite.concat([rows["medium"], rows["expert"]])
  meta = dict(random_return=rand_ret, expert_return=expert_ret, seed=seed, td3_steps=config.data.td3_steps,
              medium_snapshot_step=medium_step, medium_snapshot_return=medium_ret, expert_snapshot_step=expert_step)
  behaviour = {
      "random": "uniform actions",
      "medium": f"TD3 snapshot at step {medium_step} + N(0, {MUJOCO_ACTION_NOISE}^2)",
      "expert": f"TD3 snapshot at step {expert_step} + N(0, {MUJOCO_ACTION_NOISE}^2)",
      "medium-replay": f"TD3 replay buffer up to step {medium_step}",
      "medium-expert": "medium rows then expert rows",
  }
  return {k: (r, dict(meta, behaviour=behaviour[k])) for k, r in rows.items()}


def ensure_generated(config, directory: str) -> None:
  """Generates, stages and prepares every missing ``<task>-<kind>`` of the config (deterministic)."""
  manual = os.path.join(directory, "manual")
  for task in config.data.tasks:
    missing = [k for k in config.data.kinds if not rl_builder_module.is_prepared(task, k, directory)]
    if not missing:
      continue
    logging.info("[reg data] generating %s datasets %s into %s", task, missing, directory)
    made = generate_classic(task, config, config.seed) if task in CLASSIC else generate_mujoco(task, config, config.seed)
    for kind in missing:
      rows, meta = made[kind]
      meta = dict(meta, **suite.summary(rows, meta["random_return"], meta["expert_return"]))
      rl_builder_module.stage(manual, task, kind, rows, meta)
      rl_builder_module.prepare(task, kind, directory, manual)


def _finish(name: str, task: str, rows_q: dict, random_return: float, expert_return: float, scale: float,
            config, info: dict, origin: str = "") -> OfflineData:
  t = dict(rows_q)
  t["actions"] = np.clip(t["actions"], -config.data.action_clip, config.data.action_clip)
  if config.data.normalize_observations:
    with np.errstate(over="ignore", invalid="ignore"):
      mean = t["observations"].mean(0)
      std = t["observations"].std(0) + 1e-3
    bad = np.flatnonzero(~(np.isfinite(mean) & np.isfinite(std)))
    if len(bad):
      raise d4rl.D4RLFormatError(
          f"{info.get('path', name)}: the mean or standard deviation of 'observations' columns {bad[:8].tolist()} "
          "overflows float32 (values too large to normalise); rescale them, or pass "
          "--config.data.normalize_observations=False")
  else:
    mean = np.zeros(t["observations"].shape[1], np.float32)
    std = np.ones(t["observations"].shape[1], np.float32)
  t["observations"] = ((t["observations"] - mean) / std).astype(np.float32)
  t["next_observations"] = ((t["next_observations"] - mean) / std).astype(np.float32)
  origin = origin or file_checks.scale_origin(config, name, random_return, expert_return)
  t["rewards"] = file_checks.scaled_rewards(t["rewards"], scale, info.get("path", info.get("catalog", name)), origin)
  t["terminals"] = t["terminals"].astype(np.float32)
  return OfflineData(name, task, t, float(random_return), float(expert_return), mean.astype(np.float32),
                     std.astype(np.float32), float(scale), info)


def _scale(config, rows: dict, random_return: float, expert_return: float) -> float:
  if config.data.reward_scale == "traj_return":
    return d4rl.reward_scale(rows)
  if config.data.reward_scale == "reference":
    return 1000.0 / abs(expert_return - random_return)
  return 1.0


def load(config, name: str, directory: str) -> OfflineData:
  """One dataset of the config, ready to train on."""
  if config.data.source == "generated":
    task, _, kind = name.partition("-")
    rows, meta = rl_builder_module.load(task, kind, directory)
    r0, r1 = meta["random_return"], meta["expert_return"]
    rl_builder_module.check_references(r0, r1, f"dataset {name} in {directory}")
    info = {k: v for k, v in meta.items() if not isinstance(v, (list, dict))}
    return _finish(name, task, d4rl.qlearning_dataset(rows), r0, r1, _scale(config, rows, r0, r1), config, info)
  if config.data.source == "d4rl_hdf5":
    return _load_hdf5(config, name)
  r0, r1 = d4rl.ref_scores(name)
  task = d4rl.task_of(name)
  # tfds_d4rl: "halfcheetah-medium-v2" -> d4rl_mujoco_halfcheetah/v2-medium
  parts = name.split("-")
  catalog_config = f"{parts[-1]}-{'-'.join(parts[1:-1])}"
  q, returns = tfds_d4rl.load(task, catalog_config, data_dir=config.data.data_dir or None)
  source = tfds_d4rl.catalog_name(task, catalog_config)
  if not len(q["rewards"]):
    raise d4rl.D4RLFormatError(f"{source}: no transition")
  for k, want in zip(("observations", "actions"), mujoco_tasks.DIMS[task]):
    if q[k].ndim != 2 or q[k].shape[1] != want:
      raise d4rl.D4RLFormatError(f"{source}: '{k}' has shape {q[k].shape}; {task} {k} have {want} columns")
  for k in ("observations", "actions", "rewards", "next_observations"):
    d4rl.check_float32(q[k], source, k)
  if config.data.reward_scale == "traj_return":
    scale = 1000.0 / max(float(np.ptp(returns)), 1e-6)
  else:
    scale = _scale(config, {}, r0, r1)
  return _finish(name, task, q, r0, r1, scale, config, {"catalog": tfds_d4rl.catalog_name(task, parts[-1])})


def _load_hdf5(config, name: str) -> OfflineData:
  """A D4RL -v2 file of ``data.d4rl_dir``, or the user's ``data.hdf5_file`` (checked against its task).

  A user's file is scored with ``data.hdf5_random_return`` / ``data.hdf5_expert_return``;
  when both are 0 the scores are raw returns (references 0 and 100 make
  ``100 (R - 0) / (100 - 0) = R``), and ``reward_scale="reference"`` falls back to
  IQL's ``traj_return`` scale. With ``data.hdf5_task="none"`` the file may have
  any dimensions; its policies are trained but not evaluated (no environment).
  """
  info = {}
  if _user_file(config):
    path, task = _user_file(config), config.data.hdf5_task
    r0, r1 = float(config.data.hdf5_random_return), float(config.data.hdf5_expert_return)
    if r0 == r1 == 0.0:
      r0, r1 = 0.0, 100.0
      info["score"] = "raw return"
    elif r0 == r1:
      raise d4rl.D4RLFormatError(f"--config.data.hdf5_random_return and --config.data.hdf5_expert_return are both "
                                 f"{r0:g}; give two different returns, or 0 and 0 for raw returns")
    hint = "; pass --config.data.hdf5_file=<path of your file>"
  else:
    path = os.path.join(os.path.expanduser(config.data.d4rl_dir), f"{name}.hdf5")
    task = d4rl.task_of(name)
    r0, r1 = d4rl.ref_scores(name)
    hint = " and pass --config.data.d4rl_dir=<its folder> (or --config.data.hdf5_file=<your file>)"
  if task != NO_ENV and task not in mujoco_tasks.DIMS:
    raise d4rl.D4RLFormatError(f"{path}: task {task!r} is not evaluated; tasks: {sorted(mujoco_tasks.DIMS)}")
  try:
    rows = d4rl.load_hdf5(path, dims=mujoco_tasks.DIMS.get(task), env=task, missing_hint=hint)
  except d4rl.D4RLDimensionError as e:
    if not _user_file(config):
      raise
    raise d4rl.D4RLDimensionError(f"{e}; a file of other dimensions trains without an environment (not "
                                  f"evaluated) with --config.data.hdf5_task={NO_ENV}") from e
  file_checks.check_flags(rows, path)
  file_checks.check_columns(rows, path)
  file_checks.check_actions(rows, path)
  q = d4rl.qlearning_dataset(rows, source=path, validated=True)
  origin = ""
  if info.get("score") == "raw return" and config.data.reward_scale == "reference":
    scale, origin = file_checks.user_reward_scale(rows, path), file_checks.IQL_FALLBACK
    logging.info("[reg data] %s: no reference returns given; rewards use IQL's trajectory-return scale", path)
  elif config.data.reward_scale == "traj_return":
    scale = file_checks.user_reward_scale(rows, path)
  else:
    scale = _scale(config, rows, r0, r1)
  if task == NO_ENV:
    info["score"] = "none"
    logging.info("[reg data] %s: no environment (data.hdf5_task=%s); policies are trained, not evaluated, and the "
                 "offline training metrics are reported", path, NO_ENV)
  return _finish(name, task, q, r0, r1, scale, config, {"path": path, **info}, origin)


def is_classic(task: str) -> bool:
  return task in CLASSIC


def maybe_prepare(config, workdir: str) -> Optional[str]:
  """Prepares generated datasets (if that is the source) and returns their directory."""
  directory = data_dir(config, workdir)
  if config.data.source == "generated":
    ensure_generated(config, directory)
  return directory
