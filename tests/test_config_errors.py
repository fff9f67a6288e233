"""Bad configs on the command line: one line naming the problem, exit 2, nothing run."""

import subprocess
import sys

import pytest


def _main(config, *args, env, cwd, workdir):
  cmd = [sys.executable, "-m", "launch.main", f"--config={config}", f"--workdir={workdir}", *args]
  return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("config, args, expected", [
    ("launch/configs/varde_bai.py:smok", (), "unknown preset 'smok'"),
    ("launch/configs/nothere.py:smoke", (), "no config file 'launch/configs/nothere.py'"),
    ("launch/configs/varde_bai.py:smoke", ('--config.budgets=("a",)',), "'budgets': element 0: 'a' is not a number"),
    ("launch/configs/varde_bai.py:smoke", ("--config.varde.var_floor=nan",), "'varde.var_floor': nan is not a finite"),
    ("launch/configs/model_smc.py:smoke", ("--config.smc.target_ess=nan",), "'smc.target_ess': nan is not a finite"),
    ("launch/configs/reg.py:smoke", ("--config.agent.discount=1.5",), "'agent.discount': 1.5 is out of range"),
    ("launch/configs/reg.py:smoke", ("--config.reg.regularizer=kl",), "'reg.regularizer': 'kl': ambiguity 'kappa'"),
])
def test_bad_configs_print_one_line_and_run_nothing(config, args, expected, tmp_path, repo_root, python_env):
  workdir = tmp_path / "run"
  out = _main(config, *args, env=python_env, cwd=repo_root, workdir=workdir)
  errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
  assert out.returncode == 2, out.stderr[-2000:]
  assert len(errors) == 1 and expected in errors[0], out.stderr[-2000:]
  assert "Traceback" not in out.stderr
  assert not (workdir / "results.json").exists()
