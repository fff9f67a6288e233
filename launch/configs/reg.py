r"""REG / OPG offline RL against IQL, TD3+BC and BC on D4RL-style datasets.

Launch from the repository root:

  python -m launch.main --config=launch/configs/reg.py:cpu --workdir=runs/reg

  # smoke size (seconds), one task, or the paper's scale on real D4RL files:
  python -m launch.main --config=launch/configs/reg.py:smoke --workdir=runs/reg_smoke
  python -m launch.main --config=launch/configs/reg.py:cpu,tasks=pendulum,kinds=medium --workdir=...
  python -m launch.main --config=launch/configs/reg.py:paper --workdir=... \
      --config.data.d4rl_dir=$HOME/.d4rl/datasets

The ``cpu`` and ``smoke`` presets generate their datasets (gymnax Pendulum
and MountainCarContinuous with scripted behaviour, gymnasium Hopper -- or
HalfCheetah, ``tasks=halfcheetah`` -- with behaviour policies of the project's
online TD3), write them with the TFDS
builder ``offline_rl`` into ``data.data_dir`` and read them back through it.
``paper`` points at real D4RL -v2 HDF5 files (``data.source="d4rl_hdf5"``;
``"tfds_d4rl"`` reads the TFDS catalog's ``d4rl_mujoco_*`` instead) and uses
IQL's sizes (256x256 networks, batch 256, 1M updates). Any key can be
overridden, e.g. ``--config.num_seeds=10 --config.reg.alpha=0.5``.
"""

import dataclasses

import ml_collections

from datasets.offline_rl import d4rl
from datasets.offline_rl import tfds_d4rl
from envs import classic_control
from launch.configs import common
from methods import reg
from methods.common import hparams

F = hparams.field
ALGORITHMS = tuple(reg.ALGORITHMS)
KINDS = ("random", "medium", "expert", "medium-replay", "medium-expert")  # generated dataset kinds
MUJOCO_GENERATED = ("halfcheetah", "hopper")  # MuJoCo tasks with a generated dataset (TD3 behaviour)
GENERATED_TASKS = classic_control.TASKS + MUJOCO_GENERATED
D4RL_TASKS = tfds_d4rl.TASKS  # tasks whose D4RL datasets are evaluated
NO_ENV = "none"  # data.hdf5_task of a file without an environment: any dimensions, trained, not evaluated
D4RL_DATASETS = tuple(f"{t}-{k}-v2" for t in D4RL_TASKS for k in ("medium", "medium-replay", "medium-expert"))


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys (the agent's are :class:`methods.reg.Hparams`)."""

  algorithms: tuple[str, ...] = F(ALGORITHMS, "Algorithms compared (methods.reg.ALGORITHMS).", choices=ALGORITHMS,
                                  nonempty=True, unique=True)
  num_seeds: int = F(6, "Seeds per (dataset, algorithm); a multiple of the device count wastes none.", low=1)
  num_updates: int = F(2_000, "Updates per (dataset, algorithm, seed) (paper: 1M).", low=1)
  updates_per_chunk: int = F(500, "Updates per jitted lax.scan call; checkpoints every checkpoint.every chunks.",
                             low=1)
  eval_every: int = F(1, "Evaluate every this many chunks (and at the end).", low=1)
  eval_episodes: int = F(2, "Episodes per seed at intermediate evaluations.", low=1)
  final_eval_episodes: int = F(10, "Episodes per seed at the end.", low=1)
  actor_cosine_decay: bool = F(False, "Cosine decay of the actor lr over num_updates (IQL; paper: True).",
                               key="agent.actor_cosine_decay")

  def checks(self):
    if self.num_updates % self.updates_per_chunk:
      yield "num_updates", f"{self.num_updates} is not a multiple of updates_per_chunk={self.updates_per_chunk}"


@dataclasses.dataclass(frozen=True)
class Data(hparams.Hyperparameters):
  """Where the datasets come from and how they are preprocessed (config section ``data``)."""

  source: str = F("generated", "generated | d4rl_hdf5 (D4RL -v2 HDF5 files) | tfds_d4rl (TFDS catalog).",
                  choices=("generated", "d4rl_hdf5", "tfds_d4rl"))
  tasks: tuple[str, ...] = F(classic_control.TASKS + ("hopper",), "Generated tasks.", choices=GENERATED_TASKS,
                             nonempty=True)
  kinds: tuple[str, ...] = F(KINDS, "Generated dataset kinds.", choices=KINDS, nonempty=True)
  d4rl_datasets: tuple[str, ...] = F(D4RL_DATASETS, "D4RL datasets of the d4rl_hdf5 / tfds_d4rl sources.",
                                     choices=tuple(f"{t}-{k}-v2" for t in D4RL_TASKS for k in d4rl.DATASET_KINDS),
                                     nonempty=True)
  data_dir: str = F("", "TFDS data dir of generated datasets ('': <workdir>/data).")
  d4rl_dir: str = F("~/.d4rl/datasets", "Where d4rl_hdf5 finds <name>.hdf5.")
  normalize_observations: bool = F(True, "Standardise observations with the dataset's mean and sd.")
  reward_scale: str = F("reference", "reference | traj_return (IQL's) | none.",
                        choices=("reference", "traj_return", "none"))
  action_clip: float = F(1.0 - 1e-5, "Dataset actions are clipped to +-this.", low=0, high=1, low_open=True)
  classic_transitions: int = F(100_000, "Rows of each classic-control dataset.", low=100)
  mujoco_transitions: int = F(50_000, "Rows of each MuJoCo dataset.", low=100)
  mujoco_max_steps: int = F(1000, "Episode time limit of the MuJoCo tasks.", low=10)
  td3_steps: int = F(40_000, "Online TD3 environment steps for the MuJoCo behaviour policies.", low=1)
  td3_start_steps: int = F(5_000, "Uniform random actions first.", low=0)
  td3_hidden: tuple[int, ...] = F((64, 64), "TD3 hidden widths.", low=1, nonempty=True)
  td3_lr: float = F(1e-3, "TD3 learning rate (TD3 paper, v1).", low=0, low_open=True)
  td3_snapshot_every: int = F(5_000, "TD3 behaviour snapshot interval (a multiple of 5).", low=5)
  reference_episodes: int = F(100, "Episodes for the random / expert reference returns.", low=2)
  hdf5_file: str = F("", "A user's own D4RL-format HDF5 file (any name) for d4rl_hdf5; replaces d4rl_datasets.")
  hdf5_task: str = F("halfcheetah", "Environment of hdf5_file (arrays checked against it; evaluated on it); none: "
                     "any dimensions, trained but not evaluated (offline training metrics only).",
                     choices=D4RL_TASKS + (NO_ENV,))
  hdf5_random_return: float = F(0.0, "Random-policy return for hdf5_file's normalised scores.")
  hdf5_expert_return: float = F(0.0, "Expert return for hdf5_file's scores (both 0: raw returns are reported).")

  def checks(self):
    if self.td3_start_steps >= self.td3_steps:
      yield "td3_start_steps", "must be smaller than data.td3_steps"
    if self.td3_snapshot_every % 5:
      yield "td3_snapshot_every", "must be a multiple of 5 (TD3 trains in fifths of it)"
    if self.hdf5_expert_return < self.hdf5_random_return:
      yield "hdf5_expert_return", (f"{self.hdf5_expert_return:g} is below hdf5_random_return="
                                   f"{self.hdf5_random_return:g}: the normalised scores would be upside down; give the "
                                   "expert's return above the random policy's (both 0: raw returns)")
    if self.hdf5_file and self.source != "d4rl_hdf5":
      yield "hdf5_file", f"is read by source 'd4rl_hdf5' (set --config.data.source=d4rl_hdf5; got {self.source!r})"


def agent_hparams(config: ml_collections.ConfigDict, algorithm: str) -> reg.Hparams:
  """Static :class:`methods.reg.Hparams` of ``algorithm`` (``methods.reg.ALGORITHMS``) under ``config``."""
  spec = reg.ALGORITHMS[algorithm]
  cosine = config.agent.actor_cosine_decay and spec["extraction"] in ("awr", "opg")
  return hparams.from_config(reg.Hparams, config, actor_cosine_steps=config.num_updates if cosine else 0, **spec)


def _d4rl_tasks(config):
  if config.data.source != "generated":
    for n in config.data.d4rl_datasets:
      if d4rl.task_of(n) not in D4RL_TASKS:
        yield "data.d4rl_datasets", f"{n!r}: only {'/'.join(D4RL_TASKS)} -v2 datasets are evaluated"


SECTIONS = common.declare(
    "reg",
    ("", Run),
    common.Section("", reg.Hparams, build=lambda c: [agent_hparams(c, a) for a in c.algorithms]),
    ("data", Data),
    checks=(_d4rl_tasks,),
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,tasks=pendulum+mountaincar][,kinds=medium+expert]"`` (``+``-separated)."""
  opts = common.parse_arg(arg, tasks="", kinds="")
  config = SECTIONS.defaults(opts.preset)
  # cpu scale: smaller networks than IQL's 256x256, and REG's gap weight.
  config.agent.hidden = (64, 64)
  config.reg.alpha = 0.5

  if opts.preset == "smoke":
    config.data.tasks = ("pendulum",)
    config.data.kinds = ("medium",)
    config.data.classic_transitions = 20_000
    config.data.reference_episodes = 50
    config.algorithms = ("iql", "reg_opg", "td3bc", "bc")
    config.num_seeds = 2
    config.num_updates = 400
    config.updates_per_chunk = 100
    config.eval_every = 2
    config.eval_episodes = 4
    config.final_eval_episodes = 4
    config.agent.hidden = (32, 32)
    config.agent.batch_size = 64
  elif opts.preset == "paper":
    config.data.source = "d4rl_hdf5"
    config.data.reward_scale = "traj_return"
    config.data.normalize_observations = False
    config.num_seeds = 10
    config.num_updates = 1_000_000
    config.updates_per_chunk = 5_000
    config.eval_every = 2
    config.eval_episodes = 10
    config.final_eval_episodes = 100
    config.agent.hidden = (256, 256)
    config.agent.actor_cosine_decay = True
    config.data.td3_hidden = (256, 256)
    config.data.td3_lr = 3e-4
    config.data.td3_steps = 1_000_000
    config.data.mujoco_transitions = 1_000_000
    config.data.classic_transitions = 1_000_000
  if opts.tasks:
    config.data.tasks = tuple(opts.tasks.split("+"))
  if opts.kinds:
    config.data.kinds = tuple(opts.kinds.split("+"))
  return config
