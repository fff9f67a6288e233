"""Offline RL data: D4RL HDF5 / qlearning_dataset semantics, the TFDS builder, the d4rl_mujoco catalog path."""

import os

import h5py
import numpy as np
import pytest
import tensorflow_datasets as tfds

from datasets.offline_rl import builder as rl_builder
from datasets.offline_rl import d4rl
from datasets.offline_rl import suite
from datasets.offline_rl import tfds_d4rl

S, A = 3, 2


def _rows(lengths=(4, 3, 5), terminal=(False, True, False), seed=0):
  """D4RL rows of episodes; non-terminal episodes end with a timeout (except a cut last one)."""
  rng = np.random.default_rng(seed)
  n = sum(lengths)
  obs = rng.standard_normal((n, S)).astype(np.float32)
  rows = {
      "observations": obs,
      "actions": rng.uniform(-1, 1, (n, A)).astype(np.float32),
      "rewards": rng.standard_normal(n).astype(np.float32),
      "terminals": np.zeros(n, bool),
      "timeouts": np.zeros(n, bool),
      "next_observations": rng.standard_normal((n, S)).astype(np.float32),
  }
  end = 0
  for length, term in zip(lengths, terminal):
    end += length
    rows["terminals" if term else "timeouts"][end - 1] = True
  return rows


def _write_hdf5(path, rows, next_obs=True):
  with h5py.File(path, "w") as f:
    for k, v in rows.items():
      if k != "next_observations" or next_obs:
        f.create_dataset(k, data=v)
    f.create_dataset("infos/qpos", data=np.zeros((len(rows["rewards"]), 2), np.float32))
    f.create_dataset("metadata/algorithm", data="SAC")


def test_qlearning_dataset_semantics(tmp_path):
  rows = _rows()
  path = str(tmp_path / "hopper-medium-v2.hdf5")
  _write_hdf5(path, rows)
  q = d4rl.qlearning_dataset(d4rl.load_hdf5(path))
  # Rows 0..10 (row 11 has no successor); row 3 (timeout of episode 1) dropped; row 6 terminal kept.
  kept = [0, 1, 2, 4, 5, 6, 7, 8, 9, 10]
  np.testing.assert_array_equal(q["observations"], rows["observations"][kept])
  np.testing.assert_array_equal(q["next_observations"], rows["observations"][np.array(kept) + 1])
  np.testing.assert_array_equal(q["actions"], rows["actions"][kept])
  np.testing.assert_array_equal(q["terminals"], [0, 0, 0, 0, 0, 1, 0, 0, 0, 0])
  assert q["terminals"].dtype == np.float32
  # terminate_on_end keeps the timed-out transition (and does not mark it done).
  q2 = d4rl.qlearning_dataset(d4rl.load_hdf5(path), terminate_on_end=True)
  assert len(q2["rewards"]) == 11 and q2["terminals"][3] == 0


def test_d4rl_normalisation_constants():
  np.testing.assert_allclose(d4rl.d4rl_normalized_score("hopper-medium-v2", [-20.272305, 3234.3]), [0, 100])
  np.testing.assert_allclose(d4rl.d4rl_normalized_score("halfcheetah-medium-expert-v2", [-280.178953, 12135.0]),
                             [0, 100])
  np.testing.assert_allclose(d4rl.d4rl_normalized_score("walker2d-medium-replay-v2", [1.629008, 4592.3]), [0, 100])
  np.testing.assert_allclose(d4rl.d4rl_normalized_score("hopper-expert-v2", 1607.01), 50.0, atol=1e-3)
  with pytest.raises(KeyError, match="pendulum"):
    d4rl.ref_scores("pendulum-medium")
  np.testing.assert_allclose(d4rl.normalized_score([-5.0, 0.0, 10.0], 10.0, -5.0), [100.0, 200 / 3, 0.0])
  with pytest.raises(ValueError, match="random and expert reference returns are both 7: .* undefined"):
    d4rl.normalized_score([1.0], 7.0, 7.0)


def test_bad_d4rl_files_are_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    d4rl.load_hdf5(str(tmp_path / "nope.hdf5"))
  bad = tmp_path / "corrupt.hdf5"
  bad.write_bytes(b"this is not hdf5")
  with pytest.raises(d4rl.D4RLFormatError, match="not a readable HDF5"):
    d4rl.load_hdf5(str(bad))
  rows = _rows()
  del rows["timeouts"]
  _write_hdf5(str(tmp_path / "x.hdf5"), rows)
  with pytest.raises(d4rl.D4RLFormatError, match="missing keys \\['timeouts'\\]"):
    d4rl.load_hdf5(str(tmp_path / "x.hdf5"))
  rows = _rows()
  rows["rewards"][2] = np.nan
  with pytest.raises(d4rl.D4RLFormatError, match="'rewards' has NaN"):
    d4rl.validate(rows)


def test_reward_scale_and_episode_returns():
  rows = _rows()
  ret = d4rl.episode_returns(rows)
  np.testing.assert_allclose(ret, [rows["rewards"][:4].sum(), rows["rewards"][4:7].sum(), rows["rewards"][7:].sum()],
                             rtol=1e-6)
  np.testing.assert_allclose(d4rl.reward_scale(rows), 1000.0 / np.ptp(ret), rtol=1e-6)


@pytest.mark.parametrize("next_obs", [True, False])
def test_catalog_rlds_episodes_match_qlearning_dataset(tmp_path, next_obs):
  """The TFDS catalog builder's own episode code on a real-format file, converted back, equals qlearning_dataset."""
  from tensorflow_datasets.d4rl import dataset_utils  # pylint: disable=g-import-not-at-top

  rows = _rows(lengths=(4, 3, 5, 2, 3), terminal=(False, True, True, False, False))
  # As in real -v2 files: next_observations[i] = observations[i + 1] inside an episode.
  inside = ~(rows["terminals"] | rows["timeouts"])[:-1]
  rows["next_observations"][:-1][inside] = rows["observations"][1:][inside]
  path = str(tmp_path / "walker2d-medium-v2.hdf5")
  _write_hdf5(path, rows, next_obs=next_obs)
  with tfds_d4rl.tf_free():
    episodes = [ep for _, ep in dataset_utils.generate_examples(path)]
  assert len(episodes) == 5
  got = tfds_d4rl.episodes_to_transitions(episodes)
  want = d4rl.qlearning_dataset(d4rl.load_hdf5(path))
  for k in ("observations", "actions", "rewards", "terminals"):
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)
  # Next observations agree wherever they matter (after a terminal, qlearning_dataset
  # pairs the next episode's first observation, the catalog the true last one).
  live = want["terminals"] == 0
  np.testing.assert_array_equal(got["next_observations"][live], want["next_observations"][live])
  np.testing.assert_allclose([tfds_d4rl.episode_return(e["steps"]) for e in episodes], d4rl.episode_returns(rows),
                             rtol=1e-5)


def test_d4rl_mujoco_catalog_path_with_mock_data(tmp_path):
  # Random mock examples through the real builder (its features, configs and RLDS layout).
  with tfds.testing.mock_data(num_examples=3):
    q, returns = tfds_d4rl.load("halfcheetah", "v2-medium", data_dir=str(tmp_path))
  assert q["observations"].shape[1:] == (17,) and q["actions"].shape[1:] == (6,)
  assert q["next_observations"].shape[1:] == (17,) and len(returns) == 3
  with pytest.raises(ValueError, match="ant"):
    tfds_d4rl.catalog_name("ant", "v2-medium")


def test_d4rl_mujoco_catalog_path_with_real_format_episodes(tmp_path):
  """tfds.data_source('d4rl_mujoco_hopper/v2-medium') serving the catalog code's episodes of a real-format file."""
  from tensorflow_datasets.d4rl import dataset_utils  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(1)
  rows = _rows(lengths=(6, 4, 5), terminal=(True, False, False))
  rows["observations"] = rng.standard_normal((15, 11)).astype(np.float32)
  rows["next_observations"] = np.roll(rows["observations"], -1, axis=0)
  rows["actions"] = rng.uniform(-1, 1, (15, 3)).astype(np.float32)
  path = str(tmp_path / "hopper-medium-v2.hdf5")
  _write_hdf5(path, rows)
  with tfds_d4rl.tf_free():
    episodes = [ep for _, ep in dataset_utils.generate_examples(path)]
  seen = {}

  def as_data_source(builder, split, **kwargs):
    del kwargs
    seen["features"], seen["split"] = builder.info.features, split
    return episodes

  with tfds.testing.mock_data(as_data_source_fn=as_data_source):
    q, returns = tfds_d4rl.load("hopper", "v2-medium", data_dir=str(tmp_path))
  assert "steps" in seen["features"] and seen["split"] == "train"
  want = d4rl.qlearning_dataset(rows)
  live = want["terminals"] == 0
  for k in ("observations", "actions", "rewards", "terminals"):
    np.testing.assert_array_equal(q[k], want[k], err_msg=k)
  np.testing.assert_array_equal(q["next_observations"][live], want["next_observations"][live])
  np.testing.assert_allclose(returns, d4rl.episode_returns(rows), rtol=1e-5)


def test_builder_roundtrip_and_errors(tmp_path):
  rows = _rows(lengths=(200, 150, 80), terminal=(False, True, False))
  rows["observations"] = np.random.default_rng(0).standard_normal((430, 3)).astype(np.float32)
  rows["next_observations"] = rows["observations"] + 1
  rows["actions"] = rows["actions"][:, :1].copy()
  manual, data = str(tmp_path / "manual"), str(tmp_path / "data")
  with pytest.raises(FileNotFoundError, match="not prepared"):
    rl_builder.load("pendulum", "medium", data)
  with pytest.raises(ValueError, match="expert_return"):
    rl_builder.stage(manual, "pendulum", "medium", rows, {"random_return": -1.0})
  rl_builder.stage(manual, "pendulum", "medium", rows, {"random_return": -1200.0, "expert_return": -150.0})
  rl_builder.prepare("pendulum", "medium", data, manual)
  assert rl_builder.is_prepared("pendulum", "medium", data)
  got, meta = rl_builder.load("pendulum", "medium", data)
  for k in rl_builder.ROW_KEYS:
    np.testing.assert_array_equal(got[k], rows[k], err_msg=k)
  assert meta["random_return"] == -1200.0 and meta["expert_return"] == -150.0
  assert os.listdir(os.path.join(data, "offline_rl", "pendulum_medium", "1.0.0"))
  assert any(f.endswith(".array_record-00000-of-00001") for f in
             os.listdir(os.path.join(data, "offline_rl", "pendulum_medium", "1.0.0")))
  # A corrupt staged file is named.
  bad = os.path.join(manual, "pendulum_expert.npz")
  with open(bad, "wb") as f:
    f.write(b"garbage")
  with pytest.raises(d4rl.D4RLFormatError, match="pendulum_expert.npz"):
    rl_builder.prepare("pendulum", "expert", data, manual)


def test_reference_returns_must_differ_to_score(tmp_path, monkeypatch):
  """Equal (or non-finite) reference returns leave the normalised score and the reference scale undefined (a division
  by zero): staging refuses them, and a dataset prepared with them is refused by name when the experiment reads it."""
  from launch.configs import reg as reg_config
  from launch.experiments.reg import data as reg_data
  rows = _rows(lengths=(200, 150, 80), terminal=(False, True, False))
  rows["actions"] = rows["actions"][:, :1].copy()
  manual = str(tmp_path / "manual")
  for refs, match in (((-150.0, -150.0), r"'random_return' and 'expert_return' are both -150; the normalised score"),
                      ((float("nan"), 1.0), r"must be finite numbers"), (("low", 1.0), r"must be finite numbers")):
    with pytest.raises(d4rl.D4RLFormatError, match=r"metadata of pendulum-medium: .*" + match):
      rl_builder.stage(manual, "pendulum", "medium", rows, {"random_return": refs[0], "expert_return": refs[1]})
  assert not os.path.exists(manual)  # nothing staged
  monkeypatch.setattr(rl_builder, "load", lambda task, kind, directory: (rows, {"random_return": 3.0,
                                                                                 "expert_return": 3.0}))
  config = reg_config.get_config("smoke")
  with pytest.raises(d4rl.D4RLFormatError, match=r"dataset pendulum-medium in .*data: 'random_return' and "
                                                  r"'expert_return' are both 3;"):
    reg_data.load(config, "pendulum-medium", str(tmp_path / "data"))


def test_suite_composition():
  valid = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
  e = dict(
      observations=np.arange(8 * S, dtype=np.float32).reshape(2, 4, S), actions=np.zeros((2, 4, 1)),
      rewards=np.ones((2, 4)), next_observations=np.zeros((2, 4, S)),
      terminals=np.array([[0, 0, 1, 0], [0, 0, 0, 0]], bool), timeouts=np.array([[0, 0, 0, 0], [0, 1, 0, 0]], bool),
  )
  rows = suite.episodes_to_rows(*e.values(), valid)
  assert len(rows["rewards"]) == 5
  np.testing.assert_array_equal(rows["terminals"], [0, 0, 1, 0, 0])
  np.testing.assert_array_equal(rows["timeouts"], [0, 0, 0, 0, 1])
  both = suite.concat([rows, rows])
  assert len(both["rewards"]) == 10
  cut = suite.truncate(both, 4)
  assert cut["timeouts"][-1] and len(cut["rewards"]) == 4
