r"""One-seed pilot of the latent flow-matching protocol on MNIST-5k at the ``cpu`` preset's sizes.

  python -m launch.bench.flow_matching_pilot --out=runs/fm_pilot [--seed=0] [--flow_steps=N] [--small=24,2,2,4]

Runs every stage once, with the method-level API the experiment uses:
the protocol split (3000 / 1500 / 500), the feature network on its own
split and its test accuracy, the autoencoder (reconstruction MSE on held-out
digits and the FID of reconstructions: the floor a flow can reach), the
large and the small DiT on the scaled latents, and, on the validation noises,
FID / KID of the large and small models alone and of coarse-to-fine at
several ``t_split`` (one compiled sampler), with the FLOP cost model.
One seed says nothing about seed-to-seed spread: this is a sizing check
(do the numbers rank the models?), not a result. Writes ``pilot.json``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from datasets.images import builder as image_builder
from datasets.images import splits
from launch.bench import flow_matching_sizes
from methods import flow_matching as fm
from methods.flow_matching import autoencoder, costs, evaluation, feature_net, samplers

FLAGS = flags.FLAGS
T_SPLITS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def define_flags() -> None:
  flags.DEFINE_string("out", "runs/fm_pilot", "Output directory.")
  flags.DEFINE_integer("seed", 0, "Seed of every network and of the noises.")
  flags.DEFINE_integer("flow_steps", 0, "Flow training steps (0: the cpu preset's).")
  flags.DEFINE_integer("chunk", 250, "Training steps per jitted call.")
  flags.DEFINE_list("small", [], "width,depth,heads,mlp_ratio of the small DiT (default: the cpu preset's).")


def _train(chunk_fn, state, steps: int, chunk: int):
  if steps % chunk:
    raise ValueError(f"--chunk={chunk} does not divide {steps} training steps")
  for _ in range(steps // chunk):
    state, metrics = chunk_fn(state)
  return state, jax.tree.map(lambda m: float(np.mean(np.asarray(m)[-50:])), metrics)


def _protocol_data():
  images, labels = image_builder.raw_arrays("mnist5k")
  parts = splits.stratified_split(labels)
  return {k: (jnp.asarray(images[v][..., None]), jnp.asarray(labels[v].astype(np.int32))) for k, v in parts.items()}


def main(argv):
  del argv
  p = flow_matching_sizes.CPU
  if FLAGS.small:
    w, d, h, r = (int(v) for v in FLAGS.small)
    p = dataclasses.replace(p, small=fm.NetConfig(width=w, depth=d, heads=h, patch=1, mlp_ratio=r))
  flow_steps = FLAGS.flow_steps or p.flow_steps
  key = jax.random.key(FLAGS.seed)
  data = _protocol_data()
  (gx, _), (fx, fy), (tx, ty) = data["generative"], data["feature"], data["feature_test"]
  out, t0 = {"preset": repr(p), "flow_steps": flow_steps}, time.perf_counter()

  feat = feature_net.init(jax.random.fold_in(key, 1), gx.shape[1:], hp=p.feat)
  fchunk = jax.jit(functools.partial(feature_net.train_chunk, num_steps=FLAGS.chunk, hp=p.feat))
  feat, _ = _train(lambda s: fchunk(s, fx, fy, jax.random.fold_in(key, 2)), feat, p.feat.steps, FLAGS.chunk)
  out["feature_net_test_accuracy"] = float(feature_net.accuracy(feat.params, tx, ty, hp=p.feat))
  real = np.asarray(feature_net.embed(feat.params, gx, hp=p.feat)[1])
  held_out = np.asarray(feature_net.embed(feat.params, tx, hp=p.feat)[1])
  out["fid_real_train_vs_held_out_500"] = evaluation.fid(real, held_out)

  ae = autoencoder.init(jax.random.fold_in(key, 3), gx.shape[1:], hp=p.ae)
  achunk = jax.jit(functools.partial(autoencoder.train_chunk, num_steps=FLAGS.chunk, hp=p.ae))
  ae, out["autoencoder_train_metrics"] = _train(lambda s: achunk(s, gx, jax.random.fold_in(key, 4)), ae, p.ae.steps,
                                                FLAGS.chunk)
  out["reconstruction_mse_held_out"] = float(jnp.mean(autoencoder.reconstruction_mse(ae.params, tx, hp=p.ae)))
  rec = autoencoder.reconstruct(ae.params, gx, hp=p.ae)
  out["fid_reconstructions"] = evaluation.fid(real, np.asarray(feature_net.embed(feat.params, rec, hp=p.feat)[1]))
  z = autoencoder.encode(ae.params, gx, hp=p.ae)
  scale = autoencoder.latent_scale(z)
  lat = z.shape[1:]
  out["seconds_auxiliary"] = time.perf_counter() - t0

  flow = fm.FlowConfig(batch_size=p.flow_batch, learning_rate=p.flow_lr)
  params = {}
  for name, net in (("large", p.large), ("small", p.small)):
    t1 = time.perf_counter()
    st = fm.core.init(jax.random.fold_in(key, 5), lat, net=net, flow=flow)
    chunk = jax.jit(functools.partial(fm.core.train_chunk, num_steps=FLAGS.chunk, net=net, flow=flow))
    labels = jnp.zeros(z.shape[0], jnp.int32)
    st, losses = _train(lambda s, c=chunk: c(s, z * scale, labels, jnp.int32(z.shape[0]), jax.random.fold_in(key, 6)),
                        st, flow_steps, FLAGS.chunk)
    params[name] = st.ema
    out[f"{name}_final_loss"], out[f"seconds_train_{name}"] = losses, time.perf_counter() - t1

  _, small_apply = fm.core.make_velocity(p.small, flow)
  _, large_apply = fm.core.make_velocity(p.large, flow)
  sample = jax.jit(lambda x0, t: samplers.coarse_to_fine(lambda x, s: small_apply(params["small"], x, s),
                                                         lambda x, s: large_apply(params["large"], x, s), x0,
                                                         t_split=t, num_steps=p.sampler_steps))
  noises = evaluation.noise_sets(jax.random.fold_in(key, 7), lat, p.num_samples)
  fs, fl = costs.dit_flops(p.small, lat), costs.dit_flops(p.large, lat)
  rows = []
  for t in T_SPLITS:
    t1 = time.perf_counter()
    x1 = sample(noises.val, jnp.float32(t))
    q = evaluation.sample_quality(x1, real, scale=scale, ae_params=ae.params, ae_hp=p.ae, feat_params=feat.params,
                                  feat_hp=p.feat, protocol=fm.ProtocolConfig(num_samples=p.num_samples))
    rows.append({"t_split": t, "fid": q.fid, "kid": q.kid,
                 "flop_speedup": costs.coarse_to_fine_cost(t, num_steps=p.sampler_steps, solver="euler",
                                                           small_flops=fs, large_flops=fl).speedup,
                 "seconds": time.perf_counter() - t1})
  out["coarse_to_fine_val"] = rows
  out["params"] = {k: costs.param_count(v) for k, v in params.items()}
  out["flops_per_forward"] = {"small": fs, "large": fl}
  out["seconds_total"] = time.perf_counter() - t0
  os.makedirs(FLAGS.out, exist_ok=True)
  with open(os.path.join(FLAGS.out, "pilot.json"), "w") as f:
    json.dump(out, f, indent=2)
  print(json.dumps(out, indent=2))


if __name__ == "__main__":
  define_flags()
  app.run(main)
