"""The test run's persistent compilation cache (tests/conftest.py): on, written to, and kept to costly programs."""

import os

import jax
import jax.numpy as jnp


def _entries(cache: str) -> set[str]:
  return {f for f in os.listdir(cache) if f.endswith("-cache")}


def test_a_compiled_program_is_written_to_the_run_cache():
  cache = jax.config.jax_compilation_cache_dir
  assert cache and os.path.isdir(cache), cache
  threshold = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # store this small program
  try:
    before = _entries(cache)
    jax.jit(lambda x: jnp.tanh(x) @ x.T + 0.375)(jnp.ones((17, 5))).block_until_ready()
    assert _entries(cache) - before, "no cache entry written: is the filelock package installed?"
  finally:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", threshold)


def test_programs_that_compile_quickly_are_not_stored():
  cache = jax.config.jax_compilation_cache_dir
  assert jax.config.jax_persistent_cache_min_compile_time_secs >= 0.5
  before = _entries(cache)
  jax.jit(lambda x: jnp.sin(x) * 0.625 - x)(jnp.ones((3, 11))).block_until_ready()
  assert not _entries(cache) - before
