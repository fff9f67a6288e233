"""Latent flow matching: stability, coarse-to-fine sampling and sample scoring (ICML 2026).

Briq, Kamp, Fried, Cohen, Kesselheim, "Exploring and Exploiting Stability in
Latent Flow Matching" (arXiv 2605.08398):

* :mod:`core`: conditional flow matching with the linear path (noise at
  ``t = 0``, data at ``t = 1``), EMA weights, class-conditional option, one-jit
  training; per-sample loss and gradient scores.
* :mod:`samplers`: Euler / midpoint / Heun on a uniform grid, diffrax adaptive
  Dopri5, coarse-to-fine sampling (small model for ``t < t_split``) and its
  cost model.
* :mod:`networks`: the DiT velocity network (width / depth as hyperparameters),
  the latent autoencoder and the feature classifier (both trained in-repo:
  reconstruction of the paper's VQ autoencoder and pretrained feature nets).
* :mod:`metrics`: paired stability metrics with shuffled baselines; FID, KID,
  precision/recall in classifier features; sliced Wasserstein on latents.
* :mod:`scoring`: data-reduction subsets (clustering, loss, gradient, random,
  k-center, herding).
"""

from methods.flow_matching import auxiliary
from methods.flow_matching import core
from methods.flow_matching import metrics
from methods.flow_matching import networks
from methods.flow_matching import samplers
from methods.flow_matching import scoring
from methods.flow_matching.config import AutoencoderConfig
from methods.flow_matching.config import ClassifierConfig
from methods.flow_matching.config import FlowConfig
from methods.flow_matching.config import NetConfig
from methods.flow_matching.config import SamplerConfig
from methods.flow_matching.config import ScoringConfig
from methods.flow_matching.core import TrainState
