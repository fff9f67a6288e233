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
the spec's sizes (256x256 networks, batch 256, 1M updates). Any key can be
overridden, e.g. ``--config.num_seeds=10 --config.reg.alpha=0.5``.
"""

import ml_collections

from launch.configs import common

ALGORITHMS = (
    "iql", "reg", "reg_opg", "reg_opg_layer", "reg_opg_conflict", "reg_opg_perp",
    "reg_opg_noproj", "reg_opg_bc", "td3bc", "bc",
)
KINDS = ("random", "medium", "expert", "medium-replay", "medium-expert")
GENERATED_TASKS = ("pendulum", "mountaincar", "hopper")
D4RL_DATASETS = tuple(
    f"{t}-{k}-v2" for t in ("halfcheetah", "hopper", "walker2d") for k in ("medium", "medium-replay", "medium-expert")
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,tasks=pendulum+mountaincar][,kinds=medium+expert]"`` (``+``-separated)."""
  opts = common.parse_arg(arg, tasks="", kinds="")
  config = common.base_config("reg", opts.preset)
  config.algorithms = ALGORITHMS
  config.num_seeds = 6  # a multiple of the device count wastes no padded seeds
  config.num_updates = 2_000  # per (dataset, algorithm, seed); cpu scale (paper: 1M)
  config.updates_per_chunk = 500  # one jitted lax.scan call; checkpoints every checkpoint.every chunks
  config.eval_every = 1  # evaluate every this many chunks (and at the end)
  config.eval_episodes = 2  # per seed, at intermediate evaluations
  config.final_eval_episodes = 10  # per seed, at the end

  config.data = ml_collections.ConfigDict()
  config.data.source = "generated"  # "generated" | "d4rl_hdf5" | "tfds_d4rl"
  config.data.tasks = GENERATED_TASKS  # generated tasks
  config.data.kinds = KINDS
  config.data.d4rl_datasets = D4RL_DATASETS  # d4rl_hdf5 / tfds_d4rl sources
  config.data.data_dir = ""  # TFDS data dir of generated datasets ("": <workdir>/data)
  config.data.d4rl_dir = "~/.d4rl/datasets"  # where d4rl_hdf5 finds <name>.hdf5
  config.data.normalize_observations = True
  config.data.reward_scale = "reference"  # "reference" | "traj_return" (IQL's) | "none"
  config.data.action_clip = 1.0 - 1e-5
  config.data.classic_transitions = 100_000  # rows of each classic-control dataset
  config.data.mujoco_transitions = 50_000
  config.data.mujoco_max_steps = 1000  # episode time limit of the MuJoCo tasks
  config.data.td3_steps = 40_000  # online TD3 environment steps for the MuJoCo behaviour policies
  config.data.td3_start_steps = 5_000  # uniform random actions first
  config.data.td3_hidden = (64, 64)
  config.data.td3_lr = 1e-3  # TD3 paper (v1) learning rate
  config.data.td3_snapshot_every = 5_000
  config.data.reference_episodes = 100  # episodes for the random / expert reference returns

  config.agent = ml_collections.ConfigDict()
  config.agent.hidden = (64, 64)
  config.agent.layer_norm = False
  config.agent.batch_size = 256
  config.agent.actor_lr = 3e-4
  config.agent.critic_lr = 3e-4
  config.agent.value_lr = 3e-4
  # IQL decays the actor lr (cosine) over its 1M updates; over a few thousand it halves the
  # actor's training, so the short presets keep the lr constant (paper: True).
  config.agent.actor_cosine_decay = False
  config.agent.discount = 0.99
  config.agent.polyak = 0.005
  config.agent.expectile = 0.7
  config.agent.awr_beta = 3.0
  config.agent.awr_max_weight = 100.0

  config.reg = ml_collections.ConfigDict()
  config.reg.alpha = 0.5
  config.reg.ambiguity = "kappa"  # "kappa" (IQL's dual set) | "simplex"
  config.reg.regularizer = "none"  # "none" | "kl" | "chi2" ("kappa" takes "none")
  config.reg.lam = 1.0

  config.opg = ml_collections.ConfigDict()
  config.opg.eta = 2.5
  config.opg.pg_action = "mean"  # "mean" | "sample"
  config.opg.normalize_q = True
  config.opg.eps = 1e-12

  config.td3bc = ml_collections.ConfigDict()
  config.td3bc.alpha = 2.5
  config.td3bc.policy_noise = 0.2
  config.td3bc.noise_clip = 0.5
  config.td3bc.policy_delay = 2

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
