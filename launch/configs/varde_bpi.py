r"""VarDE best-policy identification with a generative model (a reconstruction).

Policy regret ``V*(s0) - V^pi_hat(s0)`` (exact, by dynamic programming on the
true MDP) against the sample budget, for VarDE's occupancy-weighted variance
allocation, uniform sampling, MDP-GapE and a BESPOKE-style allocation, on
RiverSwim, the slippery gridworld and Garnet MDPs with high-variance or
heavy-tailed rewards. ``varde_no_floor`` is VarDE without its forced-exploration
floor (``bpi.floor_c = 0``), on the same instances and keys; the tables give
every algorithm's paired difference to ``varde`` with instance-clustered errors. Launch
from the repository root:

  python -m launch.main --config=launch/configs/varde_bpi.py:cpu --workdir=runs/varde_bpi
  python -m launch.main --config=launch/configs/varde_bpi.py:smoke --workdir=...

Your own MDP: a ``.npz`` file with arrays ``P [S, A, S]``, ``reward_mean`` and
``reward_std`` ``[S, A]`` and a scalar ``discount`` (checked on load):

  python -m launch.main --config=launch/configs/varde_bpi.py:cpu,envs=file \
      --config.mdp_file=my_mdp.npz --workdir=...

The experiment's own keys are :class:`Run`, the environments' :class:`EnvConfig`
(``env.*``); the allocations' (``bpi.*``) are declared in ``methods/varde/bpi.py``.
"""

import dataclasses

import ml_collections

from launch.configs import common
from methods.common import hparams
from methods.varde import bpi

F = hparams.field
ENVS = ("riverswim", "gridworld", "garnet_high_variance", "garnet_heavy_tailed", "file")
ENV_SETS = {"all": ENVS[:4], "file": ("file",)}


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys."""

  envs: tuple[str, ...] = F(ENV_SETS["all"], "Environments (file: your own MDP, mdp_file).", choices=ENVS,
                            nonempty=True, unique=True)
  algorithms: tuple[str, ...] = F(bpi.ALGORITHMS, "Sampling allocations (methods.varde.bpi.ALGORITHMS).",
                                  choices=bpi.ALGORITHMS, nonempty=True, unique=True)
  budgets: tuple[int, ...] = F((256, 1024, 4096), "Generative-model samples (log-spaced).", low=1,
                               nonempty=True, unique=True)
  num_instances: int = F(32, "Random Garnet MDPs per environment.", low=1)
  runs_per_instance: int = F(4, "Seeds per instance.", low=1)
  mdp_file: str = F("", "envs=file: a .npz with P, reward_mean, reward_std, discount.")
  start_state: int = F(0, "envs=file: the start state s0.", low=0)

  def checks(self):
    if "file" not in self.envs:
      for name, default in (("mdp_file", ""), ("start_state", 0)):
        if getattr(self, name) != default:
          yield name, f"only used with envs=file (envs={self.envs!r}); add 'file' to envs, or drop it"


@dataclasses.dataclass(frozen=True)
class EnvConfig(hparams.Hyperparameters):
  """Sizes and noise of the BPI environments (config section ``env``)."""

  riverswim_states: int = F(6, "RiverSwim states.", low=2)
  riverswim_reward_std: float = F(0.5, "RiverSwim reward std.", low=0)
  riverswim_gamma: float = F(0.9, "RiverSwim discount.", low=0, high=1, high_open=True)
  grid_size: int = F(3, "Gridworld side (FrozenLake-style, slippery).", low=2, high=8)
  grid_reward_std: float = F(0.5, "Gridworld goal reward std.", low=0)
  grid_gamma: float = F(0.95, "Gridworld discount.", low=0, high=1, high_open=True)
  garnet_states: int = F(10, "Garnet states.", low=2)
  garnet_actions: int = F(3, "Garnet actions.", low=2)
  garnet_branching: int = F(3, "Garnet successors per pair.", low=1)
  garnet_gamma: float = F(0.9, "Garnet discount.", low=0, high=1, high_open=True)
  garnet_std_high: float = F(2.0, "Reward stds are U[0.1, this] per pair.", low=0.1)
  heavy_df: float = F(3.0, "Student-t degrees of freedom of garnet_heavy_tailed.", low=2, low_open=True)

  def checks(self):
    if self.garnet_branching > self.garnet_states:
      yield "garnet_branching", f"{self.garnet_branching} successors > {self.garnet_states} states"


SECTIONS = common.declare(
    "varde_bpi",
    ("", Run),
    ("env", EnvConfig),
    ("bpi", bpi.BPIHparams),
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,envs=all|file]"``."""
  opts = common.parse_arg(arg, envs="all")
  if opts.envs not in ENV_SETS:
    raise ValueError(f"envs={opts.envs!r}; allowed: {sorted(ENV_SETS)}")
  config = SECTIONS.defaults(opts.preset)
  config.envs = ENV_SETS[opts.envs]
  if opts.preset == "smoke":
    config.budgets = (128, 512)
    config.num_instances, config.runs_per_instance = 4, 2
  elif opts.preset == "paper":
    config.budgets = (256, 512, 1024, 2048, 4096, 8192, 16384)
    config.num_instances, config.runs_per_instance = 200, 10
  return config
