"""Hyperparameters of latent flow matching: one declaration each.

Briq, Kamp, Fried, Cohen, Kesselheim, "Exploring and Exploiting Stability in
Latent Flow Matching" (ICML 2026, arXiv 2605.08398): the velocity networks
(a small and a large one), the flow-matching training (Sec. 2), the ODE
sampler with its coarse-to-fine split (Sec. 5), the in-repo autoencoder that
defines the latent space, the in-repo feature network of FID / KID, the
evaluation protocol and the data-reduction scores (Sec. 6).
"""

from __future__ import annotations

import dataclasses

from methods.common import hparams

FIXED_SOLVERS = ("euler", "midpoint", "heun")
ADAPTIVE_SOLVERS = ("dopri5",)  # diffrax's adaptive Dopri5 (Kidger, 2021)
SOLVERS = FIXED_SOLVERS + ADAPTIVE_SOLVERS
SCORE_KEEP = ("high", "low")


@dataclasses.dataclass(frozen=True)
class NetConfig(hparams.Hyperparameters):
  """A DiT-style velocity network ``v(x_t, t, y)`` on latent patches (Peebles & Xie, 2023)."""

  width: int = hparams.field(64, "Token width (DiT hidden size).", low=8)
  depth: int = hparams.field(2, "Transformer blocks.", low=1)
  heads: int = hparams.field(4, "Attention heads.", low=1)
  patch: int = hparams.field(1, "Latent patch side (tokens = (h/p)(w/p)).", low=1)
  mlp_ratio: int = hparams.field(4, "MLP hidden size / width.", low=1)

  def checks(self):
    if self.width % self.heads:
      yield "heads", f"{self.heads} does not divide width={self.width}"


@dataclasses.dataclass(frozen=True)
class FlowConfig(hparams.Hyperparameters):
  """Conditional flow matching training with the linear path (Lipman et al., 2023, Eq. 23; paper Sec. 2)."""

  batch_size: int = hparams.field(128, "Latents per training step.", low=1)
  learning_rate: float = hparams.field(1e-3, "Adam learning rate.", low=0, low_open=True)
  grad_clip: float = hparams.field(1.0, "Global gradient-norm clip.", low=0, low_open=True)
  ema_decay: float = hparams.field(0.999, "EMA decay of the weights (paper: 0.9999).", low=0, high=1, high_open=True)
  class_conditional: bool = hparams.field(False, "Condition the velocity on the class label.")
  label_dropout: float = hparams.field(0.1, "Probability of the null label in training (class-conditional only).",
                                       low=0, high=1, high_open=True)
  num_classes: int = hparams.field(10, "Classes of the labels.", low=1)
  t_max: float = hparams.field(
      1.0, "Training times t ~ U[0, t_max]; < 1: a time-restricted coarse model (coarse-to-fine sampling).",
      low=0, high=1, low_open=True, config=False)


@dataclasses.dataclass(frozen=True)
class SamplerConfig(hparams.Hyperparameters):
  """ODE sampling from t = 0 (noise) to t = 1 (data); the coarse-to-fine split.

  ``euler`` / ``midpoint`` / ``heun`` take ``steps`` uniform steps;
  ``dopri5`` is diffrax's adaptive Dormand-Prince 5(4) (Kidger, "On Neural
  Differential Equations", 2021) with tolerances ``rtol`` / ``atol`` (the batch
  is one ODE system, so all its samples share the step sizes).
  """

  solver: str = hparams.field("euler", "ODE solver (dopri5: diffrax adaptive, ignores steps).", choices=SOLVERS)
  steps: int = hparams.field(60, "Uniform solver steps over [0, 1] (paper: 60 Euler steps).", low=1, high=10_000)
  t_split: float = hparams.field(0.7, "Coarse-to-fine: small model for t < t_split, large for t >= t_split.",
                                 low=0, high=1)
  rtol: float = hparams.field(1e-4, "Relative tolerance of the adaptive solver.", low=0, low_open=True)
  atol: float = hparams.field(1e-4, "Absolute tolerance of the adaptive solver.", low=0, low_open=True)
  max_steps: int = hparams.field(4096, "Step limit of the adaptive solver (per segment).", low=1)


@dataclasses.dataclass(frozen=True)
class ScoringConfig(hparams.Hyperparameters):
  """Sample scores for data reduction (paper Sec. 6)."""

  num_clusters: int = hparams.field(10, "Cosine k-means clusters.", low=1)
  kmeans_iters: int = hparams.field(30, "Lloyd iterations.", low=1)
  loss_times: int = hparams.field(8, "K: loss score on t = linspace(0, 1, K + 2)[1:-1].", low=1)
  loss_draws: int = hparams.field(4, "Fixed noise draws per sample and t.", low=1)
  grad_draws: int = hparams.field(2, "Noise/t draws per sample of the gradient score.", low=1)
  keep: str = hparams.field("high", "Loss/gradient scores keep the highest or the lowest scores.", choices=SCORE_KEEP)
  herding_bandwidth: float = hparams.field(1.0, "RBF bandwidth of kernel herding (x median distance).",
                                           low=0, low_open=True)


@dataclasses.dataclass(frozen=True)
class LatentAEConfig(hparams.Hyperparameters):
  """The convolutional (variational) autoencoder whose latent grid the flows model (:mod:`autoencoder`).

  ``kl_weight = 0`` is a deterministic autoencoder; ``kl_weight > 0`` a VAE
  whose KL term (per latent element, against ``N(0, I)``) is weighted by it,
  as the KL-regularised autoencoders of latent diffusion (Rombach et al.,
  CVPR 2022, Sec. 3) use a small weight. The flows model the posterior mean.
  """

  channels: int = hparams.field(8, "Channels of the first conv stage (doubled per stride-2 stage).", low=1)
  latent_channels: int = hparams.field(4, "Latent channels C of the [H/2^d, W/2^d, C] grid.", low=1)
  downsample: int = hparams.field(2, "Stride-2 stages d (28x28 -> 7x7 at d = 2).", low=1, high=4)
  kl_weight: float = hparams.field(1e-3, "Weight of the per-element KL to N(0, I); 0: deterministic.", low=0)
  steps: int = hparams.field(1500, "Adam steps (the cosine learning-rate decay's length).", low=1)
  batch_size: int = hparams.field(64, "Images per step.", low=1)
  learning_rate: float = hparams.field(2e-3, "Peak Adam learning rate (cosine decay to 10%).", low=0,
                                       low_open=True)


@dataclasses.dataclass(frozen=True)
class FeatureNetConfig(hparams.Hyperparameters):
  """The CNN classifier whose penultimate layer is the FID/KID feature space (:mod:`feature_net`)."""

  channels: int = hparams.field(16, "Channels of the first conv (the second has twice as many).", low=1)
  features: int = hparams.field(64, "Penultimate feature dimension (FID/KID space).", low=2)
  steps: int = hparams.field(1000, "Adam steps (the cosine learning-rate decay's length).", low=1)
  batch_size: int = hparams.field(128, "Images per step.", low=1)
  learning_rate: float = hparams.field(2e-3, "Peak Adam learning rate (cosine decay to 10%).", low=0,
                                       low_open=True)
  num_classes: int = hparams.field(10, "Classes.", low=2)


@dataclasses.dataclass(frozen=True)
class ProtocolConfig(hparams.Hyperparameters):
  """The evaluation protocol, fixed before any result (:mod:`evaluation`).

  A coarse-to-fine split (or any cheaper model) has comparable quality when
  its mean FID over seeds is at most ``(1 + fid_margin)`` times the large
  model's and its mean KID at most ``(1 + kid_margin)`` times the large
  model's, both measured on the validation noises; the chosen ``t_split`` is
  then reported on the separate test noises.
  """

  num_samples: int = hparams.field(2000, "Generated samples per model and noise set (paired across models).", low=2)
  fid_margin: float = hparams.field(0.1, "Comparable quality: FID <= (1 + margin) x the reference's.", low=0)
  kid_margin: float = hparams.field(0.1, "Comparable quality: KID <= (1 + margin) x the reference's.", low=0)
  kid_subset: int = hparams.field(1000, "KID subset size (mean of unbiased MMD^2 over subsets).", low=2)
  kid_subsets: int = hparams.field(10, "KID subsets drawn.", low=1)
  level: float = hparams.field(0.95, "Confidence level of the intervals over seeds.", low=0, high=1,
                               low_open=True, high_open=True)
  guidance_scales: tuple[float, ...] = hparams.field((0.0, 1.0, 2.0), "Classifier-free guidance scales w.", low=0,
                                                     nonempty=True, unique=True)
