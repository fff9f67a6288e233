"""Faults a hostile but fair user can cause: corrupt checkpoints, changed configs, bad workdirs.

Each test reproduces one hole that existed before the hardening (see README,
"Running experiments", guarantees under faults). LLM replies and data files
have their own fault tests (``test_faults_llm.py``, ``test_faults_data.py``).
"""

import json
import logging
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from launch import checkpoint as ckpt_lib
from launch import errors
from launch import metrics
from launch import runner
from launch.configs import reg as reg_config
from launch.configs import varde_bai as varde_config


def _state(value: float) -> dict:
  return {"params": {"w": jnp.full((64, 16), value), "b": jnp.full((16,), value)}, "count": jnp.asarray(7)}


def _two_steps(directory: str) -> None:
  ck = ckpt_lib.Checkpointer(directory, max_to_keep=3)
  for s in (1, 2):
    assert ck.save(s, _state(float(s)))
  ck.close()


def _largest_file(path: str) -> str:
  files = [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs if f != "checksum.json"]
  return max(files, key=os.path.getsize)


def _overwrite(path: str, offset: int, data: bytes) -> None:
  with open(path, "r+b") as f:
    f.seek(offset)
    old = f.read(len(data))
    f.seek(offset)
    f.write(bytes((a ^ 0xFF) if a == b else b for a, b in zip(old, data)))  # every byte changes


@pytest.mark.parametrize("nbytes", [1, 64])
def test_corrupt_newest_step_is_reported_moved_aside_and_an_older_one_used(tmp_path, caplog, nbytes):
  """One byte (or 64 random bytes) overwritten inside the newest step's data file."""
  directory = str(tmp_path / "checkpoints")
  _two_steps(directory)
  data = _largest_file(os.path.join(directory, "2"))
  rng = np.random.default_rng(nbytes)
  _overwrite(data, os.path.getsize(data) // 3, rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes())
  ck = ckpt_lib.Checkpointer(directory, max_to_keep=3)
  with caplog.at_level(logging.WARNING):
    step, state, _ = ck.restore(ckpt_lib.abstract_like(_state(0.0)))
  assert step == 1 and float(state["params"]["w"][0, 0]) == 1.0
  lines = [r.getMessage() for r in caplog.records if "fails verification" in r.getMessage()]
  assert len(lines) == 1 and "checkpoint step 2 " in lines[0] and "\n" not in lines[0], lines
  assert os.path.isdir(str(tmp_path / "checkpoints.corrupt" / "2"))  # moved aside, not deleted
  assert ck.all_steps() == [1]
  # The next NaN names the step that verifies as the last good one, and the run can go on from it.
  with pytest.raises(ckpt_lib.NonFiniteError, match=r"last good checkpoint \(step 1\)"):
    ck.save(2, _state(float("nan")))
  assert ck.save(2, _state(2.0)) and ck.latest_step() == 2
  ck.close()


@pytest.mark.parametrize("damage", ["removed", "hash byte flipped"])
def test_a_step_without_its_checksum_is_not_used(tmp_path, damage):
  """A kill between the data and the checksum leaves a step that never verifies; a flipped byte in
  the recorded config hash is corruption too, not a "different config"."""
  directory = str(tmp_path / "checkpoints")
  ck = ckpt_lib.Checkpointer(directory, config_hash="ab" * 32)
  for s in (1, 2):
    ck.save(s, _state(float(s)))
  ck.close()
  path = os.path.join(directory, "2", ckpt_lib.CHECKSUM_FILE)
  if damage == "removed":
    os.remove(path)
  else:
    with open(path) as f:
      record = json.load(f)
    record["config_hash"] = "ac" + record["config_hash"][2:]
    with open(path, "w") as f:
      json.dump(record, f)
  ck = ckpt_lib.Checkpointer(directory, config_hash="ab" * 32)
  assert ck.latest_step() == 1
  assert os.path.isdir(str(tmp_path / "checkpoints.corrupt" / "2"))
  ck.close()


def test_a_verified_step_holding_nan_is_never_resumed_from(tmp_path):
  """A step whose files verify but hold NaN (written by an older version) is moved aside too."""
  directory = str(tmp_path / "checkpoints")
  _two_steps(directory)
  ck = ckpt_lib.Checkpointer(directory, max_to_keep=3)
  ck._manager.save(3, args=ckpt_lib.ocp.args.Composite(state=ckpt_lib.ocp.args.StandardSave(_state(float("nan")))))  # pylint: disable=protected-access
  ck._manager.wait_until_finished()  # pylint: disable=protected-access
  record = {"sha256": ckpt_lib._seal(ckpt_lib.step_digest(os.path.join(directory, "3")), None),  # pylint: disable=protected-access
            "config_hash": None}
  with open(os.path.join(directory, "3", ckpt_lib.CHECKSUM_FILE), "w") as f:
    json.dump(record, f)
  ck.close()
  ck = ckpt_lib.Checkpointer(directory, max_to_keep=3)
  step, _, _ = ck.restore(ckpt_lib.abstract_like(_state(0.0)))
  assert step == 2 and ck.latest_step() == 2
  ck.close()


# ---------------------------------------------------------------- runs


def _varde(**overrides):
  config = varde_config.get_config("smoke")
  config.algorithms = ("varde", "uniform")
  config.varde.taus = (0.1,)
  config.num_seeds, config.chunk_size = 32, 32
  config.budgets = (60,)
  config.update_from_flattened_dict(overrides)
  return config


def test_resuming_under_another_config_is_refused_even_without_config_json(tmp_path, caplog):
  workdir = str(tmp_path / "run")
  first = runner.run(_varde(), workdir)
  os.remove(os.path.join(workdir, "config.json"))
  with pytest.raises(ckpt_lib.CheckpointError, match="different config") as e:
    runner.run(_varde(seed=7), workdir)
  assert isinstance(e.value, errors.UserError) and "--workdir" in str(e.value)
  with open(os.path.join(workdir, "results.json")) as f:
    assert json.load(f)["error"] == json.loads(json.dumps(first["error"]))  # untouched
  # The same config resumes (config.json is rewritten) and says from which step.
  with caplog.at_level(logging.INFO):
    again = runner.run(_varde(), workdir)
  assert again["error"] == first["error"]
  assert any("resumed from checkpoint step" in r.getMessage() for r in caplog.records)


def test_rerun_without_checkpoints_does_not_duplicate_metrics(tmp_path):
  workdir = str(tmp_path / "run")
  config = _varde(**{"checkpoint.enabled": False})
  runner.run(config, workdir)
  once = [r["step"] for r in metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))]
  runner.run(config, workdir)
  twice = [r["step"] for r in metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))]
  assert once and twice == once


def test_reg_resumes_past_a_corrupt_final_step_to_the_same_parameters(tmp_path, caplog):
  """REG smoke (one algorithm, two chunks): flip one byte of the final step; the rerun retrains
  the last chunk from step 1 and ends with the same SHA-256 of its parameters."""
  config = reg_config.get_config("smoke")
  config.algorithms = ("iql",)
  config.num_updates, config.updates_per_chunk, config.eval_every = 200, 100, 2
  config.data.classic_transitions = 2_000
  config.data.reference_episodes = 4
  config.data.data_dir = str(tmp_path / "data")
  config.mesh.data = 2
  workdir = str(tmp_path / "run")
  first = runner.run(config, workdir)
  data = _largest_file(os.path.join(workdir, "checkpoints", "2"))
  _overwrite(data, os.path.getsize(data) // 2, b"\x01")
  with caplog.at_level(logging.INFO):
    again = runner.run(config, workdir)
  messages = [r.getMessage() for r in caplog.records]
  assert any("checkpoint step 2 fails verification" in m for m in messages), messages
  assert any("resumed from checkpoint step 1" in m for m in messages), messages
  assert again["param_digest"] == first["param_digest"]
  steps = [r["step"] for r in metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))]
  assert steps == [1, 2]


# ---------------------------------------------------------------- the launcher


def _main(args, env, cwd):
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/varde_bai.py:smoke", *args]
  return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_user_errors_print_one_line_and_verbose_shows_the_traceback(tmp_path, repo_root, python_env):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a directory")
  out = _main([f"--workdir={blocker}/run"], python_env, repo_root)
  errs = [line for line in out.stderr.splitlines() if line.startswith("error:")]
  assert out.returncode == 1 and len(errs) == 1, out.stderr[-3000:]
  assert "--workdir" in errs[0] and "Traceback" not in out.stderr
  out = _main([f"--workdir={blocker}/run"], dict(python_env, **{errors.VERBOSE_ENV: "1"}), repo_root)
  assert out.returncode == 1 and "Traceback" in out.stderr and "WorkdirError" in out.stderr
