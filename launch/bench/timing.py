"""Timing of jitted calls: the first (compiling) call, then the best of several warm calls."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax


class Timed(NamedTuple):
  """One call's timing.

  Attributes:
    output: the output of its last call.
    cold: seconds of the first call (compilation included), made with the
      warm-up arguments where :func:`timed_together` was given them.
    warm: seconds of its best warm call.
    cpu: CPU seconds of this process during that best call (all its threads:
      above ``warm`` when the call ran on several cores).
    calls: number of warm calls.
    warmed_up: whether the first call took warm-up arguments (a cheaper call of the same program).
  """

  output: Any
  cold: float
  warm: float
  cpu: float
  calls: int
  warmed_up: bool = False

  @property
  def compile_seconds(self) -> float:
    """The compilation's share of the first call.

    The first call less the best warm call; after a warm-up call, the whole of
    that call (compilation plus a run that its arguments keep short).
    """
    return self.cold if self.warmed_up else self.cold - self.warm


def timed_together(calls: Sequence[tuple[Callable, tuple]], repeats: int = 3, min_seconds: float = 1.0,
                   max_repeats: int = 50, warmup: Sequence[tuple] | None = None) -> list[Timed]:
  """The :class:`Timed` of each ``fn(*args)`` in ``calls``, each call blocked until ready.

  After one cold call each, the warm calls go in rounds (every ``fn`` once per
  round, in turn), so a spell in which another process slows the machine falls
  on every side of a comparison. At least ``repeats`` rounds, and more (up to
  ``max_repeats``) until each ``fn``'s warm calls have taken ``min_seconds``
  on average: a call of a tenth of a second gets about ten tries.

  ``warmup``: arguments of each ``fn``'s cold call, in place of its own: a
  cheaper call of the same compiled program (a traced bound set low, say), so
  that a long call is not run once more only to compile it.
  """
  if warmup is not None and len(warmup) != len(calls):
    raise ValueError(f"warmup has {len(warmup)} argument tuples for {len(calls)} calls")
  cold_args = [args for _, args in calls] if warmup is None else list(warmup)

  def call(fn, args):
    t0, c0 = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0, time.process_time() - c0

  first = [call(fn, args) for (fn, _), args in zip(calls, cold_args)]
  outs, colds = [o for o, _, _ in first], [t for _, t, _ in first]
  best, spent, rounds = [(math.inf, math.inf)] * len(calls), 0.0, 0
  while rounds < max(repeats, 1) or (spent < min_seconds * len(calls) and rounds < max_repeats):
    for i, (fn, args) in enumerate(calls):
      outs[i], took, cpu = call(fn, args)
      best[i], spent = min(best[i], (took, cpu)), spent + took
    rounds += 1
  return [Timed(o, c, w, cpu, rounds, warmup is not None) for o, c, (w, cpu) in zip(outs, colds, best)]


def timed(fn: Callable, *args: Any, repeats: int = 3, min_seconds: float = 1.0, max_repeats: int = 50) -> Timed:
  """:func:`timed_together` of the one call ``fn(*args)``."""
  return timed_together([(fn, args)], repeats=repeats, min_seconds=min_seconds, max_repeats=max_repeats)[0]
