"""The DiT velocity field of latent flow matching.

* :class:`DiT`: a compact Diffusion Transformer (Peebles & Xie, "Scalable
  Diffusion Models with Transformers", ICCV 2023) on latent patches with
  adaLN-Zero conditioning on ``t`` and (optionally) the class; width and depth
  are hyperparameters, so one class gives the small and the large model of the
  coarse-to-fine sampler (Briq et al., ICML 2026, Sec. 5).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from methods.flow_matching.config import NetConfig


def timestep_embedding(t: jax.Array, dim: int, max_period: float = 10_000.0) -> jax.Array:
  """Sinusoidal embedding ``[B] -> [B, dim]`` of ``1000 t`` (DiT's ``TimestepEmbedder``)."""
  half = dim // 2
  freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
  args = 1000.0 * t[:, None] * freqs[None, :]
  return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


def _modulate(x, shift, scale):
  return x * (1 + scale[:, None, :]) + shift[:, None, :]


class DiTBlock(nn.Module):
  """Self-attention + MLP with adaLN-Zero (shift, scale, gate from the conditioning)."""

  width: int
  heads: int
  mlp_ratio: int

  @nn.compact
  def __call__(self, x, c):
    mod = nn.Dense(6 * self.width, kernel_init=nn.initializers.zeros)(nn.silu(c))
    s1, sc1, g1, s2, sc2, g2 = jnp.split(mod, 6, axis=-1)
    h = _modulate(nn.LayerNorm(use_scale=False, use_bias=False)(x), s1, sc1)
    h = nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h)
    x = x + g1[:, None, :] * h
    h = _modulate(nn.LayerNorm(use_scale=False, use_bias=False)(x), s2, sc2)
    h = nn.Dense(self.width)(nn.gelu(nn.Dense(self.mlp_ratio * self.width)(h)))
    return x + g2[:, None, :] * h


class DiT(nn.Module):
  """Velocity ``v(x_t, t, y)``: ``[B, h, w, c], [B], [B] -> [B, h, w, c]``.

  ``y`` is the class in ``[0, num_classes)`` or ``num_classes`` (the null label
  of classifier-free training); ``None`` for an unconditional model.
  """

  cfg: NetConfig
  num_classes: int = 10

  @nn.compact
  def __call__(self, x, t, y=None):
    b, h, w, c = x.shape
    p, d = self.cfg.patch, self.cfg.width
    gh, gw = h // p, w // p
    tokens = x.reshape(b, gh, p, gw, p, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, gh * gw, p * p * c)
    z = nn.Dense(d)(tokens)
    pos = self.param("pos", nn.initializers.normal(0.02), (gh * gw, d))
    z = z + pos[None]
    cond = nn.Dense(d)(nn.silu(nn.Dense(d)(timestep_embedding(t, d))))
    if y is not None:
      cond = cond + nn.Embed(self.num_classes + 1, d)(y)
    for _ in range(self.cfg.depth):
      z = DiTBlock(d, self.cfg.heads, self.cfg.mlp_ratio)(z, cond)
    shift, scale = jnp.split(nn.Dense(2 * d, kernel_init=nn.initializers.zeros)(nn.silu(cond)), 2, axis=-1)
    z = _modulate(nn.LayerNorm(use_scale=False, use_bias=False)(z), shift, scale)
    out = nn.Dense(p * p * c, kernel_init=nn.initializers.zeros)(z)
    return out.reshape(b, gh, gw, p, p, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
