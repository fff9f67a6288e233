"""Timing of jitted calls: the first (compiling) call, then the best of several warm calls."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Sequence

import jax


def timed_together(calls: Sequence[tuple[Callable, tuple]], repeats: int = 3, min_seconds: float = 1.0,
                   max_repeats: int = 50) -> list[tuple[Any, float, float]]:
  """``(output, cold seconds, best warm seconds)`` of each ``fn(*args)`` in ``calls``, each call blocked until ready.

  After one cold call each, the warm calls go in rounds (every ``fn`` once per
  round, in turn), so a spell in which another process slows the machine falls
  on every side of a comparison. At least ``repeats`` rounds, and more (up to
  ``max_repeats``) until each ``fn``'s warm calls have taken ``min_seconds``
  on average: a call of a tenth of a second gets about ten tries.
  """
  def call(fn, args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0

  first = [call(fn, args) for fn, args in calls]
  outs, colds = [o for o, _ in first], [t for _, t in first]
  warm, spent, rounds = [math.inf] * len(calls), 0.0, 0
  while rounds < repeats or (spent < min_seconds * len(calls) and rounds < max_repeats):
    for i, (fn, args) in enumerate(calls):
      outs[i], took = call(fn, args)
      warm[i], spent = min(warm[i], took), spent + took
    rounds += 1
  return list(zip(outs, colds, warm))


def timed(fn: Callable, *args: Any, repeats: int = 3, min_seconds: float = 1.0,
          max_repeats: int = 50) -> tuple[Any, float, float]:
  """:func:`timed_together` of the one call ``fn(*args)``."""
  return timed_together([(fn, args)], repeats=repeats, min_seconds=min_seconds, max_repeats=max_repeats)[0]
