"""Stability and quality metrics, in NumPy float64 (host code, deterministic).

Stability (Briq et al., ICML 2026, Sec. 3): two models sample from identical
noise, so sample ``i`` of both comes from the same ``x0``. Each paired metric
has a shuffled-pairing baseline (sample ``i`` of A against sample ``pi(i)`` of
B, ``pi`` a fixed random derangement): the chance level.

Quality without downloaded networks: Fréchet distance (Heusel et al., 2017),
KID (Binkowski et al., 2018, unbiased MMD^2 with the cubic polynomial
kernel), precision/recall (Kynkäänniemi et al., 2019, k-NN balls), all in the
feature space of a classifier trained in-repo; sliced Wasserstein-2 on latents.
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


def fid_bootstrap(real, fake, *, num: int, seed: int = 0) -> np.ndarray:
  """``[num]`` FIDs of bootstrap resamples of ``fake`` (rows drawn with replacement; ``real`` fixed).

  Their standard deviation is the standard error of ``frechet_distance(real,
  fake)`` due to the finite generated set (Efron, 1979).
  """
  fake = _flat(fake)
  rng = np.random.default_rng(seed)
  return np.asarray([frechet_distance(real, fake[rng.integers(0, len(fake), len(fake))]) for _ in range(num)])


def kid(fa, fb) -> float:
  """Unbiased MMD^2 with ``k(x, y) = (x.y / d + 1)^3``."""
  fa, fb = _flat(fa), _flat(fb)
  d = fa.shape[1]
  k = lambda x, y: (x @ y.T / d + 1.0) ** 3  # noqa: E731
  m, n = len(fa), len(fb)
  kaa, kbb, kab = k(fa, fa), k(fb, fb), k(fa, fb)
  return float((kaa.sum() - np.trace(kaa)) / (m * (m - 1)) + (kbb.sum() - np.trace(kbb)) / (n * (n - 1))
               - 2 * kab.mean())


def precision_recall(real, fake, k: int = 3) -> tuple[float, float]:
  """Improved precision (fake inside real k-NN balls) and recall (real inside fake balls)."""
  real, fake = _flat(real), _flat(fake)

  def radii(x):
    d = _sq_dists(x, x)
    return np.sort(d, axis=1)[:, k]  # index 0 is the point itself

  r_real, r_fake = radii(real), radii(fake)
  precision = np.mean(np.any(_sq_dists(fake, real) <= r_real[None, :], axis=1))
  recall = np.mean(np.any(_sq_dists(real, fake) <= r_fake[None, :], axis=1))
  return float(precision), float(recall)


def sliced_wasserstein(a, b, *, num_projections: int = 128, seed: int = 0) -> float:
  """Sliced Wasserstein-2 between two sets of latents (equal sizes are used: the first ``min(n_a, n_b)``)."""
  a, b = _flat(a), _flat(b)
  n = min(len(a), len(b))
  a, b = a[:n], b[:n]
  dirs = np.random.default_rng(seed).standard_normal((a.shape[1], num_projections))
  dirs /= np.linalg.norm(dirs, axis=0, keepdims=True)
  pa, pb = np.sort(a @ dirs, axis=0), np.sort(b @ dirs, axis=0)
  return float(np.sqrt(np.mean(np.square(pa - pb))))


def quality(real_feat, fake_feat, real_lat, fake_lat, fake_logits=None) -> dict:
  """FID, KID, precision, recall (features), sliced W2 (latents) and, with logits, the class entropy."""
  p, r = precision_recall(real_feat, fake_feat)
  out = {"fid": frechet_distance(real_feat, fake_feat), "kid": kid(real_feat, fake_feat),
         "precision": p, "recall": r, "sw_latent": sliced_wasserstein(real_lat, fake_lat)}
  if fake_logits is not None:
    counts = np.bincount(np.argmax(np.asarray(fake_logits), 1), minlength=np.asarray(fake_logits).shape[1])
    q = counts / counts.sum()
    out["class_entropy"] = float(-np.sum(q[q > 0] * np.log(q[q > 0])))
  return out
