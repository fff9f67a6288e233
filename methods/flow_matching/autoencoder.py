"""A convolutional (variational) autoencoder: the latent grid that every flow model learns.

Briq et al., "Exploring and Exploiting Stability in Latent Flow Matching"
(ICML 2026) train flows in the latent space of a VQ autoencoder with 8x
downsampling. Reconstruction used here (documented choice): a KL-regularised
convolutional autoencoder in the style of latent diffusion's KL autoencoders
(Rombach et al., "High-Resolution Image Synthesis with Latent Diffusion
Models", CVPR 2022, Sec. 3 and App. G) with a small KL weight, no
quantisation and no adversarial or perceptual loss:

  L = mean_pixels (D(z) - x)^2 + kl_weight * mean_latent KL(N(mu, sigma^2) || N(0, 1)),
  z = mu + sigma * eps,  eps ~ N(0, I)   (eps = 0 when kl_weight = 0).

The encoder maps images ``[B, H, W, c_img]`` in [0, 1] through ``d`` stride-2
stages to ``mu, log sigma^2`` of shape ``[B, H/2^d, W/2^d, C]`` (28x28 MNIST
and ``d = 2``: a 7x7xC grid, 49 DiT tokens with 1x1 patches); the decoder
mirrors it with transposed convolutions and a linear output (a sigmoid
saturates on MNIST's black background and stops learning), clipped to
[0, 1] when decoding. The
convolutions are matrix products (:mod:`methods.flow_matching.layers`: fast
inside a ``lax.scan`` on CPUs). The flows model
the posterior mean ``mu`` times :func:`latent_scale` (unit variance, as latent
diffusion's scale factor).

Training is pure and resumable (:mod:`methods.flow_matching.fitting`):
``state = init(key, image_shape, hp=hp)``, then
``state, metrics = train_chunk(state, images, key, num_steps=n, hp=hp)``.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from methods.flow_matching import fitting
from methods.flow_matching import layers
from methods.flow_matching.config import LatentAEConfig

LOGVAR_RANGE = (-30.0, 20.0)  # clip of log sigma^2 (exp stays finite in float32)


def _check_images(images: jax.Array, where: str) -> None:
  if images.ndim != 4:
    raise ValueError(f"{where}: images must be [N, H, W, channels]; got shape {tuple(images.shape)}")


def latent_shape(image_shape: tuple[int, int, int], hp: LatentAEConfig) -> tuple[int, int, int]:
  """``(H / 2^d, W / 2^d, C)`` of images ``(H, W, c_img)``; both sides must be divisible by ``2^d``."""
  h, w, _ = image_shape
  f = 2**hp.downsample
  if h % f or w % f:
    raise ValueError(f"image side {h}x{w} is not divisible by 2^downsample = {f}")
  return (h // f, w // f, hp.latent_channels)


class _ResBlock(nn.Module):
  """``x + conv(silu(conv(silu(x))))`` at constant width (3x3 convolutions)."""

  width: int

  @nn.compact
  def __call__(self, x):
    h = layers.Conv3x3(self.width)(nn.silu(x))
    return x + layers.Conv3x3(self.width)(nn.silu(h))


class ConvAutoencoder(nn.Module):
  """``encode: [B, H, W, c_img] -> (mu, logvar) [B, h, w, C]``; ``decode: [B, h, w, C] -> [B, H, W, c_img]``.

  Encoder: a 3x3 convolution to ``channels``, then per stage ``i = 1..d`` a
  2x2 stride-2 convolution to ``channels * 2^i`` (space-to-depth + dense), a
  residual block of two 3x3 convolutions at the latent resolution and a 3x3
  convolution to ``2 C`` (mean and log-variance). The decoder mirrors it with
  2x2 stride-2 transposed convolutions (dense + depth-to-space) and a linear
  output (clipped to [0, 1] by :func:`decode`).
  Convolutions are matrix products (:mod:`methods.flow_matching.layers`).
  """

  hp: LatentAEConfig
  image_channels: int

  def setup(self):
    c, d = self.hp.channels, self.hp.downsample
    self.enc_in = layers.Conv3x3(c)
    self.enc_down = [nn.Dense(c * 2**i) for i in range(1, d + 1)]
    self.enc_res = _ResBlock(c * 2**d)
    self.enc_out = layers.Conv3x3(2 * self.hp.latent_channels)
    self.dec_in = layers.Conv3x3(c * 2**d)
    self.dec_res = _ResBlock(c * 2**d)
    self.dec_up = [nn.Dense(4 * c * 2**i) for i in range(d - 1, -1, -1)]
    self.dec_out = layers.Conv3x3(self.image_channels)

  def encode(self, x):
    h = nn.silu(self.enc_in(x))
    for layer in self.enc_down:
      h = nn.silu(layer(layers.space_to_depth(h)))
    mean, logvar = jnp.split(self.enc_out(nn.silu(self.enc_res(h))), 2, axis=-1)
    return mean, jnp.clip(logvar, *LOGVAR_RANGE)

  def decode(self, z):
    h = self.dec_res(self.dec_in(z))
    for layer in self.dec_up:
      h = layers.depth_to_space(layer(nn.silu(h)))
    return self.dec_out(nn.silu(h))  # linear output: a sigmoid saturates at the black background

  def __call__(self, x, eps):
    mean, logvar = self.encode(x)
    z = mean + jnp.exp(0.5 * logvar) * eps
    return self.decode(z), mean, logvar


def init(key: jax.Array, image_shape: tuple[int, int, int], *, hp: LatentAEConfig) -> fitting.FitState:
  """Initial :class:`~methods.flow_matching.fitting.FitState`; ``key`` draws the weights.

  Args:
    key: weight initialisation.
    image_shape: ``(H, W, c_img)``.
    hp: the autoencoder's hyperparameters.
  """
  lat = latent_shape(tuple(image_shape), hp)
  model = ConvAutoencoder(hp, image_shape[-1])
  params = model.init(key, jnp.zeros((1,) + tuple(image_shape)), jnp.zeros((1,) + lat))["params"]
  return fitting.start(params, hp.learning_rate, hp.steps)


def kl_per_element(mean: jax.Array, logvar: jax.Array) -> jax.Array:
  """``KL(N(mean, e^logvar) || N(0, 1))`` elementwise: ``(mean^2 + e^logvar - 1 - logvar) / 2``."""
  return 0.5 * (jnp.square(mean) + jnp.exp(logvar) - 1.0 - logvar)


def loss_fn(params, x: jax.Array, key: jax.Array, *, hp: LatentAEConfig) -> tuple[jax.Array, dict]:
  """``(loss, {"mse", "kl"})`` of a batch ``x [B, H, W, c_img]``; ``key`` draws the posterior noise."""
  model = ConvAutoencoder(hp, x.shape[-1])
  lat = latent_shape(x.shape[1:], hp)
  eps = jax.random.normal(key, (x.shape[0],) + lat) if hp.kl_weight > 0 else jnp.zeros((x.shape[0],) + lat)
  rec, mean, logvar = model.apply({"params": params}, x, eps)
  mse = jnp.mean(jnp.square(rec - x))
  kl = jnp.mean(kl_per_element(mean, logvar))
  return mse + hp.kl_weight * kl, {"mse": mse, "kl": kl}


def train_step(state: fitting.FitState, images: jax.Array, key: jax.Array, *,
               hp: LatentAEConfig) -> tuple[fitting.FitState, dict]:
  """One Adam step on a batch drawn from ``images [N, H, W, c_img]``.

  Args:
    state: the training state.
    images: the training images in [0, 1].
    key: the run's key; step ``s`` uses ``fold_in(key, s)`` for its batch and
      posterior noise.
    hp: the autoencoder's hyperparameters.

  Returns:
    ``(new state, {"loss", "mse", "kl"})`` of the batch.
  """
  _check_images(images, "autoencoder.train_step")

  def loss(p, idx, k):
    return loss_fn(p, images[idx], k, hp=hp)

  return fitting.fit_step(state, loss, images.shape[0], key, batch_size=hp.batch_size,
                          learning_rate=hp.learning_rate, steps=hp.steps)


def train_chunk(state: fitting.FitState, images: jax.Array, key: jax.Array, *, num_steps: int,
                hp: LatentAEConfig) -> tuple[fitting.FitState, dict]:
  """``num_steps`` of :func:`train_step` in one ``lax.scan``; metrics are ``[num_steps]`` arrays."""
  return jax.lax.scan(lambda s, _: train_step(s, images, key, hp=hp), state, None, length=num_steps)


def _apply(params, x, hp, image_channels, method):
  return ConvAutoencoder(hp, image_channels).apply({"params": params}, x, method=method)


@functools.partial(jax.jit, static_argnames=("hp", "batch"))
def encode(params, images: jax.Array, *, hp: LatentAEConfig, batch: int = 500) -> jax.Array:
  """Posterior means ``mu [N, h, w, C]`` of ``images [N, H, W, c_img]`` (unscaled), ``batch`` rows at a time."""
  _check_images(images, "autoencoder.encode")
  return jax.lax.map(lambda x: _apply(params, x[None], hp, images.shape[-1], "encode")[0][0], images,
                     batch_size=batch)


@functools.partial(jax.jit, static_argnames=("hp", "image_channels", "batch"))
def decode(params, latents: jax.Array, *, hp: LatentAEConfig, image_channels: int, batch: int = 500) -> jax.Array:
  """Images ``[N, H, W, image_channels]``, clipped to [0, 1], of unscaled latents ``[N, h, w, C]``."""
  if latents.ndim != 4 or latents.shape[-1] != hp.latent_channels:
    raise ValueError(f"autoencoder.decode: latents must be [N, h, w, {hp.latent_channels}]; "
                     f"got shape {tuple(latents.shape)}")
  out = jax.lax.map(lambda z: _apply(params, z[None], hp, image_channels, "decode")[0], latents, batch_size=batch)
  return jnp.clip(out, 0.0, 1.0)


def reconstruct(params, images: jax.Array, *, hp: LatentAEConfig) -> jax.Array:
  """``decode(encode(images))`` through the posterior mean: ``[N, H, W, c_img]``."""
  return decode(params, encode(params, images, hp=hp), hp=hp, image_channels=images.shape[-1])


def reconstruction_mse(params, images: jax.Array, *, hp: LatentAEConfig) -> jax.Array:
  """``[N]``: per-image mean squared error of :func:`reconstruct` (pixels in [0, 1])."""
  rec = reconstruct(params, images, hp=hp)
  return jnp.mean(jnp.square(rec - images).reshape(images.shape[0], -1), axis=1)


def latent_scale(latents: jax.Array) -> jax.Array:
  """``[]``: ``1 / std`` of all latent elements; flows train on ``scale * mu`` (unit variance).

  Decode a flow sample ``x1`` with ``decode(x1 / scale)``.
  """
  return 1.0 / jnp.std(latents)
