"""Training of the ``flow_matching`` experiment: the groups of velocity models, the auxiliary networks.

A group is one architecture and step count; its members (seeds, data
subsets) are vmapped and sharded over the mesh's ``data`` axis,
``chunk_steps`` steps per jitted ``lax.scan``, each chunk checkpointed
(global step ``1 + chunks before + chunk``; step 1 holds the auxiliary
networks). The groups, in training order: ``large`` (training seeds and
random data fractions), ``small`` (capacity, and ``degraded``: a deliberately
bad model trained on a tiny random subset), ``coarse`` (the first stage of
coarse-to-fine sampling: the ``coarse`` architecture trained on
``t ~ U[0, coarse_t_max]`` only) and ``reduction`` (every scoring criterion x
fraction x seed; subsets chosen with the full-data seed-0 model and the
classifier features). A NaN in a loss stops the run naming the model and
training step; the last good checkpoint is kept.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from datasets import images as image_data
from launch import checkpoint as ckpt_lib
from launch import mesh as mesh_lib
from launch import metrics as metrics_lib
from launch.configs import flow_matching as fm_config
from launch.runtime import Context
from methods import flow_matching as fm
from methods.flow_matching import scoring


class Member(NamedTuple):
  """One velocity model: ``arch`` trained ``steps`` steps on a subset chosen by ``criterion``."""

  name: str
  arch: str  # "small" | "large"
  fraction: float
  criterion: str
  seed: int


class Group(NamedTuple):
  name: str
  arch: str
  steps: int
  members: tuple


class AuxParams(NamedTuple):
  classifier: dict
  autoencoder: dict


class RunState(NamedTuple):
  """Everything a checkpoint holds: the auxiliary networks and every group's (stacked) training state."""

  aux: AuxParams
  groups: tuple  # one fm.TrainState per group, leading axis = padded members


def member_name(arch, fraction, criterion, seed):
  return f"{arch}_{criterion}{int(round(100 * fraction))}_s{seed}" if fraction < 1 else f"{arch}_s{seed}"


def groups_of(rc: fm_config.Run) -> list[Group]:
  """The training groups in the order they train."""
  large = [Member(member_name("large", 1.0, "", s), "large", 1.0, "random", s) for s in range(rc.stability_seeds)]
  large += [Member(member_name("large", f, "random", 0), "large", f, "random", 0) for f in rc.stability_fractions]
  small = [Member(member_name("small", 1.0, "", s), "small", 1.0, "random", s) for s in range(rc.small_seeds)]
  small.append(Member("degraded", "small", rc.degraded_fraction, "random", 0))
  out = [Group("large", "large", rc.train_steps, tuple(large)), Group("small", "small", rc.train_steps, tuple(small)),
         Group("coarse", "coarse", rc.coarse_steps, (Member("coarse", "coarse", 1.0, "random", 0),))]
  if rc.reduction_seeds:
    red = [Member(member_name(rc.reduction_arch, f, c, s), rc.reduction_arch, f, c, s)
           for f in rc.reduction_fractions for c in rc.reduction_criteria for s in range(rc.reduction_seeds)]
    out.append(Group("reduction", rc.reduction_arch, rc.reduction_steps, tuple(red)))
  return out


def flow_of(hp: fm_config.Hp, arch: str) -> fm.FlowConfig:
  """The training config of ``arch``: the coarse model draws ``t ~ U[0, coarse_t_max]``."""
  return dataclasses.replace(hp.flow, t_max=hp.run.coarse_t_max) if arch == "coarse" else hp.flow


@functools.lru_cache(maxsize=None)
def chunk_fn(net: fm.NetConfig, flow: fm.FlowConfig, num_steps: int, mesh):
  """Jitted ``(states [P], data [P, N, ...], labels [P, N], counts [P], keys [P]) -> (states, losses [P, T])``."""
  fn = jax.vmap(functools.partial(fm.core.train_chunk, num_steps=num_steps, net=net, flow=flow))
  sh = mesh_lib.data_sharding(mesh)
  return jax.jit(fn, in_shardings=(sh,) * 5, out_shardings=(sh, sh))


@functools.lru_cache(maxsize=None)
def _init_fn(net: fm.NetConfig, flow: fm.FlowConfig, latent_shape: tuple, mesh):
  fn = jax.vmap(functools.partial(fm.core.init, latent_shape=latent_shape, net=net, flow=flow))
  return jax.jit(fn, in_shardings=mesh_lib.data_sharding(mesh), out_shardings=mesh_lib.data_sharding(mesh))


def _member_keys(seed: int, group_index: int, p: int, purpose: int):
  base = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), group_index), purpose)
  return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(p))


def _sharded(x, mesh):
  x = np.asarray(x)
  return mesh_lib.global_array(x.shape, mesh_lib.data_sharding(mesh), lambda idx: x[idx])


def init_group(config, hp: fm_config.Hp, group: Group, gi: int, latent_shape, mesh):
  """``[P]`` initial states; member ``i`` of group ``gi`` draws its weights from its own seed's key."""
  p = mesh_lib.padded_size(len(group.members), mesh)
  seeds = [m.seed for m in group.members] + [0] * (p - len(group.members))
  keys = jnp.stack([jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), gi), s) for s in seeds])
  keys = jax.device_put(keys, mesh_lib.data_sharding(mesh))
  return _init_fn(hp.net(group.arch), flow_of(hp, group.arch), tuple(latent_shape), mesh)(keys)


def zeros_like_group(hp: fm_config.Hp, group: Group, latent_shape, mesh):
  """Placeholder of a group's state (restore target and checkpoint content before it trains)."""
  p = mesh_lib.padded_size(len(group.members), mesh)
  init = jax.vmap(functools.partial(fm.core.init, latent_shape=tuple(latent_shape), net=hp.net(group.arch),
                                    flow=flow_of(hp, group.arch)))
  abstract = jax.eval_shape(init, jax.ShapeDtypeStruct((p,), jax.random.key(0).dtype))
  sh = mesh_lib.data_sharding(mesh)
  return jax.tree.map(lambda a: jax.device_put(jnp.zeros(a.shape, a.dtype), sh), abstract)


def digest(tree) -> str:
  """SHA-256 of every leaf's bytes (bit-identity across runs and resumes)."""
  h = hashlib.sha256()
  for leaf in jax.tree.leaves(mesh_lib.to_host(tree)):
    h.update(np.ascontiguousarray(leaf).tobytes())
  return h.hexdigest()


def _train_aux(config, hp: fm_config.Hp, data) -> AuxParams:
  """The classifier and the autoencoder, trained (keys ``fold_in(key(seed), 101 | 102)``)."""
  key = jax.random.key(config.seed)
  clf = fm.auxiliary.train_classifier(jax.random.fold_in(key, 101), data["train_x"], data["train_y"], cfg=hp.classifier)
  ae = fm.auxiliary.train_autoencoder(jax.random.fold_in(key, 102), data["train_x"], cfg=hp.autoencoder)
  for name, s in (("classifier", clf), ("autoencoder", ae)):
    bad = np.nonzero(~np.isfinite(np.asarray(s.losses)))[0]
    if bad.size:
      raise ckpt_lib.NonFiniteError(1, [f"{name} loss at training step {int(bad[0]) + 1}"], None)
  return AuxParams(clf.params, ae.params)


def latents_of(hp: fm_config.Hp, aux: AuxParams, images) -> tuple[np.ndarray, float]:
  """Unscaled latents of ``images`` and the scale factor ``1 / std`` (computed on the training images)."""
  z = np.asarray(fm.auxiliary.encode(aux.autoencoder, images, cfg=hp.autoencoder, image_size=images.shape[1]))
  return z, float(1.0 / np.std(z))


def subset_indices(config, hp: fm_config.Hp, member: Member, n: int, features, scores) -> np.ndarray:
  """Training rows of ``member`` (all rows for fraction 1)."""
  if member.fraction >= 1.0:
    return np.arange(n)
  size = scoring.subset_size(n, member.fraction)
  s = hp.scoring
  return scoring.select(member.criterion, size, features=features, scores=scores.get(member.criterion),
                        seed=config.seed * 1000 + member.seed, num_clusters=s.num_clusters,
                        kmeans_iters=s.kmeans_iters, keep=s.keep, herding_bandwidth=s.herding_bandwidth, num_rows=n)


def reduction_scores(config, hp: fm_config.Hp, rc: fm_config.Run, ref_params, z1, labels) -> dict:
  """Loss and gradient scores of every training row under the full-data seed-0 model of ``reduction_arch``."""
  key = jax.random.fold_in(jax.random.key(config.seed), 777)
  net, out = hp.net(rc.reduction_arch), {}
  if "loss" in rc.reduction_criteria:
    out["loss"] = np.asarray(jax.jit(functools.partial(
        fm.core.loss_scores, net=net, flow=hp.flow, num_times=hp.scoring.loss_times,
        num_draws=hp.scoring.loss_draws))(ref_params, z1, labels, key))
  if "gradient" in rc.reduction_criteria:
    out["gradient"] = np.asarray(jax.jit(functools.partial(
        fm.core.grad_scores, net=net, flow=hp.flow, num_draws=hp.scoring.grad_draws))(
            ref_params, z1, labels, jax.random.fold_in(key, 1)))
  return out


def load_data(config, workdir: str) -> dict:
  """Train and test images ``[N, H, W]`` and labels ``[N]`` of ``config.dataset`` (TFDS builder small_images)."""
  data_dir = config.data_dir or os.path.join(workdir, "data")
  image_data.prepare(config.dataset, data_dir)
  train_x, train_y = image_data.load(config.dataset, "train", data_dir)
  test_x, test_y = image_data.load(config.dataset, "test", data_dir)
  return {"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y}


def member_params(state: fm.TrainState, i: int):
  """EMA weights of member ``i`` of a stacked group state (on the host)."""
  return jax.tree.map(lambda x: jnp.asarray(np.asarray(mesh_lib.to_host(x))[i]), state.ema)


def _aux_shapes(hp: fm_config.Hp, data) -> AuxParams:
  x = jnp.zeros((1,) + data["train_x"].shape[1:] + (1,))
  clf = fm.networks.Classifier(hp.classifier).init(jax.random.key(0), x)["params"]
  ae = fm.networks.Autoencoder(hp.autoencoder, x.shape[1]).init(jax.random.key(0), x)["params"]
  return AuxParams(clf, ae)


def restore_or_start(config, hp: fm_config.Hp, groups: list[Group], data, latent_shape, ctx: Context):
  """``(step, RunState)``: the last checkpoint, or a new state with the auxiliary networks trained (step 1)."""
  latest = ctx.latest_step()
  aux_init = AuxParams(*[jax.tree.map(jnp.zeros_like, p) for p in jax.eval_shape(lambda: _aux_shapes(hp, data))])
  template = RunState(aux_init, tuple(zeros_like_group(hp, g, latent_shape, ctx.mesh) for g in groups))
  step, state, _ = ctx.restore_or(template) if latest else (0, template, None)
  if step == 0:
    state = state._replace(aux=_train_aux(config, hp, data))
    ctx.save(1, state, force=True)
    ctx.writer.log(1, stage="auxiliary")
    step = 1
  return step, state


def _group_inputs(config, hp: fm_config.Hp, group: Group, gi: int, z1, labels, features, scores, mesh):
  """The members' training rows ``{name: rows}`` and the sharded ``(data, labels, counts, keys)`` of a chunk."""
  n = len(labels)
  p = mesh_lib.padded_size(len(group.members), mesh)
  idx = [subset_indices(config, hp, m, n, features, scores) for m in group.members]
  subsets = {m.name: i for m, i in zip(group.members, idx)}
  idx += [np.arange(n)] * (p - len(idx))
  rows = np.stack([np.concatenate([i, np.zeros(n - len(i), int)]) for i in idx])
  mdata, mlabels = _sharded(z1[rows], mesh), _sharded(labels[rows], mesh)
  counts = _sharded(np.asarray([len(i) for i in idx], np.int32), mesh)
  keys = jax.device_put(_member_keys(config.seed, gi, p, 1), mesh_lib.data_sharding(mesh))
  return subsets, (mdata, mlabels, counts, keys)


def _check_losses(group: Group, losses, chunk: int, per_chunk: int, step: int, ctx: Context) -> None:
  """Raises :class:`NonFiniteError` naming each model whose loss is not finite and its training step."""
  bad = [(m.name, int(np.nonzero(~np.isfinite(row))[0][0]) + (chunk - 1) * per_chunk + 1)
         for m, row in zip(group.members, losses) if not np.all(np.isfinite(row))]
  if bad:
    raise ckpt_lib.NonFiniteError(
        step, [f"loss of model {name} at training step {s}" for name, s in bad], ctx.latest_step())


def train_groups(config, hp: fm_config.Hp, groups: list[Group], state: RunState, step: int, latent_shape, z1,
                 labels, features, ctx: Context) -> tuple[list, dict]:
  """Trains every group from checkpoint ``step`` on; returns the groups' states and each member's training rows.

  ``z1 [N, ...]`` are the scaled training latents, ``labels [N]`` their
  classes, ``features [N, D]`` the classifier's features (data reduction).
  """
  rc = hp.run
  chunks = [g.steps // min(rc.chunk_steps, g.steps) for g in groups]
  group_states = list(state.groups)
  done_steps = sum(min(max(step - 1 - sum(chunks[:i]), 0), chunks[i]) * (g.steps // chunks[i])
                   for i, g in enumerate(groups))
  progress = metrics_lib.Progress(sum(g.steps for g in groups), unit="steps", start=done_steps)
  subsets = {}
  for gi, group in enumerate(groups):
    offset = 1 + sum(chunks[:gi])
    scores = {}
    if group.name == "reduction":
      ref_group = [g.name for g in groups].index(rc.reduction_arch)
      scores = reduction_scores(config, hp, rc, member_params(group_states[ref_group], 0), z1, labels)
    rows, inputs = _group_inputs(config, hp, group, gi, z1, labels, features, scores, ctx.mesh)
    subsets.update(rows)
    per_chunk = group.steps // chunks[gi]
    fn = chunk_fn(hp.net(group.arch), flow_of(hp, group.arch), per_chunk, ctx.mesh)
    progress.label = f"[flow_matching {group.name}] "
    for c in range(1, chunks[gi] + 1):
      g = offset + c
      if g <= step:
        continue
      if c == 1:
        group_states[gi] = init_group(config, hp, group, gi, latent_shape, ctx.mesh)
      group_states[gi], losses = fn(group_states[gi], *inputs)
      losses = np.asarray(mesh_lib.to_host(losses))[: len(group.members)]
      _check_losses(group, losses, c, per_chunk, g, ctx)
      ctx.writer.log(g, group=group.name, steps=c * per_chunk, loss=float(losses.mean()),
                     steps_per_s=progress.rate(done_steps + per_chunk))
      done_steps += per_chunk
      progress.update(done_steps)
      ctx.save(g, RunState(state.aux, tuple(group_states)), force=c == chunks[gi])
  return group_states, subsets
