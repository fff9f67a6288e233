"""The test run's persistent compilation cache (tests/conftest.py): on, written to, and kept to costly programs.

Other processes of the run write to the same directory meanwhile, so each test
looks only for the entries of its own program, named after its function.
"""

import os

import jax
import jax.numpy as jnp


def _entries(cache: str, fn) -> list[str]:
  return [f for f in os.listdir(cache) if f.startswith(f"jit_{fn.__name__}-") and f.endswith("-cache")]


def test_a_compiled_program_is_written_to_the_run_cache():
  cache = jax.config.jax_compilation_cache_dir
  assert cache and os.path.isdir(cache), cache

  def cache_probe_stored(x):
    return jnp.tanh(x) @ x.T + 0.375

  threshold = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # store this small program
  try:
    jax.jit(cache_probe_stored)(jnp.ones((17, 5))).block_until_ready()
    assert _entries(cache, cache_probe_stored), "no cache entry written: is the filelock package installed?"
  finally:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", threshold)


def test_programs_that_compile_quickly_are_not_stored():
  cache = jax.config.jax_compilation_cache_dir
  assert jax.config.jax_persistent_cache_min_compile_time_secs >= 0.5

  def cache_probe_quick(x):
    return jnp.sin(x) * 0.625 - x

  jax.jit(cache_probe_quick)(jnp.ones((3, 11))).block_until_ready()
  assert not _entries(cache, cache_probe_quick)
