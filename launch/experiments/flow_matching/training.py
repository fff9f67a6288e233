"""Training of the ``flow_matching`` experiment: data, feature network, autoencoders, groups of flows.

Checkpoint step 1 holds the frozen feature network (trained once, on the
feature split) and one convolutional autoencoder per seed (vmapped, on the
generative split). Then the flow groups train in order, ``chunk_steps`` steps
per jitted ``lax.scan`` and one checkpoint per chunk; a group's members
(seeds, data subsets) are vmapped and sharded over the mesh's ``data`` axis
(``member_batch`` > 0: as vmapped slices of that many members, one slice after
another inside the chunk, which bounds the activations held at once):

* ``large``: per seed ``s`` the large DiT on all of the generative split
  (``large_s{s}``) and a second one with other flow weights and batches on the
  same autoencoder (``large_alt_s{s}``: the "other seed" of stability);
* ``small``: the small DiT (``small_s{s}``), the coarse model of coarse-to-fine;
* ``reduction``: the large DiT on each criterion's subset at each fraction,
  scored with ``large_s{s}`` (loss, gradient) and the latents (clusters);
* ``conditional``: class-conditional large DiTs whose labels are kept only on
  a subset chosen by each criterion (``all``: every label).

Seed ``s`` of every model shares autoencoder ``s``. After each chunk a
training-curve FID on the first ``curve_samples`` validation noises is
stored in the checkpoint (steps to quality). A NaN in a loss stops the run
naming the model and training step; the last good checkpoint is kept.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from datasets.images import builder as image_builder
from datasets.images import npz_images
from datasets.images import splits
from datasets.images import tfds_catalog
from launch import checkpoint as ckpt_lib
from launch import errors
from launch import mesh as mesh_lib
from launch import metrics as metrics_lib
from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import data_checks
from launch.runtime import Context
from methods import flow_matching as fm
from methods.flow_matching import autoencoder, feature_net, guidance, scoring


class Data(NamedTuple):
  """The protocol's disjoint class-stratified parts (images ``[N, H, W, C]`` in [0, 1], labels ``[N]``)."""

  gen_x: np.ndarray  # autoencoder and flows
  gen_y: np.ndarray
  feat_x: np.ndarray  # feature network training
  feat_y: np.ndarray
  test_x: np.ndarray  # feature-network accuracy, held-out reconstruction error
  test_y: np.ndarray


def load_data(config, hp: fm_config.Hp) -> Data:
  """Reads ``config.dataset`` and splits it (:data:`datasets.images.splits.PROTOCOL_PARTS`, fixed seed).

  Every problem with the data is a :class:`launch.errors.DataError` naming the config key (the
  launcher prints it in one line); the checks of :func:`data_checks.check` run on every source before the split.
  """
  if config.dataset == "mnist5k":
    x, y = image_builder.raw_arrays("mnist5k")
    x = x[..., None]
  elif config.dataset == "npz":
    try:
      x, y = npz_images.load(config.data_file, min_per_class=splits.min_per_class())
    except npz_images.ImageFileError as e:
      raise errors.DataError(f"'data_file': {e}") from e
  else:
    if not config.data_dir:
      raise errors.DataError(f"'data_dir': dataset {config.dataset!r} is read from a TFDS data dir; "
                             + tfds_catalog.PREPARE_HINT.format(name=config.dataset, data_dir="DATA"))
    limit = config.max_images or None
    try:
      parts = [tfds_catalog.load(config.dataset, s, config.data_dir, limit=limit) for s in ("train", "test")]
    except tfds_catalog.CatalogError as e:
      raise errors.DataError(f"'data_dir': {e}") from e
    x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
  data_checks.check(config, hp, x, y)
  idx = splits.stratified_split(np.asarray(y, np.int64))
  y = np.asarray(y, np.int32)
  data_checks.check_subsets(hp, y[idx["generative"]])
  return Data(*(a[idx[p]] for p in ("generative", "feature", "feature_test") for a in (x, y)))


class Member(NamedTuple):
  """One flow model: trained on the latents of autoencoder ``seed``, its weights and batches from ``flow_seed``."""

  name: str
  seed: int
  flow_seed: int
  fraction: float  # kept rows (reduction) or kept labels (conditional)
  criterion: str  # "" for all rows / labels


class Group(NamedTuple):
  name: str
  arch: str  # "large" | "small"
  conditional: bool
  members: tuple


def seeded(name: str, seed: int) -> str:
  """The name of model ``name`` (``"large"``, :func:`reduced`, :func:`conditional`, ...) of seed ``seed``."""
  return f"{name}_s{seed}"


def reduced(criterion: str, fraction: float) -> str:
  """The name (less the seed, :func:`seeded`) of the large models trained on ``fraction`` of the data kept by
  ``criterion``."""
  return f"{criterion}{fm_config.percent(fraction)}"


def conditional(criterion: str) -> str:
  """The name (less the seed) of the guided models trained with the labels kept by ``criterion`` (``""``: all)."""
  return f"cond_{criterion or 'all'}"


def groups_of(rc) -> list[Group]:
  """The training groups in the order they train (``rc``: the root keys, ``Hp.run``)."""
  seeds = range(rc.seeds)
  large = [Member(seeded("large", s), s, s, 1.0, "") for s in seeds]
  large += [Member(seeded("large_alt", s), s, 1000 + s, 1.0, "") for s in seeds]
  out = [Group("large", "large", False, tuple(large)),
         Group("small", "small", False, tuple(Member(seeded("small", s), s, s, 1.0, "") for s in seeds))]
  if rc.reduction_fractions:
    red = [Member(seeded(reduced(c, f), s), s, s, f, c)
           for f in rc.reduction_fractions for c in rc.reduction_criteria for s in seeds]
    out.append(Group("reduction", "large", False, tuple(red)))
  if rc.conditional:
    cond = [Member(seeded(conditional(c), s), s, s, rc.labelled_fraction if c else 1.0, c)
            for c in tuple(rc.reduction_criteria) + ("",) for s in seeds]
    out.append(Group("conditional", "large", True, tuple(cond)))
  return out


def flow_of(hp: fm_config.Hp, group: Group) -> fm.FlowConfig:
  return dataclasses.replace(hp.flow, class_conditional=group.conditional)


class RunState(NamedTuple):
  """Everything a checkpoint holds."""

  features: fm.FitState  # the frozen feature network
  autoencoders: fm.FitState  # leading axis [seeds]
  groups: tuple  # one fm.TrainState per group, leading axis [P] = padded members
  curves: tuple  # one [P, chunks] float32 per group: training-curve FID after each chunk (0: not yet)


def _image_shape(data: Data) -> tuple:
  return tuple(data.gen_x.shape[1:])


def latent_shape(hp: fm_config.Hp, data: Data) -> tuple:
  return autoencoder.latent_shape(_image_shape(data), hp.autoencoder)


def _chunks(hp: fm_config.Hp) -> int:
  return hp.run.flow_steps // hp.run.chunk_steps


@functools.lru_cache(maxsize=None)
def chunk_fn(net: fm.NetConfig, flow: fm.FlowConfig, num_steps: int, mesh, slices: int = 1):
  """Jitted ``(states [P], data [P, N, ...], labels [P, N], counts [P], keys [P]) -> (states, losses [P, T])``.

  ``slices > 1``: the ``P`` members train as ``slices`` vmapped slices of
  ``P / slices`` one after another (``lax.map``; slice ``i`` holds members
  ``i, i + slices, i + 2 slices, ...``), so the activations held at once are
  one slice's. Each member's arithmetic is the same as in one vmap of all.
  """
  fn = jax.vmap(functools.partial(fm.core.train_chunk, num_steps=num_steps, net=net, flow=flow))
  if slices > 1:
    whole = fn

    def fn(*args):
      p = args[-1].shape[0]
      split = lambda a: jnp.swapaxes(a.reshape((p // slices, slices) + a.shape[1:]), 0, 1)  # noqa: E731
      merge = lambda a: jnp.swapaxes(a, 0, 1).reshape((p,) + a.shape[2:])  # noqa: E731
      return jax.tree.map(merge, jax.lax.map(lambda a: whole(*a), jax.tree.map(split, args)))

  sh = mesh_lib.data_sharding(mesh)
  return jax.jit(fn, in_shardings=(sh,) * 5, out_shardings=(sh, sh))


@functools.lru_cache(maxsize=None)
def init_fn(net: fm.NetConfig, flow: fm.FlowConfig, latent: tuple, mesh):
  """Jitted ``keys [P] -> states [P]``, sharded like :func:`chunk_fn`'s (eagerly, the init compiles op by op)."""
  sh = mesh_lib.data_sharding(mesh)
  return jax.jit(jax.vmap(functools.partial(fm.core.init, latent_shape=latent, net=net, flow=flow)),
                 in_shardings=sh, out_shardings=sh)


def init_states(hp, group: Group, latent, keys, mesh):
  """``group``'s fresh flow states, one per key (:func:`init_fn`; under ``eval_shape``, their shapes)."""
  return init_fn(hp.net(group.arch), flow_of(hp, group), tuple(latent), mesh)(keys)


def slices_of(rc, group: Group, mesh) -> tuple[int, int]:
  """``(slices, size)``: ``group`` trains as ``slices`` slices of ``size`` members (``rc.member_batch``).

  ``size`` is a multiple of the mesh size; padding members (copies of member 0)
  fill ``slices * size``.
  """
  m = len(group.members)
  slices = -(-m // rc.member_batch) if rc.member_batch else 1
  return slices, mesh_lib.padded_size(-(-m // slices), mesh)


def _padded(rc, group: Group, mesh) -> int:
  slices, size = slices_of(rc, group, mesh)
  return slices * size


def _keys(seed: int, rc, gi: int, group: Group, mesh, purpose: int):
  """``[P]`` keys ``fold_in(fold_in(fold_in(key(seed), purpose), group), flow_seed)`` (padding: flow seed 0)."""
  p = _padded(rc, group, mesh)
  seeds = [m.flow_seed for m in group.members] + [0] * (p - len(group.members))
  base = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), purpose), gi)
  keys = jnp.stack([jax.random.fold_in(base, s) for s in seeds])
  return jax.device_put(keys, mesh_lib.data_sharding(mesh))


def template(config, hp: fm_config.Hp, groups, data: Data, mesh) -> RunState:
  """Zeros of the checkpoint's shapes (restore target; groups not yet trained are saved as these)."""
  img, latent, sh = _image_shape(data), latent_shape(hp, data), mesh_lib.data_sharding(mesh)
  feat = jax.eval_shape(lambda: feature_net.init(jax.random.key(0), img, hp=hp.features))
  ae = jax.eval_shape(jax.vmap(lambda k: autoencoder.init(k, img, hp=hp.autoencoder)),
                      jax.random.split(jax.random.key(0), hp.run.seeds))
  zeros = functools.partial(jax.tree.map, lambda a: jnp.zeros(a.shape, a.dtype))
  states = []
  for g in groups:
    keys = jax.ShapeDtypeStruct((_padded(hp.run, g, mesh),), jax.random.key(0).dtype)
    abstract = jax.eval_shape(lambda k, g=g: init_states(hp, g, latent, k, mesh), keys)
    states.append(jax.tree.map(lambda a: jax.device_put(jnp.zeros(a.shape, a.dtype), sh), abstract))
  curves = tuple(np.zeros((_padded(hp.run, g, mesh), _chunks(hp)), np.float32) for g in groups)
  return RunState(zeros(feat), zeros(ae), tuple(states), curves)


def _check_fit(name: str, losses) -> None:
  bad = np.argwhere(~np.isfinite(np.asarray(losses)))
  if bad.size:
    raise ckpt_lib.NonFiniteError(1, [f"{name} loss at training step {int(bad[0][-1]) + 1}"], None)


def train_auxiliary(config, hp: fm_config.Hp, data: Data) -> tuple[fm.FitState, fm.FitState]:
  """The feature network (key ``fold_in(key(seed), 101)``) and one autoencoder per seed (``102``, then ``s``)."""
  key, img = jax.random.key(config.seed), _image_shape(data)
  kf = jax.random.fold_in(key, 101)
  feat = feature_net.init(jax.random.fold_in(kf, 0), img, hp=hp.features)
  feat, m = jax.jit(functools.partial(feature_net.train_chunk, num_steps=hp.features.steps, hp=hp.features))(
      feat, jnp.asarray(data.feat_x), jnp.asarray(data.feat_y), jax.random.fold_in(kf, 1))
  _check_fit("feature network", m["loss"])
  ka = jax.random.fold_in(key, 102)
  keys = jnp.stack([jax.random.fold_in(ka, s) for s in range(hp.run.seeds)])
  ae = jax.vmap(lambda k: autoencoder.init(jax.random.fold_in(k, 0), img, hp=hp.autoencoder))(keys)
  train = functools.partial(autoencoder.train_chunk, num_steps=hp.autoencoder.steps, hp=hp.autoencoder)
  ae, m = jax.jit(jax.vmap(lambda s, k: train(s, jnp.asarray(data.gen_x), jax.random.fold_in(k, 1))))(ae, keys)
  _check_fit("autoencoder", m["loss"])
  return feat, ae


def seed_params(stacked, s: int):
  """Member ``s`` of a stacked parameter tree (on the host)."""
  return jax.tree.map(lambda x: jnp.asarray(np.asarray(mesh_lib.to_host(x))[s]), stacked)


def latents(hp: fm_config.Hp, state: RunState, data: Data) -> tuple[list, list]:
  """Per seed: the scaled latents ``[N, h, w, C]`` of the generative split and the scale (``1 / std``)."""
  zs, scales = [], []
  for s in range(hp.run.seeds):
    z = autoencoder.encode(seed_params(state.autoencoders.params, s), jnp.asarray(data.gen_x), hp=hp.autoencoder)
    scale = float(autoencoder.latent_scale(z))
    zs.append(np.asarray(z) * scale)
    scales.append(scale)
  return zs, scales


def restore_or_start(config, hp: fm_config.Hp, groups, data: Data, ctx: Context) -> tuple[int, RunState]:
  """``(step, RunState)``: the last checkpoint, or a new state with the auxiliary networks trained (step 1)."""
  initial = template(config, hp, groups, data, ctx.mesh)
  step, state, _ = ctx.restore_or(initial) if ctx.latest_step() else (0, initial, None)
  if step == 0:
    feat, ae = train_auxiliary(config, hp, data)
    state = state._replace(features=feat, autoencoders=ae)
    ctx.save(1, state, force=True)
    ctx.writer.log(1, stage="auxiliary")
    step = 1
  return step, state


digest = ckpt_lib.tree_digest


def member_params(state: fm.TrainState, i: int):
  """EMA weights of member ``i`` of a stacked group state (on the host)."""
  return seed_params(state.ema, i)


@functools.lru_cache(maxsize=None)
def score_fns(net: fm.NetConfig, flow: fm.FlowConfig, loss_times: int, loss_draws: int, grad_draws: int):
  """Jitted ``(params, z, labels, key) -> [N]`` loss and gradient scores (compiled once for every seed)."""
  loss = jax.jit(functools.partial(fm.core.loss_scores, net=net, flow=flow, num_times=loss_times,
                                   num_draws=loss_draws))
  grad = jax.jit(functools.partial(fm.core.grad_scores, net=net, flow=flow, num_draws=grad_draws))
  return loss, grad


def scores_of(config, hp: fm_config.Hp, large_state, z, labels, s: int) -> dict:
  """Loss and gradient scores of every generative row under ``large_s{s}`` (key ``fold_in(key(seed), 777)``)."""
  key = jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), 777), s)
  params, out, sc = member_params(large_state, s), {}, hp.scoring
  crit = hp.run.reduction_criteria
  z, labels = jnp.asarray(z), jnp.asarray(labels)
  loss, grad = score_fns(hp.large, hp.flow, sc.loss_times, sc.loss_draws, sc.grad_draws)
  if "loss" in crit:
    out["loss"] = np.asarray(loss(params, z, labels, key))
  if "gradient" in crit:
    out["gradient"] = np.asarray(grad(params, z, labels, jax.random.fold_in(key, 1)))
  return out


def subset(config, hp: fm_config.Hp, member: Member, z, scores: dict) -> np.ndarray:
  """Rows chosen by ``member.criterion`` at ``member.fraction`` (clusters / k-center / herding on the latents)."""
  n = len(z)
  if not member.criterion:
    return np.arange(n)
  sc = hp.scoring
  return scoring.select(member.criterion, scoring.subset_size(n, member.fraction), features=z.reshape(n, -1),
                        scores=scores.get(member.criterion), seed=config.seed * 1000 + member.seed,
                        num_clusters=sc.num_clusters, kmeans_iters=sc.kmeans_iters, keep=sc.keep,
                        herding_bandwidth=sc.herding_bandwidth, num_rows=n)


def _sharded(x, mesh):
  x = np.asarray(x)
  return mesh_lib.global_array(x.shape, mesh_lib.data_sharding(mesh), lambda idx: x[idx])


def group_inputs(config, hp: fm_config.Hp, group: Group, zs, labels, scores, mesh):
  """``(rows {member: chosen rows}, (data, labels, counts))``, sharded; padding members repeat member 0."""
  n, nc = len(labels), hp.flow.num_classes
  rows, data, labs, counts = {}, [], [], []
  for m in group.members:
    r = subset(config, hp, m, zs[m.seed], scores.get(m.seed, {}))
    rows[m.name] = r
    if group.conditional:  # every row trains; labels outside the chosen subset are null
      data.append(zs[m.seed])
      labs.append(guidance.mask_labels(labels, r, null_label=nc))
      counts.append(n)
    else:
      data.append(zs[m.seed][np.concatenate([r, np.zeros(n - len(r), int)])])
      labs.append(labels[np.concatenate([r, np.zeros(n - len(r), int)])])
      counts.append(len(r))
  pad = _padded(hp.run, group, mesh) - len(group.members)
  data, labs, counts = data + data[:1] * pad, labs + labs[:1] * pad, counts + counts[:1] * pad
  return rows, (_sharded(np.stack(data), mesh), _sharded(np.stack(labs).astype(np.int32), mesh),
                _sharded(np.asarray(counts, np.int32), mesh))


def _check_losses(group: Group, losses, chunk: int, per_chunk: int, step: int, ctx: Context) -> None:
  bad = [(m.name, int(np.nonzero(~np.isfinite(row))[0][0]) + (chunk - 1) * per_chunk + 1)
         for m, row in zip(group.members, losses) if not np.all(np.isfinite(row))]
  if bad:
    raise ckpt_lib.NonFiniteError(step, [f"loss of model {n} at training step {s}" for n, s in bad],
                                  ctx.latest_step())


# curve_fn(group, stacked EMA params [P]) -> [P] training-curve FIDs (0 where not measured)
CurveFn = Callable[[Group, dict], np.ndarray]


def train_groups(config, hp: fm_config.Hp, groups, state: RunState, step: int, zs, labels, curve_fn: CurveFn,
                 ctx: Context) -> tuple[RunState, dict]:
  """Trains every group from checkpoint ``step`` on; returns the final state and every member's chosen rows."""
  chunks, per = _chunks(hp), hp.run.chunk_steps
  states, curves = list(state.groups), [np.array(c) for c in state.curves]
  done = sum(min(max(step - 1 - gi * chunks, 0), chunks) for gi in range(len(groups))) * per
  progress = metrics_lib.Progress(len(groups) * hp.run.flow_steps, unit="steps", start=done)
  rows, scores = {}, {}
  latent = zs[0].shape[1:]
  for gi, group in enumerate(groups):
    if group.name in ("reduction", "conditional") and not scores:
      scores = {s: scores_of(config, hp, states[0], zs[s], labels, s) for s in range(hp.run.seeds)}
    group_rows, inputs = group_inputs(config, hp, group, zs, labels, scores, ctx.mesh)
    rows.update(group_rows)
    fn = chunk_fn(hp.net(group.arch), flow_of(hp, group), per, ctx.mesh, slices_of(hp.run, group, ctx.mesh)[0])
    keys = _keys(config.seed, hp.run, gi, group, ctx.mesh, 2)  # every chunk's: train_chunk folds in the step
    progress.label = f"[flow_matching {group.name}] "
    for c in range(1, chunks + 1):
      g = 1 + gi * chunks + c
      if g <= step:
        continue
      if c == 1:
        states[gi] = init_states(hp, group, latent, _keys(config.seed, hp.run, gi, group, ctx.mesh, 1), ctx.mesh)
      states[gi], losses = fn(states[gi], *inputs, keys)
      losses = np.asarray(mesh_lib.to_host(losses))[:len(group.members)]
      _check_losses(group, losses, c, per, g, ctx)
      curves[gi][:, c - 1] = curve_fn(group, states[gi].ema)
      ctx.writer.log(g, group=group.name, steps=c * per, loss=float(losses.mean()),
                     curve_fid=float(curves[gi][:len(group.members), c - 1].mean()))
      done += per
      progress.update(done)
      state = RunState(state.features, state.autoencoders, tuple(states), tuple(curves))
      ctx.save(g, state, force=c == chunks)
  return RunState(state.features, state.autoencoders, tuple(states), tuple(curves)), rows
