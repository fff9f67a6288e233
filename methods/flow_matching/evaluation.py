"""The evaluation protocol: paired noises, FID / KID with intervals over seeds, t_split choice.

Protocol (fixed before any result; :class:`~methods.flow_matching.config.ProtocolConfig`):

* Every model samples the same noises (:func:`noise_sets`): a validation set
  that chooses ``t_split`` and a separate test set that reports it. Sample
  ``i`` of every model comes from the same ``x0``, so differences between
  models are paired.
* FID (Heusel et al., NeurIPS 2017) and KID (Binkowski et al., ICLR 2018:
  unbiased MMD^2 with the kernel ``(x.y / d + 1)^3``, averaged over subsets)
  in the frozen feature network's features
  (:mod:`methods.flow_matching.feature_net`).
* At least 3 training seeds per model. A model's FID or KID is reported as the
  mean over seeds with a Student-t interval (:func:`mean_interval`); two
  models are compared by the per-seed paired difference and its t-interval
  (:func:`paired_difference`), seed ``s`` of both sharing the autoencoder and
  the noises.
* Comparable quality (:func:`comparable`): mean FID within ``fid_margin`` and
  mean KID within ``kid_margin`` of the reference's, relative.

All functions here are host code in NumPy float64 (deterministic), except
:func:`noise_sets`, which draws with JAX, and :func:`sample_quality`, which
decodes and embeds with the (jitted) networks first.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import jax
import numpy as np
from scipy import stats

from methods.flow_matching import autoencoder
from methods.flow_matching import feature_net
from methods.flow_matching import metrics
from methods.flow_matching.config import FeatureNetConfig, LatentAEConfig, ProtocolConfig


class Interval(NamedTuple):
  """A mean over seeds with its two-sided Student-t confidence interval."""

  mean: float
  lo: float
  hi: float
  se: float  # standard error of the mean (sample sd / sqrt(n)); nan for n = 1
  n: int  # number of seeds


def _seed_vector(values, name: str) -> np.ndarray:
  v = np.asarray(values, np.float64)
  if v.ndim != 1 or v.size < 1:
    raise ValueError(f"{name} must be a non-empty [seeds] vector; got shape {v.shape}")
  if not np.all(np.isfinite(v)):
    raise ValueError(f"{name} has non-finite entries at seeds {np.nonzero(~np.isfinite(v))[0].tolist()}")
  return v


def mean_interval(values: Sequence[float], *, level: float = 0.95) -> Interval:
  """Mean of ``values [S]`` (one per seed) and its ``level`` t-interval (``S - 1`` degrees of freedom).

  With ``S = 1`` the interval is ``(-inf, inf)`` and ``se`` is nan (one seed
  says nothing about the seed-to-seed spread).
  """
  v = _seed_vector(values, "values")
  n, m = v.size, float(v.mean())
  if n == 1:
    return Interval(m, -math.inf, math.inf, math.nan, 1)
  se = float(v.std(ddof=1) / math.sqrt(n))
  half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
  return Interval(m, m - half, m + half, se, n)


def paired_difference(a: Sequence[float], b: Sequence[float], *, level: float = 0.95) -> Interval:
  """``mean_s (a_s - b_s)`` with its t-interval: model A minus model B, seed ``s`` of both paired.

  Pairing removes what seed ``s`` shares between the two models (its
  autoencoder, its noises), so the interval is narrower than that of two
  independent means when the per-seed values are positively correlated.
  """
  a, b = _seed_vector(a, "a"), _seed_vector(b, "b")
  if a.shape != b.shape:
    raise ValueError(f"paired seeds differ: a has {a.size} seeds, b has {b.size}")
  return mean_interval(a - b, level=level)


def frechet_gaussians(mu_a, cov_a, mu_b, cov_b) -> float:
  """Closed-form Frechet (2-Wasserstein^2) distance of ``N(mu_a, cov_a)`` and ``N(mu_b, cov_b)``.

  ``||mu_a - mu_b||^2 + tr(cov_a + cov_b - 2 (cov_a^1/2 cov_b cov_a^1/2)^1/2)``
  (Dowson & Landau, 1982): the population value that FID estimates from
  feature samples (:func:`fid`).
  """
  mu_a, mu_b = np.asarray(mu_a, np.float64), np.asarray(mu_b, np.float64)
  cov_a, cov_b = np.asarray(cov_a, np.float64), np.asarray(cov_b, np.float64)
  w, v = np.linalg.eigh(cov_a)
  ra = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
  cross = np.sqrt(np.clip(np.linalg.eigvalsh(ra @ cov_b @ ra), 0, None)).sum()
  return float(np.sum(np.square(mu_a - mu_b)) + np.trace(cov_a) + np.trace(cov_b) - 2 * cross)


def fid(real_features, fake_features) -> float:
  """FID: :func:`frechet_gaussians` at the sample means and covariances of two ``[N, F]`` feature sets."""
  return metrics.frechet_distance(real_features, fake_features)


def feature_rms(real_features) -> float:
  """Root-mean-square of the real features' entries: the unit :func:`sample_quality` divides by before KID."""
  return float(np.sqrt(np.mean(np.square(np.asarray(real_features, np.float64)))))


def kid_unit(real_features) -> float:
  """``1 / feature_rms(real_features)``, the scale of KID's features; a ``ValueError`` when it has none.

  Real features that are all zero (images with no variation, or a dead
  feature network) have no root-mean-square to divide by: no unit makes KIDs
  of different models comparable, so none is made up.
  """
  rms = feature_rms(real_features)
  if rms == 0.0:
    raise ValueError(f"KID has no feature unit: all {np.size(real_features)} entries of the real features are 0 "
                     "(feature_rms = 0), so the feature network maps every reference image to the origin; the "
                     "reference images must vary and the feature network must not be dead")
  return 1.0 / rms


def kid(real_features, fake_features, *, subset: int = 1000, subsets: int = 10, seed: int = 0,
        feature_scale: float = 1.0) -> float:
  """KID: the mean over ``subsets`` draws of the unbiased MMD^2 (:func:`metrics.kid`) of subsets.

  Each draw takes ``min(subset, N)`` rows of each set without replacement
  (Binkowski et al., 2018, Sec. 3); every draw is unbiased, so their mean is.
  ``seed`` fixes the subsets. Both sets are multiplied by ``feature_scale``
  first: the kernel ``(x.y / d + 1)^3`` is not scale-invariant, and Inception
  features, for which it was chosen, have ``x.y / d`` of order one.
  """
  real = np.asarray(real_features, np.float64) * feature_scale
  fake = np.asarray(fake_features, np.float64) * feature_scale
  if real.ndim != 2 or fake.ndim != 2 or real.shape[1] != fake.shape[1]:
    raise ValueError(f"KID needs [N, F] feature sets of one F; got {real.shape} and {fake.shape}")
  rng = np.random.default_rng(seed)
  m, n = min(subset, len(real)), min(subset, len(fake))
  if m < 2 or n < 2:
    raise ValueError(f"KID needs >= 2 rows per set; got {len(real)} real and {len(fake)} generated")
  vals = [metrics.kid(real[rng.choice(len(real), m, replace=False)], fake[rng.choice(len(fake), n, replace=False)])
          for _ in range(subsets)]
  return float(np.mean(vals))


class SampleQuality(NamedTuple):
  """Quality of one model's samples on one noise set (:func:`sample_quality`)."""

  fid: float
  kid: float
  features: np.ndarray  # [N, F] feature-network features of the decoded samples (stability metrics use them)
  logits: np.ndarray  # [N, classes] (conditional accuracy, class entropy)


def sample_quality(latents: jax.Array, real_features, *, scale: float | jax.Array, ae_params, ae_hp: LatentAEConfig,
                   feat_params, feat_hp: FeatureNetConfig, protocol: ProtocolConfig, image_channels: int = 1,
                   seed: int = 0) -> SampleQuality:
  """Decodes flow samples, embeds them with the frozen feature network, and scores them against real features.

  KID is computed on features divided by :func:`feature_rms` of the real
  features (a fixed unit per feature network, so KIDs of different models are
  comparable); real features that are all zero have no such unit and raise a
  ``ValueError`` (:func:`kid_unit`).

  Args:
    latents: ``[N, h, w, C]`` flow samples ``x1`` in the scaled latent space.
    real_features: ``[M, F]`` features of the reference images (the
      generative training split).
    scale: the latent scale the flows were trained with
      (:func:`methods.flow_matching.autoencoder.latent_scale`); samples are
      decoded as ``decode(x1 / scale)``.
    ae_params, ae_hp: the autoencoder.
    feat_params, feat_hp: the frozen feature network.
    protocol: KID subset size and count.
    image_channels: channels of the decoded images.
    seed: KID's subsets.
  """
  unit = kid_unit(real_features)  # before decoding: a set with no unit fails at once
  images = autoencoder.decode(ae_params, latents / scale, hp=ae_hp, image_channels=image_channels)
  logits, feats = (np.asarray(a) for a in feature_net.embed(feat_params, images, hp=feat_hp))
  return SampleQuality(fid(real_features, feats),
                       kid(real_features, feats, subset=protocol.kid_subset, subsets=protocol.kid_subsets, seed=seed,
                           feature_scale=unit),
                       feats, logits)


class NoiseSets(NamedTuple):
  """The noises every model samples from (identical across models: paired)."""

  val: jax.Array  # [M, h, w, C] chooses t_split (and any other setting)
  test: jax.Array  # [M, h, w, C] reports the chosen setting


def noise_sets(key: jax.Array, latent_shape: tuple[int, ...], num_samples: int) -> NoiseSets:
  """Validation and test noises ``x0 ~ N(0, I)`` from ``fold_in(key, 0)`` and ``fold_in(key, 1)``."""
  shape = (num_samples,) + tuple(latent_shape)
  return NoiseSets(jax.random.normal(jax.random.fold_in(key, 0), shape),
                   jax.random.normal(jax.random.fold_in(key, 1), shape))


def balanced_labels(num_samples: int, num_classes: int) -> np.ndarray:
  """``[num_samples]`` int32 ``i mod num_classes``: equal class counts for class-conditional sampling."""
  return (np.arange(num_samples) % num_classes).astype(np.int32)


def comparable(fid_value: float, kid_value: float, fid_ref: float, kid_ref: float, *, fid_margin: float,
               kid_margin: float) -> bool:
  """``fid <= (1 + fid_margin) fid_ref`` and ``kid <= (1 + kid_margin) kid_ref`` (the fixed margin)."""
  return bool(fid_value <= (1 + fid_margin) * fid_ref and kid_value <= (1 + kid_margin) * kid_ref)


class SplitChoice(NamedTuple):
  """The ``t_split`` chosen on validation noises (:func:`choose_t_split`)."""

  t_split: float  # the chosen split (0.0 = the large model alone)
  index: int  # its position in ``t_splits``
  passes: np.ndarray  # [T] bool, comparable quality at each split (mean over seeds)
  fid_ratio: np.ndarray  # [T] mean FID / mean reference FID
  kid_ratio: np.ndarray  # [T] mean KID / mean reference KID


def choose_t_split(t_splits: Sequence[float], fid_val, kid_val, fid_ref, kid_ref, *, fid_margin: float,
                   kid_margin: float) -> SplitChoice:
  """The largest ``t_split`` such that it and every smaller split have comparable quality.

  Args:
    t_splits: ``[T]`` increasing splits; include 0.0 (the large model alone).
    fid_val, kid_val: ``[S, T]`` coarse-to-fine FID / KID per seed and split,
      on the validation noises.
    fid_ref, kid_ref: ``[S]`` the large model's FID / KID per seed (same noises).
    fid_margin, kid_margin: the protocol's fixed relative margins.

  Returns:
    The choice; report the chosen split's FID / KID on the test noises.
    Requiring every smaller split to pass as well (a passing prefix) keeps a
    noisy pass at a large split from being chosen past a failing one.
  """
  ts = np.asarray(t_splits, np.float64)
  fv, kv = np.asarray(fid_val, np.float64), np.asarray(kid_val, np.float64)
  if ts.ndim != 1 or np.any(np.diff(ts) <= 0):
    raise ValueError(f"t_splits must be strictly increasing; got {ts.tolist()}")
  if fv.shape != kv.shape or fv.ndim != 2 or fv.shape[1] != ts.size:
    raise ValueError(f"fid_val and kid_val must be [seeds, {ts.size}]; got {fv.shape} and {kv.shape}")
  fr, kr = _seed_vector(fid_ref, "fid_ref"), _seed_vector(kid_ref, "kid_ref")
  if fr.size != fv.shape[0] or kr.size != fv.shape[0]:
    raise ValueError(f"fid_ref / kid_ref must have {fv.shape[0]} seeds; got {fr.size} and {kr.size}")
  f_mean, k_mean = fv.mean(0), kv.mean(0)
  passes = np.array([comparable(f, k, fr.mean(), kr.mean(), fid_margin=fid_margin, kid_margin=kid_margin)
                     for f, k in zip(f_mean, k_mean)])
  prefix = np.cumprod(passes).astype(bool)
  index = int(np.nonzero(prefix)[0][-1]) if prefix.any() else 0
  return SplitChoice(float(ts[index]), index, passes, f_mean / fr.mean(), k_mean / kr.mean())


def steps_to_quality(steps: Sequence[int], fids, *, margin: float) -> int:
  """Training steps until the FID stays within ``margin`` of its final value.

  Args:
    steps: ``[K]`` increasing evaluation steps.
    fids: ``[K]`` FID at those steps (or ``[S, K]``: the mean over seeds is used).
    margin: relative margin (the protocol's ``fid_margin``).

  Returns:
    The first ``steps[k]`` with ``fid[j] <= (1 + margin) fid[-1]`` for every ``j >= k``.
  """
  s, f = np.asarray(steps), np.asarray(fids, np.float64)
  f = f.mean(0) if f.ndim == 2 else f
  if s.ndim != 1 or f.shape != s.shape:
    raise ValueError(f"steps [K] and fids [K] or [S, K] disagree: {s.shape} vs {np.asarray(fids).shape}")
  ok = f <= (1 + margin) * f[-1]
  suffix = np.flip(np.cumprod(np.flip(ok))).astype(bool)  # ok from k to the end
  return int(s[np.argmax(suffix)])


def conditional_accuracy(logits, labels) -> float:
  """Fraction of class-conditional samples the feature network classifies as their label."""
  logits, labels = np.asarray(logits), np.asarray(labels)
  if logits.ndim != 2 or labels.shape != logits.shape[:1]:
    raise ValueError(f"logits [N, classes] and labels [N] disagree: {logits.shape} vs {labels.shape}")
  return float(np.mean(np.argmax(logits, 1) == labels))
