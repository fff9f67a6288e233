"""Test set-up: 8 simulated CPU devices, strict rank promotion, and per test run one compilation cache
and one temporary directory.

All must be set before any JAX computation, hence at import time here.
"""

import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import NamedTuple

import jax

# One persistent compilation cache per test run, shared by the worker processes and every
# ``python -m launch.main`` they start (the variables below are inherited): a program that one
# test, subprocess or resumed run has compiled is read back, not compiled again. The first
# process of the run (pytest itself, which starts the workers) makes the directory and removes
# it at the end, so nothing carries over from one run to the next. A size limit turns on JAX's
# file locks (the ``filelock`` package) around every read and write of an entry, which two
# processes share safely. Only programs that took at least a second to compile are stored: each
# write also reads every entry's access time under that lock (JAX's LRU eviction), so storing the
# suite's tens of thousands of small programs (eager operations, tiny jits) made the whole run
# slower, not faster. A cache the user set up (``JAX_COMPILATION_CACHE_DIR`` already in the
# environment) is used as it is.
_RUN_CACHE = "ICML26_TEST_COMPILATION_CACHE"
_CACHE_SETTINGS = {  # JAX option -> value; its environment variable is the upper-case name
    "jax_persistent_cache_min_compile_time_secs": 1.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
    "jax_compilation_cache_max_size": 8 << 30,
}
_OWN_CACHE = not os.environ.get(_RUN_CACHE) and not os.environ.get("JAX_COMPILATION_CACHE_DIR")
if _OWN_CACHE:
  os.environ[_RUN_CACHE] = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jax-compilation-")
  os.environ.update({name.upper(): str(value) for name, value in _CACHE_SETTINGS.items()})
if os.environ.get(_RUN_CACHE):  # this process imported jax before reading the variables
  jax.config.update("jax_compilation_cache_dir", os.environ[_RUN_CACHE])
  for _name, _value in _CACHE_SETTINGS.items():
    jax.config.update(_name, _value)
# One temporary directory per test run, removed at its end, for whatever the code under test (or a
# library: TensorFlow Datasets makes an empty ``tmp*tfds`` directory each time it constructs a builder
# over an unprepared data_dir, and never removes it) leaves in the system's temporary directory. Workers
# and subprocesses inherit it through ``TMPDIR``; pytest's own ``tmp_path`` folders stay where they were
# (``PYTEST_DEBUG_TEMPROOT``), so a failed test's files outlive the run as usual.
_RUN_TMP = "ICML26_TEST_TMPDIR"
_OWN_TMP = not os.environ.get(_RUN_TMP)
if _OWN_TMP:
  os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
  os.environ[_RUN_TMP] = os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="icml26-tests-")
  tempfile.tempdir = None  # gettempdir() reads TMPDIR again
jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_rank_promotion", "raise")

import pytest  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

from launch import checkpoint  # noqa: E402  (after the path and device set-up above)


def pytest_unconfigure(config):
  del config
  if _OWN_CACHE:
    shutil.rmtree(os.environ[_RUN_CACHE], ignore_errors=True)
  if _OWN_TMP:
    shutil.rmtree(os.environ[_RUN_TMP], ignore_errors=True)


# The test files that take minutes on 2 cores (the "seconds per test file" summary that ends
# ``make test``), heaviest first. ``make test`` hands whole files to its workers in collection order
# (``--dist loadfile --no-loadscope-reorder``), so these start first and the short files fill in
# behind them: the workers finish together, where one long file started last would run alone.
# Files not named here follow in pytest's own order.
HEAVY_FIRST = (
    "test_notebooks.py",
    "test_model_smc_end_of_run.py",
    "test_graphpfn_pretrain.py",
    "test_faults_llm.py",
    "test_graphpfn_experiment.py",
    "test_varde_experiments.py",
    "test_reg_experiment.py",
    "test_flow_matching_experiment.py",
    "test_model_smc_fit.py",
    "test_flow_matching_npz.py",
    "test_graphpfn_bench.py",
    "test_model_smc_lv.py",
)
_FILE_SECONDS: dict[str, float] = {}


def pytest_collection_modifyitems(config, items):
  """The files of :data:`HEAVY_FIRST` first, in its order; each file's tests keep their order."""
  del config
  rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort: files stay whole


def pytest_runtest_logreport(report):
  """Adds each phase's seconds (setup, call, teardown) to its file's total."""
  path = report.nodeid.split("::", 1)[0]
  _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
  """The slowest test files, to keep :data:`HEAVY_FIRST` in step with the suite."""
  if not _FILE_SECONDS:
    return
  slowest = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:15]
  terminalreporter.section(f"seconds per test file (slowest {len(slowest)} of {len(_FILE_SECONDS)}, "
                           f"{sum(_FILE_SECONDS.values()):.0f} s in all)")
  for path, seconds in slowest:
    terminalreporter.write_line(f"{seconds:8.1f}s {path}")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """Drops every compiled program after each test module.

  XLA maps a few memory regions per compiled CPU executable and JAX keeps
  every executable alive in its caches. One process running the whole suite
  compiles tens of thousands of programs, and past the kernel's per-process
  limit on memory maps (``vm.max_map_count``, 65530 by default) the next
  compilation crashes the interpreter.
  """
  yield
  jax.clear_caches()
  gc.collect()


@pytest.fixture(scope="session")
def repo_root() -> str:
  return REPO_ROOT


@pytest.fixture
def python_env() -> dict:
  """Environment for launching ``python -m launch.main`` subprocesses."""
  env = dict(os.environ)
  env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("XLA_FLAGS", None)
  env["PYTHONUNBUFFERED"] = "1"
  return env


def _sealed_steps(ckdir: str) -> list[int]:
  """Steps under ``ckdir`` whose checksum is written: those a resume restores."""
  if not os.path.isdir(ckdir):
    return []
  return [int(d) for d in os.listdir(ckdir)
          if d.isdigit() and os.path.isfile(os.path.join(ckdir, d, checkpoint.CHECKSUM_FILE))]


@pytest.fixture
def kill_after_checkpoint():
  """``kill(proc, ckdir, step, timeout)``: SIGKILLs ``proc`` once a checkpoint at ``>= step`` is sealed.

  A step's directory appears before its checksum; a kill between the two
  leaves a step that never verifies, so the wait is for the checksum file.
  """
  def kill(proc, ckdir: str, step: int, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
      steps = _sealed_steps(ckdir)
      if steps and max(steps) >= step:
        break
      assert proc.poll() is None, proc.stdout.read()
      time.sleep(0.02)
    else:
      raise AssertionError(f"no checkpoint at step >= {step} in {ckdir} within {timeout} s")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
  return kill


class Resumed(NamedTuple):
  """What :func:`kill_and_resume` returns."""

  full: dict  # the uninterrupted run's results.json
  resumed: dict  # the killed-then-resumed run's results.json
  output: str  # the resuming launch's stdout
  steps: list  # the steps of the resumed workdir's metrics.jsonl, in file order
  workdir: str  # the killed-then-resumed run's workdir


@pytest.fixture
def kill_and_resume(kill_after_checkpoint):
  """``run(launch, tmp_path, step, timeout) -> Resumed``: a run killed mid-way, then resumed.

  ``launch(workdir)`` starts the run as a subprocess (stdout piped). One copy
  runs to its end in ``tmp_path/full``; another, in ``tmp_path/killed``, is
  SIGKILLed once a checkpoint at ``>= step`` is sealed (before it writes
  ``results.json``) and then launched again there to its end.
  """
  def finish(proc, timeout):
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out

  def run(launch, tmp_path, step: int, timeout: float):
    full, work = str(tmp_path / "full"), str(tmp_path / "killed")
    finish(launch(full), timeout)
    kill_after_checkpoint(launch(work), os.path.join(work, "checkpoints"), step, timeout=timeout)
    assert not os.path.exists(os.path.join(work, "results.json"))
    out = finish(launch(work), timeout)
    results = [json.load(open(os.path.join(d, "results.json"))) for d in (full, work)]
    steps = [json.loads(line)["step"] for line in open(os.path.join(work, "metrics.jsonl"))]
    return Resumed(results[0], results[1], out, steps, work)
  return run
