"""A user's own D4RL-format HDF5 file: any name, checked against its environment, refused if empty."""

import numpy as np
import pytest

from datasets.offline_rl import d4rl
from launch import config_schema
from launch import errors
from launch import runner
from launch.configs import reg as reg_config
from launch.experiments.reg import experiment as reg_exp
from launch.experiments.reg import data as reg_data

import d4rl_rows


def _config(tmp_path, path="", task="hopper", refs=(0.0, 0.0)):
  config = reg_config.get_config("smoke")
  config.algorithms = ("bc",)
  config.data.source = "d4rl_hdf5"
  config.data.d4rl_dir = str(tmp_path)
  config.data.hdf5_file = path
  config.data.hdf5_task = task
  config.data.hdf5_random_return, config.data.hdf5_expert_return = refs
  config.data.data_dir = str(tmp_path / "data")
  config.mesh.data = 2
  return config


def test_a_users_file_of_any_name_with_its_reference_returns(tmp_path):
  path = d4rl_rows.write(tmp_path / "my runs.h5", d4rl_rows.rows(40, 11, 3))
  config = _config(tmp_path, path, "hopper", (-20.0, 3000.0))
  runner.validate(config)
  assert reg_data.dataset_names(config) == ["my runs"]
  data = reg_data.load(config, "my runs", str(tmp_path))
  assert data.task == "hopper" and (data.random_return, data.expert_return) == (-20.0, 3000.0)
  assert data.obs_dim == 11 and data.action_dim == 3 and data.info["path"] == path
  assert len(data.transitions["rewards"]) == 38  # two timed-out episode ends dropped


def test_without_reference_returns_scores_are_raw_returns(tmp_path):
  path = d4rl_rows.write(tmp_path / "mine.hdf5", d4rl_rows.rows(40, 17, 6))
  data = reg_data.load(_config(tmp_path, path, "walker2d"), "mine", str(tmp_path))
  returns = np.array([-5.0, 0.0, 1234.5])
  np.testing.assert_allclose(d4rl.normalized_score(returns, data.random_return, data.expert_return), returns)
  assert data.info["score"] == "raw return" and data.reward_scale > 0


@pytest.mark.parametrize("shape,words", [
    ({"obs_dim": 17}, "'observations' has 17 columns; hopper observations have 11"),
    ({"act_dim": 6}, "'actions' has 6 columns; hopper actions have 3"),
])
def test_dimensions_are_checked_against_the_environment(tmp_path, shape, words):
  dims = {"obs_dim": 11, "act_dim": 3, **shape}
  path = d4rl_rows.write(tmp_path / "f.hdf5", d4rl_rows.rows(40, dims["obs_dim"], dims["act_dim"]))
  with pytest.raises(d4rl.D4RLFormatError, match=words):
    reg_data.load(_config(tmp_path, path, "hopper"), "f", str(tmp_path))
  # A catalog name is checked against its own environment too.
  d4rl_rows.write(tmp_path / "hopper-medium-v2.hdf5", d4rl_rows.rows(40, dims["obs_dim"], dims["act_dim"]))
  with pytest.raises(d4rl.D4RLFormatError, match=words):
    reg_data.load(_config(tmp_path), "hopper-medium-v2", str(tmp_path))


def test_ranks_are_checked(tmp_path):
  rows = d4rl_rows.rows(40, 11, 3)
  rows["rewards"] = rows["rewards"][:, None]
  path = d4rl_rows.write(tmp_path / "f.hdf5", rows)
  with pytest.raises(d4rl.D4RLFormatError, match=r"f.hdf5: 'rewards' must be \[N\], got shape \(40, 1\)"):
    reg_data.load(_config(tmp_path, path), "f", str(tmp_path))


@pytest.mark.parametrize("n", [0, 1])
def test_an_empty_or_one_row_file_is_refused_before_compiling(tmp_path, monkeypatch, n):
  path = d4rl_rows.write(tmp_path / "tiny.hdf5", d4rl_rows.rows(n, 11, 3))

  def compiled(*args, **kwargs):
    raise AssertionError("compilation started")

  monkeypatch.setattr(reg_exp, "init_states", compiled)
  monkeypatch.setattr(reg_exp, "chunk_fn", compiled)
  with pytest.raises(d4rl.D4RLFormatError, match=f"tiny.hdf5: {n} rows?; at least 2") as e:
    runner.run(_config(tmp_path, path), str(tmp_path / "run"))
  assert isinstance(e.value, errors.user_error_types())


def test_a_file_without_any_transition_is_refused(tmp_path):
  rows = d4rl_rows.rows(2, 11, 3)
  rows["timeouts"][:] = [True, False]  # the only transition crosses an episode end
  path = d4rl_rows.write(tmp_path / "cut.hdf5", rows)
  with pytest.raises(d4rl.D4RLFormatError, match="no transition"):
    reg_data.load(_config(tmp_path, path), "cut", str(tmp_path))


def test_a_missing_file_is_a_data_error_naming_the_flag(tmp_path):
  with pytest.raises(d4rl.D4RLFormatError, match="--config.data.hdf5_file") as e:
    reg_data.load(_config(tmp_path, str(tmp_path / "absent.h5")), "absent", str(tmp_path))
  assert isinstance(e.value, FileNotFoundError)
  with pytest.raises(d4rl.D4RLFormatError, match="--config.data.d4rl_dir"):
    reg_data.load(_config(tmp_path), "hopper-medium-v2", str(tmp_path))


@pytest.mark.parametrize("key", ["data.hdf5_random_return", "data.hdf5_expert_return"])
def test_nan_reference_returns_are_refused_by_the_config(tmp_path, key):
  config = _config(tmp_path, "x.h5")
  node, name = config.data, key.split(".")[1]
  node[name] = float("nan")
  with pytest.raises(config_schema.ConfigError, match=key):
    runner.validate(config)


@pytest.mark.parametrize("refs", [(100.0, 5.0), (5.0, 0.0)])
def test_an_expert_return_below_the_random_one_is_refused_by_the_config(tmp_path, refs):
  """Reversed reference returns would turn every normalised score upside down."""
  with pytest.raises(config_schema.ConfigError, match=r"'data.hdf5_expert_return'.*upside down"):
    runner.validate(_config(tmp_path, "x.h5", refs=refs))


def test_actions_outside_the_policies_range_are_named_not_clipped(tmp_path):
  rows = d4rl_rows.rows(40, 11, 3)
  rows["actions"][7, 2] = -100.0
  path = d4rl_rows.write(tmp_path / "wide.h5", rows)
  for task in ("hopper", reg_config.NO_ENV):
    with pytest.raises(d4rl.D4RLFormatError, match=r"wide.h5: 'actions' reach -100 \(row 7, column 2\)"):
      reg_data.load(_config(tmp_path, path, task), "wide", str(tmp_path))


@pytest.mark.parametrize("key, value, words", [
    ("terminals", np.nan, r"'terminals' holds nan at index 3 \(1 such rows\); a flag is 0 or 1"),
    ("timeouts", 0.5, r"'timeouts' holds 0.5 at index 3"),
])
def test_episode_flags_other_than_0_and_1_are_named(tmp_path, key, value, words):
  rows = d4rl_rows.rows(40, 11, 3)
  rows[key] = rows[key].astype(np.float64)
  rows[key][3] = value
  path = d4rl_rows.write(tmp_path / "flags.h5", rows)
  with pytest.raises(d4rl.D4RLFormatError, match=words):
    reg_data.load(_config(tmp_path, path), "flags", str(tmp_path))


def test_a_file_of_one_episode_names_the_reward_scale_keys(tmp_path):
  rows = d4rl_rows.rows(40, 11, 3)
  rows["timeouts"][:] = False  # one episode: IQL's return spread is undefined
  path = d4rl_rows.write(tmp_path / "one.h5", rows)
  with pytest.raises(d4rl.D4RLFormatError, match=r"one.h5: all 1 episodes .*--config.data.reward_scale=none"):
    reg_data.load(_config(tmp_path, path), "one", str(tmp_path))
  config = _config(tmp_path, path)
  config.data.reward_scale = "none"
  assert reg_data.load(config, "one", str(tmp_path)).reward_scale == 1.0


def test_observations_too_large_to_normalise_are_refused(tmp_path):
  rows = d4rl_rows.rows(40, 11, 3)
  rows["observations"][:, 4] *= np.float32(1e30)  # finite in float32, its squares are not
  path = d4rl_rows.write(tmp_path / "huge.h5", rows)
  with pytest.raises(d4rl.D4RLFormatError, match=r"huge.h5: .*'observations' columns \[4\] overflows float32"):
    reg_data.load(_config(tmp_path, path), "huge", str(tmp_path))
  config = _config(tmp_path, path)
  config.data.normalize_observations = False
  assert np.isfinite(reg_data.load(config, "huge", str(tmp_path)).transitions["observations"]).all()


@pytest.mark.parametrize("obs_dim, act_dim, key", [(0, 2, "observations"), (5, 0, "actions")])
def test_a_file_of_zero_columns_is_refused_before_compiling(tmp_path, monkeypatch, obs_dim, act_dim, key):
  """A named error, not flax's initialisers dividing by zero (a traceback from methods/reg/networks.py)."""
  path = d4rl_rows.write(tmp_path / "flat.h5", d4rl_rows.rows(40, obs_dim, act_dim))

  def compiled(*args, **kwargs):
    raise AssertionError("compilation started")

  monkeypatch.setattr(reg_exp, "init_states", compiled)
  monkeypatch.setattr(reg_exp, "chunk_fn", compiled)
  with pytest.raises(d4rl.D4RLFormatError, match=f"flat.h5: '{key}' has 0 columns") as e:
    runner.run(_config(tmp_path, path, reg_config.NO_ENV), str(tmp_path / "run"))
  assert isinstance(e.value, errors.user_error_types()) and "\n" not in errors.one_line(e.value)


@pytest.mark.parametrize("mode, refs, words", [
    ("reference", (0.0, 0.0), r"scale 9.995e\+44 \(IQL's trajectory-return scale .*hdf5_expert_return are both 0\)"),
    ("traj_return", (0.0, 0.0), r"scale 9.995e\+44 \(IQL's trajectory-return scale .*reward_scale=traj_return\)"),
    ("reference", (0.0, 1e-40), r"scale 1e\+43 \(1000 / \|expert - random return\| with random 0 and expert 1e-40 "
                                r"\(--config.data.hdf5_random_return and --config.data.hdf5_expert_return\)"),
], ids=["raw_return_fallback", "traj_return", "reference"])
def test_a_reward_scale_that_overflows_float32_is_named_before_compiling(tmp_path, monkeypatch, mode, refs, words):
  """A named error, not NaN scaled rewards and a stop on non-finite training metrics."""
  rows = d4rl_rows.rows(40, 5, 2)
  rows["rewards"][:] = 0.0
  rows["rewards"][3] = 1e-42  # IQL's scale 1000 / 1e-42 overflows float32
  path = d4rl_rows.write(tmp_path / "tiny.h5", rows)
  config = _config(tmp_path, path, reg_config.NO_ENV, refs)
  config.data.reward_scale = mode
  monkeypatch.setattr(reg_exp, "init_states", lambda *a, **k: pytest.fail("compilation started"))
  with pytest.raises(d4rl.D4RLFormatError, match=f"tiny.h5: the reward {words}.*--config.data.reward_scale=none") as e:
    runner.run(config, str(tmp_path / "run"))
  assert isinstance(e.value, errors.user_error_types()) and "non-finite in float32" in str(e.value)
  config.data.reward_scale = "none"
  assert reg_data.load(config, "tiny", str(tmp_path)).transitions["rewards"][3] == np.float32(1e-42)


def test_every_source_checks_its_scaled_rewards(tmp_path):
  """Generated datasets and D4RL's catalog go through the same check (their scales come from their references)."""
  q = reg_data.d4rl.qlearning_dataset(d4rl_rows.rows(40, 3, 1))
  config = reg_config.get_config("smoke")
  config.data.reward_scale = "reference"
  with pytest.raises(d4rl.D4RLFormatError, match=r"pendulum-random: the reward scale 1e\+43 .*reference returns "
                                                 r"generated with pendulum-random.*reward_scale=none"):
    reg_data._finish("pendulum-random", "pendulum", q, 0.0, 1e-40, 1e43, config, {})
  config.data.source = "tfds_d4rl"
  with pytest.raises(d4rl.D4RLFormatError, match=r"d4rl_mujoco_hopper/v2: .*D4RL's reference returns of hopper"):
    reg_data._finish("hopper-medium-v2", "hopper", q, 0.0, 1e-40, 1e43, config, {"catalog": "d4rl_mujoco_hopper/v2"})
