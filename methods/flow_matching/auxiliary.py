"""The autoencoder that defines the latent space and the classifier that defines the feature space.

Briq et al. (ICML 2026) train a VQ autoencoder and evaluate with DINOv2 /
ArcFace / Inception features. Offline, both are trained here (reconstruction:
a fully connected autoencoder with a small latent-norm penalty, and an MLP
classifier whose penultimate layer replaces the pretrained feature networks).
Each trains in one jitted ``lax.scan`` of Adam steps; batches are drawn with
``fold_in(key, step)``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from methods.flow_matching.config import AutoencoderConfig, ClassifierConfig
from methods.flow_matching.networks import Autoencoder, Classifier


class AuxState(NamedTuple):
  """Trained weights and the per-step training losses."""

  params: dict
  losses: jax.Array  # [steps]


def _fit(loss, params, key, n, *, steps, batch_size, learning_rate):
  opt = optax.adam(learning_rate)

  def body(carry, i):
    p, o = carry
    idx = jax.random.randint(jax.random.fold_in(key, i), (batch_size,), 0, n)
    value, g = jax.value_and_grad(loss)(p, idx)
    u, o = opt.update(g, o, p)
    return (optax.apply_updates(p, u), o), value

  (params, _), losses = jax.lax.scan(body, (params, opt.init(params)), jnp.arange(steps))
  return AuxState(params, losses)


@functools.partial(jax.jit, static_argnames=("cfg",))
def train_autoencoder(key: jax.Array, images: jax.Array, *, cfg: AutoencoderConfig) -> AuxState:
  """Fits ``images [N, H, W]`` in [0, 1]: MSE + ``latent_penalty * mean z^2``; ``key`` inits and draws batches."""
  model = Autoencoder(cfg, images.shape[1])
  x = images[..., None]
  params = model.init(jax.random.fold_in(key, 2**31), x[:1])["params"]

  def loss(p, idx):
    rec, z = model.apply({"params": p}, x[idx])
    return jnp.mean(jnp.square(rec - x[idx])) + cfg.latent_penalty * jnp.mean(jnp.square(z))

  return _fit(loss, params, key, x.shape[0], steps=cfg.steps, batch_size=cfg.batch_size,
              learning_rate=cfg.learning_rate)


@functools.partial(jax.jit, static_argnames=("cfg", "image_size"))
def encode(params, images: jax.Array, *, cfg: AutoencoderConfig, image_size: int) -> jax.Array:
  """Latents ``[N, h, w, C]`` (unscaled) of images ``[N, H, W]``."""
  return Autoencoder(cfg, image_size).apply({"params": params}, images[..., None], method="encode")


@functools.partial(jax.jit, static_argnames=("cfg", "image_size"))
def decode(params, latents: jax.Array, *, cfg: AutoencoderConfig, image_size: int) -> jax.Array:
  """Images ``[N, H, W]`` in (0, 1) of unscaled latents ``[N, h, w, C]``."""
  return Autoencoder(cfg, image_size).apply({"params": params}, latents, method="decode")[..., 0]


@functools.partial(jax.jit, static_argnames=("cfg",))
def train_classifier(key: jax.Array, images: jax.Array, labels: jax.Array, *, cfg: ClassifierConfig) -> AuxState:
  """Cross-entropy fit of ``labels [N]`` from ``images [N, H, W]``; ``key`` inits and draws batches."""
  model = Classifier(cfg)
  x = images[..., None]
  params = model.init(jax.random.fold_in(key, 2**31), x[:1])["params"]

  def loss(p, idx):
    logits, _ = model.apply({"params": p}, x[idx])
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels[idx]))

  return _fit(loss, params, key, x.shape[0], steps=cfg.steps, batch_size=cfg.batch_size,
              learning_rate=cfg.learning_rate)


@functools.partial(jax.jit, static_argnames=("cfg",))
def classify(params, images: jax.Array, *, cfg: ClassifierConfig) -> tuple[jax.Array, jax.Array]:
  """``(logits [N, 10], features [N, F])`` of images ``[N, H, W]``."""
  return Classifier(cfg).apply({"params": params}, images[..., None])
