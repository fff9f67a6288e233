"""Hyperparameters of the BAI algorithms and the registry that builds them.

Luong, Nguyen, Ta, Tran and Dam, "Variance Driven Exploration", ICML 2026,
Section 3 (best-arm identification) and its baselines. Every hyperparameter of
VarDE and of the baselines is declared once, in :class:`VarDEHparams` and
:class:`BaselineHparams`; the launcher derives its config section and its
validation from them. :data:`ALGORITHMS` maps a suite name to a factory that
expands it into named :class:`~methods.varde.core.BAIAlgorithm` instances
(e.g. ``"varde"`` gives one VarDE per temperature), so one experiment loop runs
them all without naming any of them.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Optional

from methods.common import hparams
from methods.varde import bai, baselines, core, elimination


@dataclasses.dataclass(frozen=True)
class VarDEHparams(hparams.Hyperparameters):
  """VarDE (Luong et al., 2026, Section 3) and its ablations."""

  taus: tuple[float, ...] = hparams.field(
      (0.05, 0.1, 0.15), "LSE temperatures tau, one VarDE run each.", low=0, low_open=True, nonempty=True,
      unique=True
  )
  ablation_tau: float = hparams.field(0.1, "tau of the known-variance ablation.", low=0, low_open=True)
  warm_start: int = hparams.field(2, "Pulls of every arm before the greedy rule (counted in T).", low=1)
  var_floor: float = hparams.field(0.01, "Lower bound on the empirical variances.", low=0)


@dataclasses.dataclass(frozen=True)
class BaselineHparams(hparams.Hyperparameters):
  """The baselines' free choices (their papers' defaults)."""

  ucbe_c: tuple[float, ...] = hparams.field(
      (2.0, 4.0, 8.0), "UCB-E rate constants c, one run each.", low=0, low_open=True, nonempty=True,
      unique=True
  )
  ugape_c: float = hparams.field(1.0, "UGapE rate constant c.", low=0, low_open=True)
  gapev_c: float = hparams.field(1.0, "GapE-V rate constant c.", low=0, low_open=True)
  rate_scale: str = hparams.field(
      "hardness", "a = c (T - warm) / H (hardness) or a = c (raw).", choices=baselines.SCALES
  )
  sh_reuse_samples: bool = hparams.field(False, "Sequential Halving / SHVar / SHAdaVar eliminate on all samples.")
  shadavar_delta: float = hparams.field(
      0.05, "SHAdaVar's variance confidence level delta.", low=0, high=1, low_open=True, high_open=True
  )
  ttts_beta: float = hparams.field(
      0.5, "Top-two Thompson sampling's leader probability beta.", low=0, high=1, low_open=True, high_open=True
  )
  warm_start: int = hparams.field(2, "Warm-start pulls per arm of TTTS and OCBA.", low=1)
  var_floor: float = hparams.field(0.01, "Variance floor of GapE-V, TTTS and OCBA.", low=0)


class Entry(NamedTuple):
  """One algorithm of a suite.

  Attributes:
    name: its label in tables (e.g. ``varde_tau0.1``).
    algorithm: the algorithm, built for ``(K, T)``.
    neyman: whether the sweep tallies its Neyman limit shares.
    neyman_tau: the LSE temperature of that limit (``None``: uniform weights).
  """

  name: str
  algorithm: core.BAIAlgorithm
  neyman: bool = False
  neyman_tau: Optional[float] = None


# (num_arms, budget, VarDEHparams, BaselineHparams) -> entries.
Factory = Callable[[int, int, VarDEHparams, BaselineHparams], list[Entry]]


def _tags(values) -> list[str]:
  """Labels of ``values`` (distinct floats): ``:g`` (6 digits), or every digit where two would print alike."""
  short = [f"{x:g}" for x in values]
  return short if len(set(short)) == len(short) else [repr(float(x)) for x in values]


def _varde(k, t, v, b):
  del b
  return [
      Entry(f"varde_tau{tag}", bai.varde(num_arms=k, budget=t, tau=tau, warm_start=v.warm_start,
                                         var_floor=v.var_floor), True, tau)
      for tau, tag in zip(v.taus, _tags(v.taus))
  ]


def _varde_uniform(k, t, v, b):
  del b
  alg = bai.varde(num_arms=k, budget=t, weighting="uniform", warm_start=v.warm_start, var_floor=v.var_floor)
  return [Entry("varde_uniform_weights", alg, True, None)]


def _varde_known(k, t, v, b):
  del b
  alg = bai.varde(num_arms=k, budget=t, tau=v.ablation_tau, variance="known", warm_start=v.warm_start,
                  var_floor=v.var_floor)
  return [Entry("varde_known_variance", alg, True, v.ablation_tau)]


def _simple(name: str, build: Callable[[int, int, BaselineHparams], core.BAIAlgorithm]) -> Factory:
  return lambda k, t, v, b: [Entry(name, build(k, t, b))]


ALGORITHMS: dict[str, Factory] = {
    "varde": _varde,
    "varde_uniform_weights": _varde_uniform,
    "varde_known_variance": _varde_known,
    "uniform": _simple("uniform", lambda k, t, b: baselines.uniform(num_arms=k, budget=t)),
    "successive_rejects": _simple(
        "successive_rejects", lambda k, t, b: elimination.successive_rejects(num_arms=k, budget=t, reuse_samples=True)
    ),
    "sequential_halving": _simple(
        "sequential_halving",
        lambda k, t, b: elimination.sequential_halving(num_arms=k, budget=t, reuse_samples=b.sh_reuse_samples),
    ),
    "ucbe": lambda k, t, v, b: [
        Entry(f"ucbe_c{tag}", baselines.ucbe(num_arms=k, budget=t, c=c, scale=b.rate_scale))
        for c, tag in zip(b.ucbe_c, _tags(b.ucbe_c))
    ],
    "ugape": _simple("ugape", lambda k, t, b: baselines.ugape(num_arms=k, budget=t, c=b.ugape_c, scale=b.rate_scale)),
    "gapev": _simple(
        "gapev",
        lambda k, t, b: baselines.gapev(num_arms=k, budget=t, c=b.gapev_c, scale=b.rate_scale, var_floor=b.var_floor),
    ),
    "shvar": _simple(
        "shvar", lambda k, t, b: elimination.shvar(num_arms=k, budget=t, reuse_samples=b.sh_reuse_samples)
    ),
    "shadavar": _simple(
        "shadavar",
        lambda k, t, b: elimination.shadavar(
            num_arms=k, budget=t, delta=b.shadavar_delta, reuse_samples=b.sh_reuse_samples
        ),
    ),
    "ttts": _simple(
        "ttts",
        lambda k, t, b: baselines.ttts(
            num_arms=k, budget=t, beta=b.ttts_beta, warm_start=b.warm_start, var_floor=b.var_floor
        ),
    ),
    "ocba": _simple(
        "ocba", lambda k, t, b: baselines.ocba(num_arms=k, budget=t, warm_start=b.warm_start, var_floor=b.var_floor)
    ),
}
"""Suite name -> factory ``(K, T, VarDEHparams, BaselineHparams) -> [Entry]``."""


def build_suite(
    names, num_arms: int, budget: int, v: VarDEHparams, b: BaselineHparams
) -> list[Entry]:
  """Expands suite ``names`` (keys of :data:`ALGORITHMS`) for ``(K, T)``.

  Raises:
    ValueError: an unknown name, or an algorithm that cannot run at this
      budget (its message says why).
  """
  out: list[Entry] = []
  for name in names:
    if name not in ALGORITHMS:
      raise ValueError(f"unknown algorithm {name!r}; allowed: {list(ALGORITHMS)}")
    try:
      out += ALGORITHMS[name](num_arms, budget, v, b)
    except ValueError as e:
      raise ValueError(f"{name}: {e}") from e
  return out
