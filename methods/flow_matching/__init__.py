"""Latent flow matching: stability, coarse-to-fine sampling and sample scoring (ICML 2026).

Briq, Kamp, Fried, Cohen, Kesselheim, "Exploring and Exploiting Stability in
Latent Flow Matching" (arXiv 2605.08398):

* :mod:`core`: conditional flow matching with the linear path (noise at
  ``t = 0``, data at ``t = 1``), EMA weights, class-conditional option with
  label dropout, one-jit training; per-sample loss and gradient scores.
* :mod:`samplers`: Euler / midpoint / Heun on a uniform grid, diffrax adaptive
  Dopri5, coarse-to-fine sampling (small model for ``t < t_split``, traced
  ``t_split``: one compilation for every split).
* :mod:`guidance`: classifier-free guidance ``v_y + w (v_y - v_null)`` and
  labels of a partly labelled training set.
* :mod:`networks`: the DiT velocity network (width / depth / patch as
  hyperparameters).
* :mod:`autoencoder`: the convolutional (KL-regularised) autoencoder whose
  7x7xC latent grid the flows model at 28x28 (reconstruction of the paper's
  VQ autoencoder); pure init / step training, resumable.
* :mod:`feature_net`: the frozen CNN classifier whose features define FID /
  KID, trained on a held-out split (replaces pretrained Inception / DINOv2).
* :mod:`layers`: convolutions as matrix products (fast inside ``lax.scan`` on
  CPUs).
* :mod:`evaluation`: the protocol: paired noise sets, FID / KID, intervals
  over seeds, paired differences, ``t_split`` chosen on validation noises at a
  fixed margin, steps to quality, conditional accuracy.
* :mod:`costs`: parameter and FLOP counts of every network, training FLOPs
  and the coarse-to-fine FLOP cost model.
* :mod:`metrics`: paired stability metrics with shuffled baselines; the
  Frechet distance and the unbiased MMD^2 of KID.
* :mod:`scoring`: data-reduction subsets (clustering, loss, gradient, random,
  k-center, herding).
"""

from methods.flow_matching import autoencoder
from methods.flow_matching import core
from methods.flow_matching import costs
from methods.flow_matching import evaluation
from methods.flow_matching import feature_net
from methods.flow_matching import fitting
from methods.flow_matching import guidance
from methods.flow_matching import layers
from methods.flow_matching import metrics
from methods.flow_matching import networks
from methods.flow_matching import samplers
from methods.flow_matching import scoring
from methods.flow_matching.config import FeatureNetConfig
from methods.flow_matching.config import FlowConfig
from methods.flow_matching.config import LatentAEConfig
from methods.flow_matching.config import NetConfig
from methods.flow_matching.config import ProtocolConfig
from methods.flow_matching.config import SamplerConfig
from methods.flow_matching.config import ScoringConfig
from methods.flow_matching.core import TrainState
from methods.flow_matching.fitting import FitState
