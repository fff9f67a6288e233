"""Experiment ``reg``: REG / REG+OPG (and ablations) against IQL, TD3+BC and BC.

Config: ``launch/configs/reg.py``. For every dataset and algorithm, all seeds
train together: one jitted call runs ``updates_per_chunk`` updates in a
``lax.scan``, vmapped over the seed axis, which is sharded over the mesh's
``data`` axis (padded to a multiple of the device count; padded seeds train
but are not reported). Units (dataset, algorithm) run one after another; the
checkpoint holds the current unit's training state and every score so far, at
global step ``unit * chunks + chunk``, so a killed run resumes where it was and
ends with bit-identical parameters (``results.json`` records a SHA-256 of each
unit's final parameters). A NaN/Inf in the losses or the state stops the run,
naming the step and the quantity; the last good checkpoint is kept.

Keys come from the seed and the dataset's name only (``data.name_key``), not
from a unit's position: an algorithm's numbers do not depend on which other
algorithms or datasets a config lists, and seed ``i`` of every algorithm on a
dataset shares its initial key and its evaluation episodes.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from datasets.offline_rl import d4rl
from envs import classic_control
from envs import mujoco_tasks
from launch import checkpoint as ckpt_lib
from launch import mesh as mesh_lib
from launch import metrics as metrics_lib
from launch.configs import reg as reg_config
from launch.experiments.reg import data as reg_data
from launch.experiments.reg import report as reg_report
from launch.runtime import Context, Experiment
from methods import reg


def _net_hparams(config) -> reg.Hparams:
  """The part of the hparams that defines the actor network (shared by all algorithms)."""
  return reg.Hparams(hidden=tuple(config.agent.hidden), layer_norm=config.agent.layer_norm)


@functools.lru_cache(maxsize=None)
def chunk_fn(hp: reg.Hparams, num_updates: int, mesh):
  """Jitted ``(states [P], data, size) -> (states, metrics [P])``; seeds sharded over ``mesh``."""
  fn = jax.vmap(functools.partial(reg.train_chunk, num_updates=num_updates, hp=hp), in_axes=(0, None, None))
  data_sh, repl = mesh_lib.data_sharding(mesh), mesh_lib.replicated(mesh)
  return jax.jit(fn, in_shardings=(data_sh, repl, repl), out_shardings=(data_sh, data_sh))


@functools.lru_cache(maxsize=None)
def _init_fn(hp: reg.Hparams, obs_dim: int, action_dim: int, mesh):
  fn = jax.vmap(functools.partial(reg.init, obs_dim=obs_dim, action_dim=action_dim, hp=hp))
  return jax.jit(fn, in_shardings=mesh_lib.data_sharding(mesh), out_shardings=mesh_lib.data_sharding(mesh))


def init_states(config, hp: reg.Hparams, data: reg_data.OfflineData, mesh) -> reg.TrainState:
  """``[P]`` seeds' initial states on ``data`` (seed ``i``'s key: ``fold_in(name_key(seed, data.name), i)``).

  The key depends on the dataset's name and the seed only: an algorithm's run
  is the same whichever other datasets and algorithms the config lists, and
  seed ``i`` of every algorithm on a dataset starts from the same key (paired
  comparisons across algorithms).
  """
  p = mesh_lib.padded_size(config.num_seeds, mesh)
  base = reg_data.name_key(config.seed, data.name)
  # Raw key data: a plain uint32 array that can be laid out over the mesh (reg.init wraps it).
  keys = np.asarray(jax.random.key_data(jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(p))))
  keys = mesh_lib.global_array(keys.shape, mesh_lib.data_sharding(mesh), lambda idx: keys[idx])
  return _init_fn(hp, data.obs_dim, data.action_dim, mesh)(keys)


def _normalize(obs, mean, std):
  return (obs - jnp.broadcast_to(mean, obs.shape)) / jnp.broadcast_to(std, obs.shape)


@functools.lru_cache(maxsize=None)
def _classic_eval_fn(task_name: str, net_hp: reg.Hparams, action_dim: int, episodes: int):
  task = classic_control.make(task_name)

  def one(actor, key, mean, std):
    act = lambda obs: reg.act(actor, _normalize(obs, mean, std), action_dim=action_dim, hp=net_hp)  # noqa: E731
    return classic_control.evaluate(task, act, key, episodes)

  return jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)))


@functools.lru_cache(maxsize=None)
def _batched_act_fn(net_hp: reg.Hparams, action_dim: int):
  def fn(actors, obs, mean, std):  # actors [P], obs [P, E, S]
    return jax.vmap(lambda a, o: reg.act(a, _normalize(o, mean, std), action_dim=action_dim, hp=net_hp))(actors, obs)

  return jax.jit(fn)


def evaluate(config, data: reg_data.OfflineData, actors, key, episodes: int) -> np.ndarray:
  """Normalised scores ``[P, episodes]`` of the seeds' deterministic policies."""
  net_hp = _net_hparams(config)
  p = jax.tree.leaves(actors)[0].shape[0]
  actors = jax.tree.map(jnp.asarray, mesh_lib.to_host(actors))  # every seed, on this process's device
  if reg_data.is_classic(data.task):
    keys = jax.random.split(key, p)
    ret = _classic_eval_fn(data.task, net_hp, data.action_dim, episodes)(actors, keys, data.obs_mean, data.obs_std)
  else:
    act = _batched_act_fn(net_hp, data.action_dim)

    def policy(obs):  # [P * E, S], seed-major
      a = act(actors, jnp.asarray(obs).reshape(p, episodes, -1), data.obs_mean, data.obs_std)
      return np.asarray(a).reshape(p * episodes, -1)

    seed = int(jax.random.randint(key, (), 0, 2**30))
    ep = mujoco_tasks.rollout(data.task, policy, p * episodes, seed, config.data.mujoco_max_steps)
    ret = mujoco_tasks.returns(ep).reshape(p, episodes)
  return d4rl.normalized_score(np.asarray(ret), data.random_return, data.expert_return)


digest = ckpt_lib.tree_digest


def _pad_rows(batch: reg.Batch, capacity: int) -> reg.Batch:
  """Pads the dataset to ``capacity`` rows (sampling uses only the real ones) to share compilations."""
  n = batch.rewards.shape[0]
  return jax.tree.map(lambda x: np.concatenate([x, np.zeros((capacity - n,) + x.shape[1:], x.dtype)]), batch)


def eval_chunks(config) -> list[int]:
  c = config.num_updates // config.updates_per_chunk
  return [i for i in range(1, c + 1) if i % config.eval_every == 0 or i == c]


def _template(config, units, evals, datasets, hps, unit: int, mesh) -> dict:
  """The checkpoint of unit ``unit``: its training state and every unit's scores, digests (and offline metrics).

  Datasets without an environment (``data.hdf5_task="none"``) are not
  evaluated; their units record the final training metrics
  (``reg_data.OFFLINE_METRICS``, per seed) instead, under ``offline`` and
  ``offline_mask`` (which metrics the algorithm has); configs without such a
  dataset checkpoint exactly what they did before.
  """
  n, a = units[unit]
  p = mesh_lib.padded_size(config.num_seeds, mesh)
  out = {
      "train": init_states(config, hps[a], datasets[n], mesh),
      "scores": np.zeros((len(units), len(evals), p), np.float32),
      "digest": np.zeros((len(units), 8), np.uint32),
  }
  if not all(d.evaluable for d in datasets.values()):
    out["offline"] = np.zeros((len(units), len(reg_data.OFFLINE_METRICS), p), np.float32)
    out["offline_mask"] = np.zeros((len(units), len(reg_data.OFFLINE_METRICS)), np.int32)
  return out


def _observe(config, data, state, m: dict, u: int, c: int, chunks: int, evals: list, tally: dict) -> dict:
  """Chunk ``c`` of unit ``u``: its metrics, evaluation (or offline metrics at the end), final digest.

  Updates the checkpointed arrays of ``tally`` in place; returns the log record.
  """
  record = {k: float(np.mean(v)) for k, v in m.items()}
  if c in evals and data.evaluable:
    j = evals.index(c)
    episodes = config.final_eval_episodes if c == chunks else config.eval_episodes
    key = jax.random.fold_in(reg_data.name_key(config.seed + 1, data.name), c)  # every algorithm: the same episodes
    tally["scores"][u, j] = evaluate(config, data, state.actor, key, episodes).mean(axis=1)
    s = tally["scores"][u, j, : config.num_seeds]
    record.update(score_mean=float(s.mean()), score_se=float(reg_report.stderr(s)))
  if c == chunks:
    tally["digest"][u] = np.frombuffer(bytes.fromhex(digest(state)), np.uint32)
    if not data.evaluable:
      for i, name in enumerate(reg_data.OFFLINE_METRICS):
        if name in m:
          tally["offline"][u, i, : config.num_seeds] = m[name]
          tally["offline_mask"][u, i] = 1
  return record


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Trains every (dataset, algorithm) unit; returns ``results.json``'s content."""
  start = time.perf_counter()
  directory = reg_data.maybe_prepare(config, ctx.workdir)
  names = reg_data.dataset_names(config)
  datasets = {n: reg_data.load(config, n, directory) for n in names}
  capacity = {}
  for d in datasets.values():
    capacity[d.task] = max(capacity.get(d.task, 0), len(d.transitions["rewards"]))
  units = [(n, a) for n in names for a in config.algorithms]
  chunks = config.num_updates // config.updates_per_chunk
  evals = eval_chunks(config)
  hps = {a: reg_config.agent_hparams(config, a) for a in config.algorithms}
  latest = ctx.latest_step()
  first = (latest - 1) // chunks if latest else 0
  step, ckpt, _ = ctx.restore_or(_template(config, units, evals, datasets, hps, first, ctx.mesh))
  tally = {k: np.array(v) for k, v in ckpt.items() if k != "train"}
  unit, done = ((step - 1) // chunks, step - ((step - 1) // chunks) * chunks) if step else (0, 0)
  state = ckpt["train"]
  if done == chunks:
    unit, done = unit + 1, 0
  progress = metrics_lib.Progress(len(units) * config.num_updates, unit="updates", start=step * config.updates_per_chunk)
  for u in range(unit, len(units)):
    name, algorithm = units[u]
    data = datasets[name]
    hp = hps[algorithm]
    if u != unit or done == 0:
      state = init_states(config, hp, data, ctx.mesh)
      done = 0
    batch = _pad_rows(data.batch(), capacity[data.task])
    size = jnp.int32(len(data.transitions["rewards"]))
    fn = chunk_fn(hp, config.updates_per_chunk, ctx.mesh)
    progress.label = f"[reg {name} {algorithm}] "
    for c in range(done + 1, chunks + 1):
      g = u * chunks + c
      state, m = fn(state, batch, size)
      m = {k: np.asarray(mesh_lib.to_host(v))[: config.num_seeds] for k, v in m.items()}
      bad = [f"metrics/{k}" for k, v in m.items() if not np.all(np.isfinite(v))]
      if bad:
        raise ckpt_lib.NonFiniteError(g, bad, ctx.latest_step())
      record = {"dataset": name, "algorithm": algorithm, "updates": c * config.updates_per_chunk}
      record.update(_observe(config, data, state, m, u, c, chunks, evals, tally))
      record["updates_per_s"] = progress.rate(g * config.updates_per_chunk)
      ctx.writer.log(g, **record)
      progress.update(g * config.updates_per_chunk)
      ctx.save(g, {"train": state, **tally}, force=c == chunks)
    done = 0

  results = reg_report.summarize(config, units, evals, tally, datasets)
  results["wall_time_s"] = time.perf_counter() - start
  reg_report.make_figures(results, ctx.writer)
  return results


EXPERIMENT = Experiment(
    declaration=reg_config.SECTIONS,
    get_config=reg_config.get_config,
    run=run,
    summary=reg_report.format_table,
    markdown=reg_report.markdown_table,
    headline=reg_report.headline_table,
    inputs=reg_data.input_files,
)
