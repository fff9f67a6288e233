"""FLOP and parameter counts of every network, and the cost model of coarse-to-fine sampling.

Counts are analytic: a multiply-add is 2 FLOPs, and only matrix products and
convolutions are counted (layer norms, activations, softmax and additions are
a small share here; :func:`xla_flops` gives XLA's own count, which includes
them, for comparison). Training FLOPs use the usual rule that a backward pass
costs twice a forward pass (Kaplan et al., "Scaling Laws for Neural Language
Models", 2020, Sec. 2.1: ``C ~ 6 N`` per token = 3 x the forward's ``2 N``).

Coarse-to-fine sampling (Briq et al., ICML 2026, Sec. 5) with ``N`` uniform
steps of a solver with ``q`` velocity evaluations per step, ``k`` of them on
the small model (:func:`methods.flow_matching.samplers.small_steps`), costs
``q (k C_small + (N - k) C_large)`` per sample against ``q N C_large`` for the
large model alone; :func:`coarse_to_fine_cost` reports both and the ratio.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax

from methods.flow_matching import samplers
from methods.flow_matching.config import FeatureNetConfig, LatentAEConfig, NetConfig

BACKWARD_FACTOR = 3.0  # forward + backward = 3 x forward (Kaplan et al., 2020)


def _dense(n_in: int, n_out: int, rows: int = 1) -> int:
  return 2 * rows * n_in * n_out


def _conv(h_out: int, w_out: int, k: int, c_in: int, c_out: int) -> int:
  return 2 * h_out * w_out * k * k * c_in * c_out


def dit_flops(net: NetConfig, latent_shape: tuple[int, int, int], *, conditional: bool = False) -> int:
  """Forward FLOPs of one sample through :class:`methods.flow_matching.networks.DiT`.

  With ``T = (h / p)(w / p)`` tokens of width ``d``, ``L`` blocks and MLP
  ratio ``r``: patch embedding ``2 T p^2 c d``, time MLP ``4 d^2``, per block
  adaLN ``12 d^2``, QKV and output projections ``8 T d^2``, attention
  ``4 T^2 d``, MLP ``4 r T d^2``; final adaLN ``4 d^2`` and projection
  ``2 T d p^2 c``. The class embedding is a lookup (0 FLOPs);
  ``conditional`` is accepted for symmetry and changes nothing.
  """
  del conditional  # an embedding lookup
  h, w, c = latent_shape
  p, d, r = net.patch, net.width, net.mlp_ratio
  if h % p or w % p:
    raise ValueError(f"latent {h}x{w} is not divisible by patch {p}")
  t = (h // p) * (w // p)
  io = p * p * c
  block = _dense(d, 6 * d) + _dense(d, 3 * d, t) + 2 * 2 * t * t * d + _dense(d, d, t) + 2 * _dense(d, r * d, t)
  return _dense(io, d, t) + 2 * _dense(d, d) + net.depth * block + _dense(d, 2 * d) + _dense(d, io, t)


def autoencoder_flops(hp: LatentAEConfig, image_shape: tuple[int, int, int]) -> tuple[int, int]:
  """``(encode, decode)`` forward FLOPs of one image through the conv autoencoder.

  A stride-2 stage is a dense layer on ``4 x`` the channels at the lower
  resolution (space-to-depth / depth-to-space, :mod:`methods.flow_matching.layers`).
  """
  h, w, ci = image_shape
  c, d, lc = hp.channels, hp.downsample, hp.latent_channels
  hl, wl, top = h >> d, w >> d, c * 2**d
  res = 2 * _conv(hl, wl, 3, top, top)
  enc = _conv(h, w, 3, ci, c) + res + _conv(hl, wl, 3, top, 2 * lc)
  dec = _conv(hl, wl, 3, lc, top) + res + _conv(h, w, 3, c, ci)
  for i in range(1, d + 1):
    stage = _dense(4 * c * 2 ** (i - 1), c * 2**i, (h >> i) * (w >> i))
    enc, dec = enc + stage, dec + stage
  return enc, dec


def feature_net_flops(hp: FeatureNetConfig, image_shape: tuple[int, int, int]) -> int:
  """Forward FLOPs of one image through :class:`methods.flow_matching.feature_net.FeatureNet`."""
  h, w, ci = image_shape
  c = hp.channels
  flat = (h // 4) * (w // 4) * 2 * c
  return (_conv(h, w, 3, ci, c) + _conv(h // 2, w // 2, 3, c, 2 * c) + _dense(flat, hp.features)
          + _dense(hp.features, hp.num_classes))


def param_count(params) -> int:
  """Number of scalars in a parameter tree."""
  return int(sum(math.prod(x.shape) for x in jax.tree.leaves(params)))


def xla_flops(fn: Callable, *args) -> float:
  """XLA's FLOP count of ``jax.jit(fn)(*args)`` (``lower(...).cost_analysis()``; no compilation).

  It counts elementwise work too, so it exceeds the analytic counts above by a
  few percent (``launch/bench/flow_matching_sizes.py`` prints both). NaN where
  the backend gives no analysis.
  """
  cost = jax.jit(fn).lower(*args).cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float((cost or {}).get("flops", math.nan))


def training_flops(forward_flops: float, *, steps: int, batch_size: int) -> float:
  """FLOPs of ``steps`` optimizer steps on ``batch_size`` samples: ``3 x forward x batch x steps``."""
  return BACKWARD_FACTOR * forward_flops * batch_size * steps


class SamplingCost(NamedTuple):
  """Per-sample FLOPs of coarse-to-fine sampling against the large model alone."""

  small_forwards: int  # network evaluations of the small model
  large_forwards: int  # network evaluations of the large model
  flops: float  # coarse-to-fine FLOPs per sample
  large_alone_flops: float  # the large model's FLOPs per sample over all N steps
  speedup: float  # large_alone_flops / flops


def coarse_to_fine_cost(t_split: float, *, num_steps: int, solver: str, small_flops: float, large_flops: float,
                        guided: bool = False) -> SamplingCost:
  """FLOPs per sample of :func:`methods.flow_matching.samplers.coarse_to_fine` (decoding excluded).

  Args:
    t_split: the switch time (static).
    num_steps, solver: the uniform grid and its solver.
    small_flops, large_flops: forward FLOPs per sample of each network
      (:func:`dit_flops` or :func:`xla_flops` per sample).
    guided: classifier-free guidance (two forwards per velocity evaluation).
  """
  if solver not in samplers.FORWARDS_PER_STEP:
    raise ValueError(f"unknown solver {solver!r}; allowed: {sorted(samplers.FORWARDS_PER_STEP)}")
  per = samplers.FORWARDS_PER_STEP[solver] * (2 if guided else 1)
  k = samplers.small_steps(t_split, num_steps)
  ns, nl = k * per, (num_steps - k) * per
  flops = ns * small_flops + nl * large_flops
  alone = num_steps * per * large_flops
  return SamplingCost(ns, nl, float(flops), float(alone), float(alone / flops))
