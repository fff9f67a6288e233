"""The frozen feature network of FID / KID / conditional accuracy: a small CNN classifier.

Briq et al. (ICML 2026) score samples with pretrained networks (Inception for
FID, DINOv2 / ArcFace for stability). Offline, no pretrained weights exist, so
(reconstruction) the feature network is a classifier trained in-repo on a
held-out split that neither the autoencoder nor any flow model sees
(:func:`datasets.images.splits.protocol_split`), then frozen; its test
accuracy is reported beside every number computed in its features. FID and
KID use the penultimate layer (``features`` ReLU units, as FID uses
Inception's pool layer); conditional accuracy uses the logits.

Architecture: conv3x3(c) -> ReLU -> 2x2 average pool -> conv3x3(2c) -> ReLU ->
2x2 average pool -> dense(features) -> ReLU -> dense(classes), convolutions
as matrix products (:mod:`methods.flow_matching.layers`). Training is pure
and resumable (:mod:`methods.flow_matching.fitting`).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from methods.flow_matching import fitting
from methods.flow_matching import layers
from methods.flow_matching.config import FeatureNetConfig


def _pool2(x: jax.Array) -> jax.Array:
  """2x2 average pooling, stride 2 (an odd last row / column is dropped, as "VALID" pooling does)."""
  b, h, w, c = x.shape
  x = x[:, : h // 2 * 2, : w // 2 * 2]
  return x.reshape(b, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


class FeatureNet(nn.Module):
  """``[B, H, W, c_img] -> (logits [B, classes], features [B, F])``."""

  hp: FeatureNetConfig

  @nn.compact
  def __call__(self, x):
    c = self.hp.channels
    h = _pool2(nn.relu(layers.Conv3x3(c)(x)))
    h = _pool2(nn.relu(layers.Conv3x3(2 * c)(h)))
    f = nn.relu(nn.Dense(self.hp.features)(h.reshape(h.shape[0], -1)))
    return nn.Dense(self.hp.num_classes)(f), f


def _check(images: jax.Array, labels: jax.Array | None, where: str) -> None:
  if images.ndim != 4:
    raise ValueError(f"{where}: images must be [N, H, W, channels]; got shape {tuple(images.shape)}")
  if labels is not None and labels.shape != images.shape[:1]:
    raise ValueError(f"{where}: labels must be [N] = [{images.shape[0]}]; got shape {tuple(labels.shape)}")
  if min(images.shape[1:3]) < 4:
    raise ValueError(f"{where}: images of side {images.shape[1:3]} are too small for two 2x2 poolings")


def init(key: jax.Array, image_shape: tuple[int, int, int], *, hp: FeatureNetConfig) -> fitting.FitState:
  """Initial state; ``key`` draws the weights. ``image_shape`` is ``(H, W, c_img)``."""
  params = FeatureNet(hp).init(key, jnp.zeros((1,) + tuple(image_shape)))["params"]
  return fitting.start(params, hp.learning_rate, hp.steps)


def train_step(state: fitting.FitState, images: jax.Array, labels: jax.Array, key: jax.Array, *,
               hp: FeatureNetConfig) -> tuple[fitting.FitState, dict]:
  """One Adam step of cross-entropy on a batch of ``images [N, H, W, c_img]``, ``labels [N]`` int.

  ``key``: the run's key; step ``s`` draws its batch from ``fold_in(key, s)``.
  Returns ``(new state, {"loss", "accuracy"})`` of the batch.
  """
  _check(images, labels, "feature_net.train_step")

  def loss(p, idx, k):
    del k  # no noise in the classifier's loss
    logits, _ = FeatureNet(hp).apply({"params": p}, images[idx])
    ce = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels[idx]))
    return ce, {"accuracy": jnp.mean(jnp.argmax(logits, -1) == labels[idx])}

  return fitting.fit_step(state, loss, images.shape[0], key, batch_size=hp.batch_size,
                          learning_rate=hp.learning_rate, steps=hp.steps)


def train_chunk(state: fitting.FitState, images: jax.Array, labels: jax.Array, key: jax.Array, *, num_steps: int,
                hp: FeatureNetConfig) -> tuple[fitting.FitState, dict]:
  """``num_steps`` of :func:`train_step` in one ``lax.scan``; metrics are ``[num_steps]`` arrays."""
  return jax.lax.scan(lambda s, _: train_step(s, images, labels, key, hp=hp), state, None, length=num_steps)


@functools.partial(jax.jit, static_argnames=("hp", "batch"))
def embed(params, images: jax.Array, *, hp: FeatureNetConfig, batch: int = 500) -> tuple[jax.Array, jax.Array]:
  """``(logits [N, classes], features [N, F])`` of ``images [N, H, W, c_img]``, ``batch`` rows at a time."""
  _check(images, None, "feature_net.embed")
  return jax.lax.map(lambda x: jax.tree.map(lambda a: a[0], FeatureNet(hp).apply({"params": params}, x[None])),
                     images, batch_size=batch)


def accuracy(params, images: jax.Array, labels: jax.Array, *, hp: FeatureNetConfig) -> jax.Array:
  """``[]``: fraction of ``images`` whose arg-max logit is ``labels``."""
  _check(images, labels, "feature_net.accuracy")
  logits, _ = embed(params, images, hp=hp)
  return jnp.mean(jnp.argmax(logits, -1) == labels)
