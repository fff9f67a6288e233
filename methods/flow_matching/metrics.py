"""Stability and quality metrics, in NumPy float64 (host code, deterministic).

Stability (Briq et al., ICML 2026, Sec. 3): two models sample from identical
noise, so sample ``i`` of both comes from the same ``x0``. Each paired metric
has a shuffled-pairing baseline (sample ``i`` of A against sample ``pi(i)`` of
B, ``pi`` a fixed random derangement): the chance level.

Quality without downloaded networks: the Fréchet distance (Heusel et al.,
2017) and KID's unbiased MMD^2 with the cubic polynomial kernel (Binkowski et
al., 2018), in the features of the feature network trained in-repo
(:mod:`methods.flow_matching.evaluation` wraps both into the protocol).
"""

from __future__ import annotations

import numpy as np


def derangement(n: int, seed: int) -> np.ndarray:
  """A fixed random permutation with no fixed point (``n >= 2``)."""
  rng = np.random.default_rng(seed)
  while True:
    p = rng.permutation(n)
    if not np.any(p == np.arange(n)):
      return p


def _flat(x) -> np.ndarray:
  x = np.asarray(x, np.float64)
  return x.reshape(x.shape[0], -1)


def cosine(a, b) -> np.ndarray:
  """Row-wise cosine similarity ``[N]``."""
  a, b = _flat(a), _flat(b)
  return np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)


def relative_l2(a, b) -> np.ndarray:
  """``||a_i - b_i|| / ||a_i||``, ``[N]``."""
  a, b = _flat(a), _flat(b)
  return np.linalg.norm(a - b, axis=1) / (np.linalg.norm(a, axis=1) + 1e-12)


def mse(a, b) -> np.ndarray:
  a, b = _flat(a), _flat(b)
  return np.mean(np.square(a - b), axis=1)


def psnr(a, b, peak: float = 1.0) -> np.ndarray:
  """Per-pair PSNR in dB of images in ``[0, peak]``."""
  return 10.0 * np.log10(peak**2 / np.maximum(mse(a, b), 1e-12))


def _sq_dists(a, b) -> np.ndarray:
  a, b = _flat(a), _flat(b)
  return np.maximum(np.sum(a * a, 1)[:, None] + np.sum(b * b, 1)[None, :] - 2 * a @ b.T, 0.0)


def nn_match(a, b, target: np.ndarray | None = None) -> np.ndarray:
  """``[N]`` bools: ``argmin_j ||a_i - b_j|| == target_i`` (default ``target_i = i``)."""
  target = np.arange(len(a)) if target is None else target
  return np.argmin(_sq_dists(a, b), axis=1) == target


def stability(feat_a, feat_b, lat_a, lat_b, img_a, img_b, *, seed: int = 0) -> dict:
  """Paired metrics of two models' samples from identical noise, with shuffled baselines.

  Args:
    feat_*: classifier features ``[N, F]``; lat_*: latents ``[N, ...]``;
      img_*: decoded images ``[N, H, W]`` in [0, 1]. Row ``i`` of A and B
      share their noise.
    seed: the shuffled pairing's permutation.

  Returns:
    ``{metric: value, metric + "_shuffled": baseline}`` for ``cosine``,
    ``latent_rel_l2``, ``pixel_mse``, ``psnr`` and ``nn_match``.
  """
  n = len(feat_a)
  p = derangement(n, seed)
  out = {}
  for name, fn, a, b in (("cosine", cosine, feat_a, feat_b), ("latent_rel_l2", relative_l2, lat_a, lat_b),
                         ("pixel_mse", mse, img_a, img_b), ("psnr", psnr, img_a, img_b)):
    out[name] = float(np.mean(fn(a, b)))
    out[name + "_shuffled"] = float(np.mean(fn(a, np.asarray(b)[p])))
  out["nn_match"] = float(np.mean(nn_match(feat_a, feat_b)))
  out["nn_match_shuffled"] = float(np.mean(nn_match(feat_a, feat_b, target=p)))
  return out


def _sqrtm_psd(m: np.ndarray) -> np.ndarray:
  w, v = np.linalg.eigh((m + m.T) / 2)
  return (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def frechet_distance(fa, fb) -> float:
  """``||mu_a - mu_b||^2 + tr(S_a + S_b - 2 (S_a^1/2 S_b S_a^1/2)^1/2)`` of two feature sets."""
  fa, fb = _flat(fa), _flat(fb)
  mu_a, mu_b = fa.mean(0), fb.mean(0)
  sa, sb = np.cov(fa, rowvar=False), np.cov(fb, rowvar=False)
  ra = _sqrtm_psd(sa)
  cross = np.sqrt(np.clip(np.linalg.eigvalsh(ra @ sb @ ra), 0, None)).sum()
  return float(np.sum(np.square(mu_a - mu_b)) + np.trace(sa) + np.trace(sb) - 2 * cross)


def kid(fa, fb) -> float:
  """Unbiased MMD^2 with ``k(x, y) = (x.y / d + 1)^3``."""
  fa, fb = _flat(fa), _flat(fb)
  d = fa.shape[1]
  k = lambda x, y: (x @ y.T / d + 1.0) ** 3  # noqa: E731
  m, n = len(fa), len(fb)
  kaa, kbb, kab = k(fa, fa), k(fb, fb), k(fa, fb)
  return float((kaa.sum() - np.trace(kaa)) / (m * (m - 1)) + (kbb.sum() - np.trace(kbb)) / (n * (n - 1))
               - 2 * kab.mean())
