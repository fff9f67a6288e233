"""Classifier-free guidance for class-conditional flows, and labels for a partly labelled training set.

Training (:func:`methods.flow_matching.core.loss_fn` with
``FlowConfig.class_conditional``): each label is replaced by the null label
``num_classes`` with probability ``label_dropout``, so one network learns the
conditional velocity ``v(x, t, y)`` and the unconditional ``v(x, t, null)``
(Ho & Salimans, "Classifier-Free Diffusion Guidance", 2022, Sec. 3.2).

Sampling (convention used throughout this package):

  v_w(x, t, y) = v(x, t, y) + w (v(x, t, y) - v(x, t, null)),

so ``w = 0`` is the conditional model exactly and ``w > 0`` extrapolates away
from the unconditional one (Ho & Salimans' ``(1 + w) eps(y) - w eps(null)``;
``w + 1`` is the "guidance scale" of implementations that write
``v_null + s (v_y - v_null)``). Each guided step costs two forward passes of
the network (here as one forward of a doubled batch).

The paper's annotation-saving claim (Briq et al., ICML 2026, Sec. 6) trains
conditionally on a labelled subset: :func:`mask_labels` gives every row
outside it the null label, so those rows train the unconditional velocity
only.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from methods.flow_matching import samplers

# apply(params, x [B, ...], t [B], y [B]) -> v [B, ...]
Apply = Callable[[dict, jax.Array, jax.Array, jax.Array], jax.Array]

# Network evaluations per guided velocity evaluation (conditional + unconditional).
FORWARDS_PER_GUIDED_VELOCITY = 2


def guided_velocity(apply: Apply, params, y: jax.Array, *, scale: float | jax.Array,
                    null_label: int) -> samplers.Velocity:
  """The velocity field ``(x, t) -> v(x,t,y) + scale (v(x,t,y) - v(x,t,null))`` for the sampler.

  Args:
    apply: a class-conditional network's ``apply(params, x, t, y)``
      (e.g. :func:`methods.flow_matching.core.make_velocity`'s, with
      ``class_conditional=True``).
    params: its weights (usually the EMA).
    y: ``[B]`` int32 classes in ``[0, null_label)``.
    scale: the guidance weight ``w >= 0`` (may be traced: one compilation
      for every scale).
    null_label: the null label of training (``FlowConfig.num_classes``).

  Returns:
    ``velocity(x [B, ...], t [B]) -> [B, ...]``; the conditional and
    unconditional passes are one forward of the batch ``[x; x]``.
  """
  null = jnp.full_like(y, null_label)

  def velocity(x, t):
    both = apply(params, jnp.concatenate([x, x]), jnp.concatenate([t, t]), jnp.concatenate([y, null]))
    v_cond, v_uncond = jnp.split(both, 2)
    return v_cond + scale * (v_cond - v_uncond)

  return velocity


def sample_guided(apply: Apply, params, x0: jax.Array, y: jax.Array, *, scale: float | jax.Array, null_label: int,
                  num_steps: int, solver: str = "euler") -> jax.Array:
  """``x1 [B, ...]`` from noise ``x0 [B, ...]`` and classes ``y [B]`` with guidance weight ``scale``.

  ``num_steps`` uniform steps of ``solver`` (:func:`methods.flow_matching.samplers.sample`);
  each velocity evaluation costs :data:`FORWARDS_PER_GUIDED_VELOCITY` network passes.
  """
  return samplers.sample(guided_velocity(apply, params, y, scale=scale, null_label=null_label), x0,
                         num_steps=num_steps, solver=solver)


def mask_labels(labels, labelled, *, null_label: int) -> np.ndarray:
  """``[N]`` int32 labels with every row outside ``labelled`` set to ``null_label``.

  Args:
    labels: ``[N]`` classes of the training rows.
    labelled: indices of the rows whose label is kept (a subset chosen by a
      scoring criterion, :func:`methods.flow_matching.scoring.select`).
    null_label: the null label (``FlowConfig.num_classes``).
  """
  labels = np.asarray(labels)
  idx = np.asarray(labelled, np.int64)
  if labels.ndim != 1:
    raise ValueError(f"labels must be [N]; got shape {labels.shape}")
  if idx.size and (idx.min() < 0 or idx.max() >= labels.size):
    raise ValueError(f"labelled indices must lie in [0, {labels.size}); got [{idx.min()}, {idx.max()}]")
  if np.any((labels < 0) | (labels >= null_label)):
    raise ValueError(f"labels must lie in [0, {null_label}) (null_label is reserved)")
  out = np.full(labels.shape, null_label, np.int32)
  out[idx] = labels[idx]
  return out
