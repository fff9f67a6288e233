r"""VarDE fixed-budget best-arm identification: experiments E1-E4 of the paper.

Every algorithm runs on the same seeds with common random numbers; the whole
sweep (all seeds x all algorithms) is one jitted function, vmapped over seeds
and sharded over all devices. Launch from the repository root:

  python -m launch.main --config=launch/configs/varde_bai.py:cpu \
      --workdir=runs/varde_bai_e1

  # Another problem, a smoke-size run, or the paper's scale:
  python -m launch.main --config=launch/configs/varde_bai.py:cpu,problem=E2 --workdir=...
  python -m launch.main --config=launch/configs/varde_bai.py:smoke --workdir=...
  python -m launch.main --config=launch/configs/varde_bai.py:paper,problem=E3 --workdir=...

  # Your own bandit: arm means and, optionally, their stds (empty: the stds
  # are the means, per std_mode); the budgets must be given:
  python -m launch.main --config=launch/configs/varde_bai.py:cpu,problem=custom \
      --config.means='(0.5,0.45,0.3)' --config.stds='(1.0,0.5,0.2)' --config.budgets='(300,)' --workdir=...

Any key can be overridden, e.g. ``--config.num_seeds=5000``;
``--config.varde.taus='(0.1,)'``. The experiment's own keys are :class:`Run`;
VarDE's and the baselines' are declared in ``methods/varde/suite.py``.
"""

import dataclasses
from typing import Optional

import ml_collections
import numpy as np

from envs import bandits
from launch.configs import common
from methods import varde
from methods.common import hparams

F = hparams.field
PROBLEMS = ("E1", "E2", "E3", "E4")  # the paper's; or "custom": your own means/stds
# Suite names; each expands into one or more algorithms (methods.varde.ALGORITHMS).
ALGORITHMS = tuple(varde.ALGORITHMS)

# Budgets run when ``config.budgets == ()``: the paper's budgets plus a grid for
# the error-against-budget figure.
BUDGET_GRIDS = {
    "smoke": {name: p.budgets[:1] for name, p in bandits.PROBLEMS.items()},
    "cpu": {
        "E1": (50, 100, 150, 250, 400),
        "E2": (250, 500, 1000, 2000),
        "E3": (500, 1000, 2000),
        "E4": (100, 200, 400),
    },
    "paper": {
        "E1": (50, 75, 100, 150, 200, 300, 400, 600),
        "E2": (250, 500, 750, 1000, 1500, 2000, 3000),
        "E3": (500, 1000, 1500, 2000, 3000, 4000),
        "E4": (100, 150, 200, 300, 400, 600),
    },
}


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys (VarDE's are ``varde.*``, the baselines' ``baselines.*``)."""

  problem: str = F("E1", "The paper's problem E1-E4, or custom (your own means and stds).",
                   choices=PROBLEMS + ("custom",))
  budgets: tuple[int, ...] = F((), "Budgets T (pulls) to run; (): the problem's BUDGET_GRIDS for the preset.", low=1,
                              unique=True)
  means: tuple[float, ...] = F((), "problem=custom: the arm means.")
  stds: tuple[float, ...] = F((), "problem=custom: the arm stds (empty: the means, per std_mode).")
  num_seeds: int = F(20_000, "Seeds (runs) per budget, shared by every algorithm (common random numbers).", low=1)
  chunk_size: int = F(5_000, "Seeds per jitted call (one checkpoint each).", low=1)
  std_mode: str = F("shuffled", "std = a per-run permutation of the means (or stds): shuffled; or fixed, equal_mean.",
                    choices=bandits.STD_MODES)
  noise: str = F("gaussian", "Reward noise: gaussian, or student_t (heavy tails, variance kept).",
                 choices=bandits.NOISE_KINDS)
  df: float = F(3.0, "Student-t degrees of freedom (noise=student_t).", low=2, low_open=True)
  algorithms: tuple[str, ...] = F(ALGORITHMS, "Suite names (methods.varde.ALGORITHMS) to run.", choices=ALGORITHMS,
                                  nonempty=True, unique=True)
  reference: str = F("varde_tau0.1", "The algorithm the paired comparisons are against.")

  def checks(self):
    if self.problem != "custom":
      for name in ("means", "stds"):
        if getattr(self, name):
          yield name, f"only used with problem=custom (problem={self.problem!r})"
      return
    yield from bandits.check_custom(self.means, self.stds, self.std_mode, budget=max(self.budgets, default=1))
    if not self.budgets:
      yield "budgets", "problem=custom needs explicit budgets, e.g. --config.budgets='(500,)'"


MAX_SCORE = 1e37  # VarDE's largest score 2 mu / tau, below float32's 3.4e38 with room for the sums beside it


def resolve_budgets(config: ml_collections.ConfigDict) -> tuple[int, ...]:
  """The budgets to run: ``config.budgets``, or the problem's grid for the preset."""
  if config.budgets:
    return tuple(config.budgets)
  return BUDGET_GRIDS[config.preset][config.problem]


def resolve_means(config: ml_collections.ConfigDict) -> np.ndarray:
  """``[K]`` arm means: a named problem's, or ``config.means`` for ``problem=custom``."""
  if config.problem == "custom":
    return np.asarray(config.means, np.float32)
  return bandits.problem_means(config.problem)


def algorithm_suite(
    config: ml_collections.ConfigDict, num_arms: int, budget: int
) -> tuple[list[str], list[varde.BAIAlgorithm], dict[str, Optional[float]]]:
  """Expands ``config.algorithms`` (keys of ``methods.varde.ALGORITHMS``) for ``(K, T)``.

  Returns:
    names, algorithms and ``{name: tau}`` for the VarDE variants: the
    temperature of each one's Neyman limit (``None`` for uniform weights).
  """
  v = SECTIONS.build(config, varde.VarDEHparams)
  b = SECTIONS.build(config, varde.BaselineHparams)
  suite = varde.build_suite(config.algorithms, num_arms, budget, v, b)
  names = [e.name for e in suite]
  algorithms = [e.algorithm for e in suite]
  neyman = {e.name: e.neyman_tau for e in suite if e.neyman}
  return names, algorithms, neyman


def _feasibility(config: ml_collections.ConfigDict):
  """Every budget must fit every algorithm's warm start / first phase."""
  num_arms = len(resolve_means(config))
  for budget in resolve_budgets(config):
    try:
      names, _, _ = algorithm_suite(config, num_arms, budget)
    except ValueError as e:
      yield "budgets", f"T={budget}: {e} (raise the budget, or leave it out of 'algorithms')"
      return
  if config.reference not in names:
    yield "reference", f"{config.reference!r} is not run; algorithms run: {names}"


def _temperatures(config: ml_collections.ConfigDict):
  """VarDE's scores ``2 mu / tau`` must stay finite in float32 for rewards up to ``max |mean| + 10 max std``."""
  means = resolve_means(config)
  stds = np.asarray(config.stds or means, np.float64)
  scale = float(np.max(np.abs(means)) + 10 * np.max(np.abs(stds)))
  used = (("varde.taus", config.varde.taus if "varde" in config.algorithms else ()),
          ("varde.ablation_tau", (config.varde.ablation_tau,) if "varde_known_variance" in config.algorithms else ()))
  for key, taus in used:
    for tau in taus:
      if 2 * scale / tau > MAX_SCORE:
        yield key, (f"tau={tau:g} makes VarDE's scores 2 mu / tau reach {2 * scale / tau:.3g} for rewards up to "
                    f"{scale:.3g} (max |mean| + 10 max std), past float32's range; use tau >= {2 * scale / MAX_SCORE:.3g}")


SECTIONS = common.declare(
    "varde_bai",
    ("", Run),
    ("varde", varde.VarDEHparams),
    ("baselines", varde.BaselineHparams),
    checks=(_feasibility, _temperatures),
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,problem=E1|E2|E3|E4|custom]"``."""
  opts = common.parse_arg(arg, problem="E1")
  config = SECTIONS.defaults(opts.preset)
  config.problem = opts.problem
  if opts.preset == "smoke":
    config.num_seeds = 512
    config.chunk_size = 256
  elif opts.preset == "paper":
    config.chunk_size = 20_000
  return config
