"""The test run's persistent compilation cache (tests/conftest.py) is on and written to."""

import os

import jax
import jax.numpy as jnp


def test_a_compiled_program_is_written_to_the_run_cache():
  cache = jax.config.jax_compilation_cache_dir
  assert cache and os.path.isdir(cache), cache

  def entries() -> set[str]:
    return {f for f in os.listdir(cache) if f.endswith("-cache")}

  before = entries()
  jax.jit(lambda x: jnp.tanh(x) @ x.T + 0.375)(jnp.ones((17, 5))).block_until_ready()
  assert entries() - before, "no cache entry written: is the filelock package installed?"
