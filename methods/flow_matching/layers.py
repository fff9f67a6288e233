"""Convolutions written as matrix products, for networks trained inside ``lax.scan`` on CPUs.

On XLA:CPU, a convolution's training step inside a while loop (a
``lax.scan`` of training steps) runs about an order of magnitude slower as
``lax.conv`` than as the equivalent matrix product
(``launch/bench/flow_matching_sizes.py`` measures both).
So the autoencoder and the feature network build their convolutions from
matrix products:

* :class:`Conv3x3`: a 3x3 "SAME" convolution as the product of the 9 shifted
  copies of the zero-padded input (im2col) with a ``[9 C_in, C_out]`` kernel;
  equal to ``lax.conv_general_dilated`` up to float rounding.
* :func:`space_to_depth` / :func:`depth_to_space`: a 2x2 stride-2
  convolution is ``space_to_depth`` followed by a dense layer; a 2x2 stride-2
  transposed convolution is a dense layer followed by ``depth_to_space``
  (the sub-pixel convolution of Shi et al., CVPR 2016).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def im2col3x3(x: jax.Array) -> jax.Array:
  """``[B, H, W, C] -> [B, H, W, 9 C]``: the 3x3 neighbourhood of every pixel (zero padding), row-major."""
  _, h, w, _ = x.shape
  xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
  return jnp.concatenate([xp[:, i:i + h, j:j + w, :] for i in range(3) for j in range(3)], axis=-1)


class Conv3x3(nn.Module):
  """3x3 stride-1 "SAME" convolution ``[B, H, W, C_in] -> [B, H, W, features]`` with a bias.

  The kernel is stored as ``[9 C_in, features]``; reshaped to
  ``[3, 3, C_in, features]`` it is the HWIO kernel of the equivalent
  ``lax.conv_general_dilated``.
  """

  features: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.features)(im2col3x3(x))


def space_to_depth(x: jax.Array) -> jax.Array:
  """``[B, H, W, C] -> [B, H/2, W/2, 4 C]``: each 2x2 block's pixels stacked on the channel axis."""
  b, h, w, c = x.shape
  if h % 2 or w % 2:
    raise ValueError(f"space_to_depth needs even sides; got {h}x{w}")
  return x.reshape(b, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, h // 2, w // 2, 4 * c)


def depth_to_space(x: jax.Array) -> jax.Array:
  """``[B, H, W, 4 C] -> [B, 2H, 2W, C]``: the inverse of :func:`space_to_depth`."""
  b, h, w, c4 = x.shape
  if c4 % 4:
    raise ValueError(f"depth_to_space needs channels divisible by 4; got {c4}")
  c = c4 // 4
  return x.reshape(b, h, w, 2, 2, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, 2 * h, 2 * w, c)
