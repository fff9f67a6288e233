"""Test set-up: 8 simulated CPU devices and strict rank promotion.

Both must be set before any JAX computation, hence at import time here.
"""

import gc
import os
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_rank_promotion", "raise")

import pytest  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)


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
