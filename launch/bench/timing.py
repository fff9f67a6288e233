"""Timing of a jitted call: the first (compiling) call, then the best of several warm calls."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import jax


def timed(fn: Callable, *args: Any, repeats: int = 3, min_seconds: float = 1.0,
          max_repeats: int = 50) -> tuple[Any, float, float]:
  """``(output, cold seconds, best warm seconds)`` of ``fn(*args)``, each call blocked until ready.

  The warm calls number at least ``repeats`` and go on (up to ``max_repeats``)
  until they have taken ``min_seconds`` together, so a call of a tenth of a
  second gets about ten tries and one that another process slowed is not the
  best of too few.
  """
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  cold = time.perf_counter() - t0
  warm, spent, calls = math.inf, 0.0, 0
  while calls < repeats or (spent < min_seconds and calls < max_repeats):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    took = time.perf_counter() - t0
    warm, spent, calls = min(warm, took), spent + took, calls + 1
  return out, cold, warm
