"""Evaluation of the ``flow_matching`` experiment under the protocol of :mod:`methods.flow_matching.evaluation`.

Fixed before any result (the config's ``protocol`` section): every model
samples the same validation and test noises (``fold_in(key(seed), 999)``);
FID / KID are computed in the frozen feature network's features against the
generative split; every model has ``seeds`` training seeds and is reported as
the mean over seeds with a Student-t interval; two models are compared by the
per-seed paired difference (seed ``s`` of both shares autoencoder ``s`` and
the noises). Coarse-to-fine runs the small model for ``t < t_split`` and the
large one after; ``t_split`` is the largest split whose mean FID and KID on
the validation noises are within the fixed margins of the large model's (and
every smaller split's too), and its quality is reported on the test noises.

Sampling splits the noises over the mesh's ``data`` axis (padded to a
multiple of its size), with the parameters replicated: every device integrates
its share of the samples, ``sample_batch`` of them at a time (a ``lax.map``
over slices of its share, :func:`on_mesh`). On CPUs a slice of a handful of
samples keeps the network's activations in cache and integrates several
times faster than the whole share at once; on a GPU ``sample_batch = 0`` (the
whole share) is the fast choice. The training-curve sampler runs every
member of a group on each slice, so its slices hold ``sample_batch / members``
samples (at least one).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax.sharding import Mesh
from jax.sharding import PartitionSpec

from launch import mesh as mesh_lib
from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import training
from methods import flow_matching as fm
from methods.flow_matching import autoencoder, costs, evaluation, feature_net, guidance, samplers


class Env(NamedTuple):
  """What every evaluation shares: the frozen networks, per-seed autoencoders and scales, noises, real features."""

  hp: fm_config.Hp
  feat: dict  # feature-network params
  ae: list  # per seed: autoencoder params
  scales: list  # per seed: latent scale
  real: np.ndarray  # [M, F] features of the generative split
  noises: evaluation.NoiseSets
  channels: int  # image channels
  mesh: Mesh
  placed: evaluation.NoiseSets  # the noises split over the mesh (see :func:`split`)


def split(x, mesh: Mesh) -> jax.Array:
  """``x [N, ...]`` as a global array split over ``mesh``'s ``data`` axis, padded with copies of row 0."""
  x = np.asarray(mesh_lib.to_host(x))
  pad = mesh_lib.padded_size(len(x), mesh) - len(x)
  if pad:
    x = np.concatenate([x, np.repeat(x[:1], pad, axis=0)])
  return mesh_lib.global_array(x.shape, mesh_lib.data_sharding(mesh), lambda idx: x[idx])


def replicate(env: Env, tree):
  """Parameters (one pytree) copied to every device of the mesh."""
  return jax.device_put(tree, mesh_lib.replicated(env.mesh))


def gather(x, n: int) -> np.ndarray:
  """The first ``n`` samples (rows) of a sharded output, on the host."""
  return np.asarray(mesh_lib.to_host(x))[:n]


def make_env(config, hp: fm_config.Hp, state: training.RunState, data: training.Data, scales, mesh: Mesh) -> Env:
  feat = state.features.params
  real = np.asarray(feature_net.embed(feat, jnp.asarray(data.gen_x), hp=hp.features)[1])
  lat = training.latent_shape(hp, data)
  noises = evaluation.noise_sets(jax.random.fold_in(jax.random.key(config.seed), 999), lat, hp.protocol.num_samples)
  ae = [training.seed_params(state.autoencoders.params, s) for s in range(hp.run.seeds)]
  placed = evaluation.NoiseSets(*(split(x, mesh) for x in noises))
  return Env(hp, feat, ae, list(scales), real, noises, data.gen_x.shape[-1], mesh, placed)


def on_mesh(fn, mesh: Mesh, batch: int, num_rep: int):
  """Jitted ``fn(*rep, *rows)``: ``rep`` (the first ``num_rep`` arguments) replicated, ``rows`` split over the mesh.

  Every device integrates its own share of the rows (a ``shard_map``, no
  collectives) ``batch`` rows at a time (``lax.map`` with ``batch_size``,
  which keeps a slice's activations in cache); ``batch = 0``: the whole
  share at once. The output is split like the rows.
  """

  def local(*args):
    rep, rows = args[:num_rep], args[num_rep:]
    if batch <= 0:
      return fn(*rep, *rows)
    one = lambda r: jax.tree.map(lambda y: y[0], fn(*rep, *(x[None] for x in r)))  # noqa: E731
    return jax.lax.map(one, rows, batch_size=min(batch, rows[0].shape[0]))

  rep, rows = PartitionSpec(), PartitionSpec(mesh_lib.DATA)

  def mapped(*args):
    specs = (rep,) * num_rep + (rows,) * (len(args) - num_rep)
    return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=rows, check_vma=False)(*args)

  return jax.jit(mapped)


@functools.lru_cache(maxsize=None)
def c2f_fn(small: fm.NetConfig, large: fm.NetConfig, flow: fm.FlowConfig, steps: int, solver: str, mesh: Mesh,
           batch: int):
  """Jitted ``(small_params, large_params, t_split, x0 [B, ...]) -> x1``: one program for every split."""
  _, sa = fm.core.make_velocity(small, flow)
  _, la = fm.core.make_velocity(large, flow)
  return on_mesh(lambda ps, pl, t, x0: samplers.coarse_to_fine(
      lambda x, s: sa(ps, x, s), lambda x, s: la(pl, x, s), x0, t_split=t, num_steps=steps, solver=solver),
      mesh, batch, 3)


@functools.lru_cache(maxsize=None)
def guided_fn(net: fm.NetConfig, flow: fm.FlowConfig, steps: int, solver: str, mesh: Mesh, batch: int):
  """Jitted ``(params, w, x0 [B, ...], y [B]) -> x1`` of classifier-free guidance (one program for every ``w``)."""
  _, apply = fm.core.make_velocity(net, flow)
  return on_mesh(lambda p, w, x0, y: guidance.sample_guided(apply, p, x0, y, scale=w, null_label=flow.num_classes,
                                                             num_steps=steps, solver=solver), mesh, batch, 2)


@functools.lru_cache(maxsize=None)
def _stacked_fn(net: fm.NetConfig, flow: fm.FlowConfig, steps: int, solver: str, mesh: Mesh, batch: int):
  """Jitted ``(stacked params [P], x0 [B, ...]) -> x1 [B, P, ...]``: every member from the same noises."""
  _, apply = fm.core.make_velocity(net, flow)
  one = lambda p, x0: samplers.sample(lambda x, t: apply(p, x, t), x0, num_steps=steps, solver=solver)  # noqa: E731
  return on_mesh(lambda ps, x0: jnp.moveaxis(jax.vmap(one, in_axes=(0, None))(ps, x0), 0, 1), mesh, batch, 1)


def score(env: Env, s: int, x1, *, images: bool = False) -> dict:
  """FID, KID, features and logits (and decoded images) of latents ``x1`` decoded by autoencoder ``s``."""
  hp = env.hp
  q = evaluation.sample_quality(x1, env.real, scale=env.scales[s], ae_params=env.ae[s], ae_hp=hp.autoencoder,
                                feat_params=env.feat, feat_hp=hp.features, protocol=hp.protocol,
                                image_channels=env.channels, seed=s)
  out = {"fid": q.fid, "kid": q.kid, "feat": q.features, "logits": q.logits, "lat": np.asarray(x1)}
  if images:
    out["img"] = np.asarray(autoencoder.decode(env.ae[s], x1 / env.scales[s], hp=hp.autoencoder,
                                               image_channels=env.channels))
  return out


def curve_fn(env: Env, group: training.Group, ema) -> np.ndarray:
  """``[P]`` training-curve FIDs of a group's members on the first ``curve_samples`` validation noises."""
  hp, p = env.hp, jax.tree.leaves(ema)[0].shape[0]
  out = np.zeros(p, np.float32)
  if group.conditional:
    return out
  n = hp.run.curve_samples
  batch = max(1, hp.run.sample_batch // p) if hp.run.sample_batch else 0
  fn = _stacked_fn(hp.net(group.arch), hp.flow, hp.sampler.steps, hp.sampler.solver, env.mesh, batch)
  x1 = gather(fn(replicate(env, mesh_lib.to_host(ema)), split(env.noises.val[:n], env.mesh)), n)
  for i, m in enumerate(group.members):
    q = evaluation.sample_quality(jnp.asarray(x1[:, i]), env.real, scale=env.scales[m.seed], ae_params=env.ae[m.seed],
                                  ae_hp=hp.autoencoder, feat_params=env.feat, feat_hp=hp.features,
                                  protocol=hp.protocol, image_channels=env.channels)
    out[i] = q.fid
  return out


def interval(values, level: float) -> dict:
  i = evaluation.mean_interval(values, level=level)
  return {"mean": i.mean, "lo": i.lo, "hi": i.hi, "se": i.se, "n": i.n, "per_seed": [float(v) for v in values]}


def paired(a, b, level: float) -> dict:
  i = evaluation.paired_difference(a, b, level=level)
  return {"mean": i.mean, "lo": i.lo, "hi": i.hi, "se": i.se, "n": i.n}


def auxiliary_scores(env: Env, data: training.Data) -> dict:
  """Feature-network test accuracy; per seed the held-out reconstruction MSE and the FID of reconstructions."""
  hp, lv = env.hp, env.hp.protocol.level
  acc = float(feature_net.accuracy(env.feat, jnp.asarray(data.test_x), jnp.asarray(data.test_y), hp=hp.features))
  test_feat = np.asarray(feature_net.embed(env.feat, jnp.asarray(data.test_x), hp=hp.features)[1])
  mse, rec_fid = [], []
  for s, ae in enumerate(env.ae):
    mse.append(float(jnp.mean(autoencoder.reconstruction_mse(ae, jnp.asarray(data.test_x), hp=hp.autoencoder))))
    rec = autoencoder.reconstruct(ae, jnp.asarray(data.gen_x), hp=hp.autoencoder)
    rec_fid.append(evaluation.fid(env.real, np.asarray(feature_net.embed(env.feat, rec, hp=hp.features)[1])))
  return {"feature_test_accuracy": acc, "reconstruction_mse_held_out": interval(mse, lv),
          "fid_reconstructions": interval(rec_fid, lv),
          "fid_held_out_real": evaluation.fid(env.real, test_feat), "n_held_out_real": int(len(test_feat))}


def sample_unconditional(env: Env, groups, params: dict) -> dict:
  """Test-noise samples of every unconditional model alone (large at ``t_split = 0``, small at 1)."""
  hp = env.hp
  out = {}
  for g in groups:
    if g.conditional:
      continue
    for m in g.members:
      small, large = (m.name, training.seeded("large", m.seed)) if g.arch == "small" else (
          training.seeded("small", m.seed), m.name)
      x1 = sample_c2f(env, params[small], params[large], "test", 1.0 if g.arch == "small" else 0.0)
      out[m.name] = score(env, m.seed, x1, images=True)
  return out


def sample_c2f(env: Env, small, large, noises: str, t_split: float) -> np.ndarray:
  """Coarse-to-fine samples from the ``noises`` set (``"val"`` or ``"test"``), split over the mesh."""
  hp = env.hp
  fn = c2f_fn(hp.small, hp.large, hp.flow, hp.sampler.steps, hp.sampler.solver, env.mesh, hp.run.sample_batch)
  x1 = fn(replicate(env, small), replicate(env, large), replicate(env, jnp.float32(t_split)),
          getattr(env.placed, noises))
  return gather(x1, len(getattr(env.noises, noises)))


def sample_guided(env: Env, net: fm.NetConfig, flow: fm.FlowConfig, params, labels, w: float) -> np.ndarray:
  """Guided samples of the test noises with ``labels [N]`` at scale ``w``, split over the mesh."""
  hp = env.hp
  fn = guided_fn(net, flow, hp.sampler.steps, hp.sampler.solver, env.mesh, hp.run.sample_batch)
  n = len(env.noises.test)
  return gather(fn(replicate(env, params), replicate(env, jnp.float32(w)), env.placed.test, split(labels, env.mesh)),
                n)


def coarse_to_fine(env: Env, params: dict, alone: dict) -> dict:
  """Validation FID / KID per split and seed, the split chosen at the fixed margin, its test quality and costs."""
  hp, rc, pr = env.hp, env.hp.run, env.hp.protocol
  ts = sorted(rc.t_splits)
  fid_val, kid_val = np.zeros((rc.seeds, len(ts))), np.zeros((rc.seeds, len(ts)))
  pair = [(params[training.seeded("small", s)], params[training.seeded("large", s)]) for s in range(rc.seeds)]
  for s in range(rc.seeds):
    for j, t in enumerate(ts):
      q = score(env, s, sample_c2f(env, *pair[s], "val", t))
      fid_val[s, j], kid_val[s, j] = q["fid"], q["kid"]
  choice = evaluation.choose_t_split(ts, fid_val, kid_val, fid_val[:, 0], kid_val[:, 0], fid_margin=pr.fid_margin,
                                     kid_margin=pr.kid_margin)
  test = [score(env, s, sample_c2f(env, *pair[s], "test", choice.t_split),
                images=True) for s in range(rc.seeds)]
  fid_l = [alone[training.seeded("large", s)]["fid"] for s in range(rc.seeds)]
  kid_l = [alone[training.seeded("large", s)]["kid"] for s in range(rc.seeds)]
  lat = tuple(env.noises.val.shape[1:])
  fs, fl = costs.dit_flops(hp.small, lat), costs.dit_flops(hp.large, lat)
  rows = []
  for j, t in enumerate(ts):
    cost = costs.coarse_to_fine_cost(t, num_steps=hp.sampler.steps, solver=hp.sampler.solver, small_flops=fs,
                                     large_flops=fl)
    rows.append({"t_split": t, "fid_val": interval(fid_val[:, j], pr.level), "kid_val": interval(kid_val[:, j],
                 pr.level), "fid_ratio": float(choice.fid_ratio[j]), "kid_ratio": float(choice.kid_ratio[j]),
                 "passes": bool(choice.passes[j]), "small_forwards": cost.small_forwards,
                 "large_forwards": cost.large_forwards, "speedup_flops": cost.speedup})
  chosen = rows[choice.index]
  return {"rows": rows, "t_split": choice.t_split, "speedup_flops": chosen["speedup_flops"],
          "fid_test": interval([q["fid"] for q in test], pr.level),
          "kid_test": interval([q["kid"] for q in test], pr.level),
          "fid_test_minus_large": paired([q["fid"] for q in test], fid_l, pr.level),
          "kid_test_minus_large": paired([q["kid"] for q in test], kid_l, pr.level),
          "fid_ratio_test": float(np.mean([q["fid"] for q in test]) / np.mean(fid_l)),
          "kid_ratio_test": float(np.mean([q["kid"] for q in test]) / np.mean(kid_l)),
          "rule": f"mean FID <= (1 + {pr.fid_margin:g}) x large's and mean KID <= (1 + {pr.kid_margin:g}) x large's "
                  f"on the validation noises, at this split and every smaller one"}, test


def model_costs(env: Env, data: training.Data, params: dict) -> dict:
  """Parameters, forward FLOPs per sample and training FLOPs of every network."""
  hp = env.hp
  lat, img = tuple(env.noises.val.shape[1:]), tuple(data.gen_x.shape[1:])
  out = {}
  for arch in ("large", "small"):
    f = costs.dit_flops(hp.net(arch), lat)
    out[arch] = {"params": costs.param_count(params[f"{arch}_s0"]), "forward_flops": f,
                 "training_flops": costs.training_flops(f, steps=hp.run.flow_steps, batch_size=hp.flow.batch_size),
                 "training_steps": hp.run.flow_steps}
  enc, dec = costs.autoencoder_flops(hp.autoencoder, img)
  out["autoencoder"] = {"params": costs.param_count(env.ae[0]), "forward_flops": enc + dec,
                        "training_flops": costs.training_flops(enc + dec, steps=hp.autoencoder.steps,
                                                               batch_size=hp.autoencoder.batch_size)}
  out["feature_net"] = {"params": costs.param_count(env.feat),
                        "forward_flops": costs.feature_net_flops(hp.features, img)}
  return out
