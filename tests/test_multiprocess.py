"""Two processes on 127.0.0.1 (4 CPU devices each) run one sharded experiment.

The global mesh spans 8 devices in two processes (gloo collectives); the
results must equal a single-process run on 8 devices with the same seeds.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

from launch import runner

from test_launch import _small_config  # pylint: disable=g-bad-import-order

OVERRIDES = [
    "--config.algorithms=('varde','uniform','successive_rejects')",
    "--config.varde.taus=(0.1,)",
    "--config.num_seeds=96",
    "--config.chunk_size=32",
    "--config.budgets=(60,90)",
]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.multiprocess
def test_two_processes_match_one_process(tmp_path, python_env, repo_root):
  single = runner.run(_small_config(), str(tmp_path / "single"))

  workdir = tmp_path / "multi"
  port = _free_port()
  procs = []
  for pid in range(2):
    cmd = [
        sys.executable, "-m", "launch.main",
        "--config=launch/configs/varde_bai.py:smoke", *OVERRIDES,
        f"--workdir={workdir}", "--cpu_devices=4",
        f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={pid}",
    ]
    log = open(tmp_path / f"proc{pid}.log", "w")
    procs.append((subprocess.Popen(cmd, cwd=repo_root, env=python_env, stdout=log, stderr=subprocess.STDOUT), log))
  try:
    codes = [p.wait(timeout=600) for p, _ in procs]
  finally:
    for p, log in procs:
      if p.poll() is None:
        p.kill()
      log.close()
  logs = [(tmp_path / f"proc{i}.log").read_text() for i in range(2)]
  assert codes == [0, 0], "\n\n".join(l[-3000:] for l in logs)
  assert "8 global devices" in logs[0] or "8 devices (2 processes)" in logs[0], logs[0][-2000:]
  with open(workdir / "results.json") as f:
    multi = json.load(f)
  assert multi["error"] == json.loads(json.dumps(single["error"]))
  assert multi["vs_reference"] == json.loads(json.dumps(single["vs_reference"]))
  assert os.path.isdir(workdir / "checkpoints")
