r"""Sizes of latent flow matching at MNIST scale: parameters, FLOPs, speeds, and the ``cpu`` preset's budget.

  python -m launch.bench.flow_matching_sizes --out=runs/fm_sizes [--quick]
  python -m launch.bench.flow_matching_sizes --large=64,4 --small=32,2 --flow_batch=64
  python -m launch.bench.flow_matching_sizes --preset=paper --samples=2000 --out=runs/fm_sizes_paper  # on a GPU
  python -m launch.bench.flow_matching_sizes --preset=paper --memory   # a chunk's memory per flow group (compiles only)

Measures, on this machine, each network of the proposed ``cpu`` preset
(:data:`CPU`): the autoencoder's and the feature network's training steps,
the DiT's training step at the 7x7x4 latent (49 tokens), the sampling speed
of the large model alone and of coarse-to-fine at several ``t_split`` (one
compiled program), and a 3x3 convolution trained inside ``lax.scan`` as
``lax.conv`` and as a matrix product (:mod:`methods.flow_matching.layers`).
Times are the best of at least ``--repeats`` warm calls
(:func:`launch.bench.timing.timed`; the sampling splits in alternating rounds),
in wall-clock seconds and in the process CPU seconds of that call (the sum over
threads: on a busy machine the CPU time is the steadier measure). Beside them:
parameter counts, analytic and XLA FLOPs per forward, and a projection of the
whole ``cpu`` experiment
(:func:`budget`) from the measured per-step costs and the counts of
:data:`CPU`. Writes ``sizes.json`` and prints a table. ``--preset=paper``
measures and projects the ``paper`` preset of ``launch/configs/flow_matching.py``
instead (on the accelerator it is meant for). ``--memory`` only compiles one
training chunk of every flow group and writes XLA's memory analysis
(``memory.json``): on a CPU, what a chunk will hold on one accelerator, with all
of a group's flows at once and in ``member_batch`` slices.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from launch import mesh as mesh_lib
from launch.bench import timing
from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import training
from methods import flow_matching as fm
from methods.flow_matching import autoencoder, costs, feature_net, layers, samplers

FLAGS = flags.FLAGS
IMAGE = (28, 28, 1)


@dataclasses.dataclass(frozen=True)
class Preset:
  """The sizes and counts of a latent flow-matching experiment (what :func:`budget` multiplies)."""

  ae: fm.LatentAEConfig
  feat: fm.FeatureNetConfig
  large: fm.NetConfig
  small: fm.NetConfig
  flow_batch: int
  flow_steps: int
  flow_lr: float
  sampler_steps: int
  num_samples: int  # per noise set (validation and test)
  seeds: int
  reduction_models: int  # 2 fractions (50%, 25%) x 4 criteria, per seed
  cfg_models: int  # class-conditional models per seed (4 labelled-subset criteria + all labels)
  cfg_scales: int
  t_splits: int  # coarse-to-fine splits evaluated (excluding 0 and 1)


# The proposed `cpu` preset: MNIST-5k split 3000 / 1500 / 500 (generative / feature net / its test).
CPU = Preset(
    ae=fm.LatentAEConfig(channels=8, latent_channels=4, downsample=2, kl_weight=1e-3, steps=1500, batch_size=64),
    feat=fm.FeatureNetConfig(channels=16, features=64, steps=1000, batch_size=128),
    large=fm.NetConfig(width=32, depth=2, heads=4, patch=1, mlp_ratio=4),
    small=fm.NetConfig(width=16, depth=1, heads=2, patch=1, mlp_ratio=2),
    flow_batch=64, flow_steps=1500, flow_lr=1e-2, sampler_steps=20, num_samples=2000, seeds=3, reduction_models=8,
    cfg_models=5, cfg_scales=3, t_splits=5)


def define_flags() -> None:
  flags.DEFINE_string("out", "runs/fm_sizes", "Output directory.")
  flags.DEFINE_bool("quick", False, "Fewer repeats and samples (a smoke test of the script).")
  flags.DEFINE_integer("repeats", 3, "Warm calls timed; the best counts.")
  flags.DEFINE_list("large", [], "width,depth of the large DiT (default: the cpu preset's).")
  flags.DEFINE_list("small", [], "width,depth of the small DiT (default: the cpu preset's).")
  flags.DEFINE_integer("flow_batch", 0, "Flow training batch (0: the preset's).")
  flags.DEFINE_bool("memory", False, "Only compile one training chunk of every flow group of --preset's config "
                    "(every member at once, and in member_batch slices) and print XLA's memory analysis; runs "
                    "nothing, so it answers on a CPU what a chunk will hold on the accelerator.")
  flags.DEFINE_integer("memory_rows", 42_000, "--memory: generative latents per member (full MNIST's generative "
                       "split: 42,000).", lower_bound=1)
  flags.DEFINE_integer("samples", 0, "Samples per timed sampling call (0: the preset's num_samples).", lower_bound=0)
  flags.DEFINE_enum("preset", "cpu", ["cpu", "paper"], "Sizes and counts: CPU (above) or the paper preset of "
                    "launch/configs/flow_matching.py (projected on the machine at hand: run it on the accelerator).")


def trained_like(net: fm.NetConfig, flow: fm.FlowConfig, latent: tuple[int, ...], seed: int):
  """Velocity-network parameters at init plus 0.05 N(0, 1) noise: non-zero output layers, as after training."""
  state = fm.core.init(jax.random.key(seed), latent, net=net, flow=flow)
  leaves, tree = jax.tree.flatten(state.params)
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  return jax.tree.unflatten(tree, [x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


def _per_step(name, fn, args, steps, repeats, **extra):
  t = timing.timed(fn, *args, repeats=repeats)
  return {"what": name, "unit": "train step", "wall_s": t.warm / steps, "cpu_s": t.cpu / steps,
          "steps_per_s_wall": steps / t.warm, "compile_s": t.compile_seconds, **extra}


def measure_training(p: Preset, repeats: int, chunk: int) -> list[dict]:
  """Train-step costs of the autoencoder, the feature network and both DiTs (one ``lax.scan`` of ``chunk``)."""
  rng = np.random.default_rng(0)
  images = jnp.asarray(rng.uniform(size=(3000,) + IMAGE), jnp.float32)
  labels = jnp.asarray(rng.integers(0, 10, 3000), jnp.int32)
  rows = []
  ae_state = autoencoder.init(jax.random.key(0), IMAGE, hp=p.ae)
  fn = jax.jit(functools.partial(autoencoder.train_chunk, num_steps=chunk, hp=p.ae))
  enc, dec = costs.autoencoder_flops(p.ae, IMAGE)
  rows.append(_per_step("autoencoder", lambda: fn(ae_state, images, jax.random.key(1)), (), chunk, repeats,
                        params=costs.param_count(ae_state.params), fwd_flops=enc + dec, batch=p.ae.batch_size))
  ft_state = feature_net.init(jax.random.key(0), IMAGE, hp=p.feat)
  fn2 = jax.jit(functools.partial(feature_net.train_chunk, num_steps=chunk, hp=p.feat))
  rows.append(_per_step("feature net", lambda: fn2(ft_state, images, labels, jax.random.key(1)), (), chunk, repeats,
                        params=costs.param_count(ft_state.params), fwd_flops=costs.feature_net_flops(p.feat, IMAGE),
                        batch=p.feat.batch_size))
  lat = autoencoder.latent_shape(IMAGE, p.ae)
  data = jnp.asarray(rng.standard_normal((3000,) + lat), jnp.float32)
  for name, net in (("large DiT", p.large), ("small DiT", p.small)):
    flow = fm.FlowConfig(batch_size=p.flow_batch, learning_rate=p.flow_lr)
    state = fm.core.init(jax.random.key(0), lat, net=net, flow=flow)
    fn3 = jax.jit(functools.partial(fm.core.train_chunk, num_steps=chunk, net=net, flow=flow))
    _, apply = fm.core.make_velocity(net, flow)
    xla = costs.xla_flops(lambda q, x: apply(q, x, jnp.zeros(x.shape[0])), state.params, data[:8]) / 8
    rows.append(_per_step(f"{name} w{net.width} d{net.depth} ({lat[0] * lat[1] // net.patch**2} tokens)",
                          lambda s=state, f=fn3: f(s, data, labels, jnp.int32(3000), jax.random.key(1)), (), chunk,
                          repeats, params=costs.param_count(state.params), fwd_flops=costs.dit_flops(net, lat),
                          xla_fwd_flops=xla, batch=p.flow_batch))
  return rows


def measure_sampling(p: Preset, repeats: int, num_samples: int) -> list[dict]:
  """Samples per second: large alone and coarse-to-fine (one jitted program, ``t_split`` traced)."""
  lat = autoencoder.latent_shape(IMAGE, p.ae)
  flow = fm.FlowConfig()
  params = {"small": trained_like(p.small, flow, lat, 1), "large": trained_like(p.large, flow, lat, 1)}
  _, small = fm.core.make_velocity(p.small, flow)
  _, large = fm.core.make_velocity(p.large, flow)
  fn = jax.jit(lambda ps, pl, x, t: samplers.coarse_to_fine(lambda y, s: small(ps, y, s), lambda y, s: large(pl, y, s),
                                                            x, t_split=t, num_steps=p.sampler_steps))
  x0 = jax.random.normal(jax.random.key(3), (num_samples,) + lat)
  fs, fl = costs.dit_flops(p.small, lat), costs.dit_flops(p.large, lat)
  splits = (0.0, 0.4, 0.6, 0.8, 1.0)
  timed = timing.timed_together([(fn, (params["small"], params["large"], x0, jnp.float32(t))) for t in splits],
                                repeats=repeats)
  rows, base = [], timed[0]
  for t, r in zip(splits, timed):
    model = costs.coarse_to_fine_cost(t, num_steps=p.sampler_steps, solver="euler", small_flops=fs, large_flops=fl)
    rows.append({"what": f"sampling t_split {t:g} ({p.sampler_steps} euler steps, {num_samples} samples)",
                 "unit": "batch", "wall_s": r.warm, "cpu_s": r.cpu, "samples_per_s_wall": num_samples / r.warm,
                 "speedup_wall": base.warm / r.warm, "speedup_cpu": base.cpu / r.cpu, "speedup_flops": model.speedup,
                 "compile_s": r.compile_seconds})
  return rows


def measure_conv_in_scan(repeats: int) -> list[dict]:
  """A 3x3 convolution's training step inside ``lax.scan``: ``lax.conv`` against the matrix-product form."""
  x = jax.random.normal(jax.random.key(0), (64, 14, 14, 16))
  w = 0.1 * jax.random.normal(jax.random.key(1), (3, 3, 16, 16))
  convs = {
      "lax.conv": lambda w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                          dimension_numbers=("NHWC", "HWIO", "NHWC")),
      "matmul (im2col)": lambda w: layers.im2col3x3(x) @ w.reshape(-1, 16),
  }
  rows = []
  for name, conv in convs.items():
    step = lambda w, _, conv=conv: (w - 1e-3 * jax.grad(lambda v: jnp.mean(conv(v) ** 2))(w), None)  # noqa: E731
    fn = jax.jit(lambda w, step=step: jax.lax.scan(step, w, None, length=20)[0])
    rows.append(_per_step(f"3x3 conv 16->16 on 64x14x14 in lax.scan: {name}", fn, (w,), 20, repeats))
  return rows


def budget(p: Preset, per_step: dict, sample_step_s: dict) -> dict:
  """Projected seconds of the whole ``cpu`` experiment from measured unit costs.

  Args:
    p: the preset (counts).
    per_step: seconds per training step of ``"autoencoder"``, ``"feature net"``, ``"large"``, ``"small"``.
    sample_step_s: seconds per sample per solver step of ``"large"`` and ``"small"``.

  Returns:
    Seconds per stage and ``"total"``. Sampling counts validation and test
    noises for every model, every coarse-to-fine split and every guidance
    scale (guided: two forwards); decoding, features, scores and metrics are
    not included.
  """
  n, k = p.num_samples, p.sampler_steps
  unguided = 2 + p.reduction_models  # per seed: the large model, its other-flow-seed copy, the reduction models
  large_models = p.seeds * (unguided + p.cfg_models)
  out = {
      "autoencoders": p.seeds * p.ae.steps * per_step["autoencoder"],
      "feature net": p.feat.steps * per_step["feature net"],
      "large-model trainings": large_models * p.flow_steps * per_step["large"],
      "small-model trainings": p.seeds * p.flow_steps * per_step["small"],
      "sampling, unguided": 2 * n * k * (p.seeds * unguided * sample_step_s["large"]
                                         + p.seeds * sample_step_s["small"]),
      "sampling, coarse-to-fine": 2 * n * k * p.seeds * p.t_splits * 0.5 * (sample_step_s["large"]
                                                                           + sample_step_s["small"]),
      "sampling, guided": n * k * p.seeds * p.cfg_models * p.cfg_scales * 2 * sample_step_s["large"],
  }
  out["total"] = sum(out.values())
  return out


def paper_preset() -> Preset:
  """The ``paper`` preset of ``launch/configs/flow_matching.py`` (its networks and counts) as a :class:`Preset`."""
  hp = fm_config.hparams_of(fm_config.get_config("paper"))
  rc = hp.run
  return Preset(ae=hp.autoencoder, feat=hp.features, large=hp.large, small=hp.small, flow_batch=hp.flow.batch_size,
                flow_steps=rc.flow_steps, flow_lr=hp.flow.learning_rate, sampler_steps=hp.sampler.steps,
                num_samples=hp.protocol.num_samples, seeds=rc.seeds,
                reduction_models=len(rc.reduction_fractions) * len(rc.reduction_criteria),
                cfg_models=len(rc.reduction_criteria) + 1, cfg_scales=len(hp.protocol.guidance_scales),
                t_splits=len(rc.t_splits) - 2)


def training_memory(preset: str, rows: int, member_batch: int | None = None,
                    groups: tuple[str, ...] = ()) -> list[dict]:
  """XLA's memory analysis of one training chunk of every flow group of config ``preset`` (compiled, not run).

  Each group (or only those named in ``groups``) at ``member_batch`` 0 (every
  member vmapped at once) and at the preset's value or ``member_batch``
  (slices one after another), on one device, with ``rows`` training latents
  per member. ``temp_gib`` is what the chunk's activations and scratch take;
  the arguments (states, latents) and outputs are beside it.
  """
  hp = fm_config.hparams_of(fm_config.get_config(preset))
  sliced = hp.run.member_batch if member_batch is None else member_batch
  mesh = mesh_lib.make_mesh(1)
  latent = autoencoder.latent_shape(IMAGE, hp.autoencoder)
  gib = lambda b: b / 2**30  # noqa: E731
  out = []
  for group in training.groups_of(hp.run):
    if groups and group.name not in groups:
      continue
    net, flow = hp.net(group.arch), training.flow_of(hp, group)
    for member_batch in sorted({0, sliced}):
      slices, size = training.slices_of(dataclasses.replace(hp.run, member_batch=member_batch), group, mesh)
      p = slices * size
      keys = jax.ShapeDtypeStruct((p,), jax.random.key(0).dtype)
      states = jax.eval_shape(lambda k, group=group: training.init_states(hp, group, latent, k, mesh), keys)
      args = (states, jax.ShapeDtypeStruct((p, rows) + latent, jnp.float32), jax.ShapeDtypeStruct((p, rows), jnp.int32),
              jax.ShapeDtypeStruct((p,), jnp.int32), keys)
      fn = training.chunk_fn(net, flow, hp.run.chunk_steps, mesh, slices)
      m = fn.lower(*args).compile().memory_analysis()
      out.append({"group": group.name, "members": len(group.members), "member_batch": member_batch,
                  "slices": slices, "slice": size, "temp_gib": gib(m.temp_size_in_bytes),
                  "argument_gib": gib(m.argument_size_in_bytes), "output_gib": gib(m.output_size_in_bytes)})
      print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in out[-1].items()), flush=True)
  return out


def _preset_from_flags() -> Preset:
  p = CPU if FLAGS.preset == "cpu" else paper_preset()
  if FLAGS.large:
    p = dataclasses.replace(p, large=dataclasses.replace(p.large, width=int(FLAGS.large[0]),
                                                         depth=int(FLAGS.large[1])))
  if FLAGS.small:
    p = dataclasses.replace(p, small=dataclasses.replace(p.small, width=int(FLAGS.small[0]),
                                                         depth=int(FLAGS.small[1])))
  if FLAGS.flow_batch:
    p = dataclasses.replace(p, flow_batch=FLAGS.flow_batch)
  return p


def main(argv):
  del argv
  if FLAGS.memory:
    result = {"preset": FLAGS.preset, "rows": FLAGS.memory_rows, "backend": jax.default_backend(),
              "memory": training_memory(FLAGS.preset, FLAGS.memory_rows)}
    os.makedirs(FLAGS.out, exist_ok=True)
    with open(os.path.join(FLAGS.out, "memory.json"), "w") as f:
      json.dump(result, f, indent=2)
    return
  p = _preset_from_flags()
  repeats = 1 if FLAGS.quick else FLAGS.repeats
  train = measure_training(p, repeats, chunk=5 if FLAGS.quick else 20)
  n_sampled = 200 if FLAGS.quick else FLAGS.samples or p.num_samples
  sample = measure_sampling(p, repeats, num_samples=n_sampled)
  conv = measure_conv_in_scan(repeats)
  result = {"preset": repr(p), "load_average": os.getloadavg(), "cpu_count": os.cpu_count(),
            "training": train, "sampling": sample, "conv_in_scan": conv}
  for clock in ("wall_s", "cpu_s"):
    per_step = {"autoencoder": train[0][clock], "feature net": train[1][clock], "large": train[2][clock],
                "small": train[3][clock]}
    per_sample_step = {"large": sample[0][clock] / (n_sampled * p.sampler_steps),
                       "small": sample[-1][clock] / (n_sampled * p.sampler_steps)}
    result[f"budget_{clock}"] = budget(p, per_step, per_sample_step)
  os.makedirs(FLAGS.out, exist_ok=True)
  with open(os.path.join(FLAGS.out, "sizes.json"), "w") as f:
    json.dump(result, f, indent=2, default=str)
  print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
  define_flags()
  app.run(main)
