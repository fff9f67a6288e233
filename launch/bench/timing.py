"""Timing of a jitted call: the first (compiling) call, then the best of ``repeats`` warm calls."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import jax


def timed(fn: Callable, *args: Any, repeats: int = 3) -> tuple[Any, float, float]:
  """``(output, cold seconds, best warm seconds)`` of ``fn(*args)``, each call blocked until ready."""
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  cold = time.perf_counter() - t0
  warm = math.inf
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    warm = min(warm, time.perf_counter() - t0)
  return out, cold, warm
