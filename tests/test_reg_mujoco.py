"""MuJoCo (gymnasium) episodes and the TD3-based dataset generator at a tiny size."""

import numpy as np

from datasets.offline_rl import builder as rl_builder
from datasets.offline_rl import d4rl
from envs import mujoco_tasks
from launch.configs import reg as reg_config
from launch.experiments.reg import data as reg_data


def test_hopper_rollout_layout(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # MuJoCo writes its warning log to the working directory
  ep = mujoco_tasks.rollout("hopper", lambda o: np.ones((len(o), 3)), 3, seed=0, max_steps=60)
  assert ep.observations.shape == (3, 60, 11) and ep.actions.shape == (3, 60, 3)
  lengths = ep.valid.sum(1)
  for i, n in enumerate(lengths):  # every episode ends once: a fall (terminal) or the time limit
    assert ep.valid[i, :n].all() and not ep.valid[i, n:].any()
    assert ep.terminals[i].sum() + ep.timeouts[i].sum() == 1
    assert ep.terminals[i, n - 1] or ep.timeouts[i, n - 1]
  np.testing.assert_allclose(mujoco_tasks.returns(ep), np.where(ep.valid, ep.rewards, 0).sum(1))
  # Deterministic given the seed.
  again = mujoco_tasks.rollout("hopper", lambda o: np.ones((len(o), 3)), 3, seed=0, max_steps=60)
  np.testing.assert_array_equal(ep.observations, again.observations)


def test_td3_generator_makes_every_kind(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  config = reg_config.get_config("smoke,tasks=hopper")
  config.data.kinds = reg_config.KINDS
  config.data.td3_steps, config.data.td3_start_steps, config.data.td3_snapshot_every = 400, 100, 100
  config.data.td3_hidden = (16, 16)
  config.data.mujoco_transitions, config.data.mujoco_max_steps = 300, 50
  config.data.reference_episodes = 2
  directory = str(tmp_path / "data")
  reg_data.ensure_generated(config, directory)
  sizes = {}
  for kind in reg_config.KINDS:
    rows, meta = rl_builder.load("hopper", kind, directory)
    d4rl.validate(rows)
    sizes[kind] = len(rows["rewards"])
    assert {"random_return", "expert_return", "behaviour", "medium_snapshot_step"} <= set(meta)
    assert rows["observations"].shape[1] == 11 and rows["actions"].shape[1] == 3
  assert sizes["random"] == sizes["medium"] == sizes["expert"] == 300  # collected until full
  assert sizes["medium-expert"] == 600 and sizes["medium-replay"] <= 400
  data = reg_data.load(config, "hopper-medium", directory)
  assert data.transitions["terminals"].dtype == np.float32 and data.obs_dim == 11
