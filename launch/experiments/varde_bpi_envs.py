"""The environments of ``varde_bpi`` and their configuration (declared once)."""

from __future__ import annotations

import dataclasses

import jax

from envs import mdps
from methods.common import hparams


@dataclasses.dataclass(frozen=True)
class EnvConfig(hparams.Hyperparameters):
  """Sizes and noise of the BPI environments."""

  riverswim_states: int = hparams.field(6, "RiverSwim states.", low=2)
  riverswim_reward_std: float = hparams.field(0.5, "RiverSwim reward std.", low=0)
  riverswim_gamma: float = hparams.field(0.9, "RiverSwim discount.", low=0, high=1, high_open=True)
  garnet_states: int = hparams.field(10, "Garnet states.", low=2)
  garnet_actions: int = hparams.field(3, "Garnet actions.", low=2)
  garnet_branching: int = hparams.field(3, "Garnet successors per pair.", low=1)
  garnet_gamma: float = hparams.field(0.9, "Garnet discount.", low=0, high=1, high_open=True)
  garnet_std_high: float = hparams.field(2.0, "Reward stds are U[0.1, this] per pair.", low=0.1)
  heavy_df: float = hparams.field(3.0, "Student-t degrees of freedom of garnet_heavy_tailed.", low=2, low_open=True)

  def checks(self):
    if self.garnet_branching > self.garnet_states:
      yield "garnet_branching", f"{self.garnet_branching} successors > {self.garnet_states} states"


def make_env(name: str, cfg: EnvConfig, mdp_file: str = "", start_state: int = 0):
  """``instance_key -> TabularMDP`` of environment ``name``."""
  if name == "riverswim":
    river = mdps.riverswim(cfg.riverswim_states, gamma=cfg.riverswim_gamma, reward_std=cfg.riverswim_reward_std)
    return lambda k: river
  if name in ("garnet_high_variance", "garnet_heavy_tailed"):
    df = cfg.heavy_df if name == "garnet_heavy_tailed" else float("inf")
    return lambda k: mdps.garnet(k, cfg.garnet_states, cfg.garnet_actions, cfg.garnet_branching,
                                 gamma=cfg.garnet_gamma, reward_std=(0.1, cfg.garnet_std_high), df=df)
  if name == "file":
    mdp = mdps.load_npz(mdp_file, s0=start_state)
    return lambda k: mdp
  raise ValueError(f"unknown environment {name!r}")


def num_instances(name: str, requested: int) -> int:
  """Fixed environments (RiverSwim, a file) have one instance."""
  return requested if name.startswith("garnet") else 1


def instance_key(seed: int, env_index: int, instance: jax.Array) -> jax.Array:
  return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), env_index), instance)
