"""Where a ``model_smc`` run's time goes, and how long each phase has left.

:class:`Profile` splits the wall time of a run into its phases (tempering,
local search, final sweeps, hill climbing, scoring, ...) and, within each,
into fits (the batched, jitted fits of new structures, after the first call
of each compiled fit), the first call of each compiled fit (tracing and
compiling it), host-device transfers of the fits, checkpoints and the rest
(the sampler's own host work: proposals, acceptance, bookkeeping, the
Rao-Blackwellised averaging). XLA compiles are counted from JAX's own
monitoring events (``/jax/core/compile/backend_compile_duration``), so a
recompile after warm-up shows up in the phase where it happened.
``results.json`` keeps the table (``profile``); ``make bench`` prints it.

:class:`PhaseEta` estimates the time left from each phase's own rate: the
elapsed time of the current phase over its completed fraction, plus, for the
phases and runs still to come, the durations of the runs already done.
"""

from __future__ import annotations

import contextlib
import time
from typing import Optional

import jax

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_COMPILES = {"count": 0, "seconds": 0.0}
_LISTENING = []


def _on_duration(event: str, duration: float, **kwargs) -> None:
  del kwargs
  if event == _BACKEND_COMPILE:
    _COMPILES["count"] += 1
    _COMPILES["seconds"] += float(duration)


def compiles() -> tuple[int, float]:
  """``(XLA compiles, their seconds)`` in this process since the first call (which starts the count)."""
  if not _LISTENING:
    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    _LISTENING.append(True)
  return _COMPILES["count"], _COMPILES["seconds"]


FIELDS = ("seconds", "fit_seconds", "fit_calls", "first_call_seconds", "transfer_seconds", "checkpoint_seconds",
          "compiles", "compile_seconds", "fits")


class Profile:
  """Wall seconds per phase, with the fits, transfers, checkpoints and compiles inside each.

  Args:
    evaluator: the run's :class:`methods.model_smc.evaluator.Evaluator`
      (its ``timing`` counters are read before and after each span).
  """

  def __init__(self, evaluator):
    self.evaluator = evaluator
    self.phases: dict[str, dict] = {}
    compiles()  # start counting

  def _snapshot(self) -> dict:
    t = self.evaluator.timing
    count, seconds = compiles()
    return {"seconds": time.perf_counter(), "fit_seconds": t["fit_seconds"], "fit_calls": t["fit_calls"],
            "first_call_seconds": t["first_call_seconds"], "transfer_seconds": t["transfer_seconds"],
            "compiles": count, "compile_seconds": seconds, "fits": self.evaluator.num_fits}

  def mark(self) -> dict:
    """A snapshot to :meth:`add` a span from."""
    return self._snapshot()

  def add(self, phase: str, since: dict, checkpoint_seconds: float = 0.0) -> dict:
    """Adds the span from ``since`` (a :meth:`mark`) to now to ``phase``; returns a new mark."""
    now = self._snapshot()
    row = self.phases.setdefault(phase, dict.fromkeys(FIELDS, 0))
    for k in now:
      row[k] += now[k] - since[k]
    row["checkpoint_seconds"] += checkpoint_seconds
    return now

  @contextlib.contextmanager
  def phase(self, name: str):
    """Times the ``with`` block as phase ``name``."""
    since = self.mark()
    try:
      yield
    finally:
      self.add(name, since)

  def as_dict(self) -> dict:
    """``{phase: {seconds, fit_seconds, ..., other_seconds}}`` in the order the phases ran, and ``total``."""
    out = {}
    for name, row in self.phases.items():
      r = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}
      r["other_seconds"] = round(row["seconds"] - row["fit_seconds"] - row["first_call_seconds"]
                                 - row["transfer_seconds"] - row["checkpoint_seconds"], 3)
      out[name] = r
    out["total"] = {k: round(sum(r[k] for r in out.values()), 3) for k in FIELDS + ("other_seconds",)}
    return out

  def restore(self, saved: Optional[dict]) -> None:
    """Continues the phases of a resumed run (``saved``: an :meth:`as_dict` from its checkpoint)."""
    for name, row in (saved or {}).items():
      if name != "total":
        self.phases[name] = {k: row.get(k, 0) for k in FIELDS}


def fmt_seconds(seconds: Optional[float]) -> str:
  if seconds is None:
    return "?"
  seconds = int(round(max(seconds, 0.0)))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f"{h:d}:{m:02d}:{s:02d}"


class PhaseEta:
  """Time left in the current phase (from its own rate) and in the whole sampler.

  Each run goes through ``phases`` in order; :meth:`update` is called after
  every step with the run, its phase and the phase's completed fraction.
  A phase's time left is its elapsed time times ``(1 - f) / f``; the
  phases and runs still to come are estimated from the finished runs'
  durations (unknown, ``?``, until the first run is done).
  """

  def __init__(self, num_runs: int, phases: tuple[str, ...]):
    self.num_runs, self.phases = num_runs, phases
    self.current: Optional[tuple[int, str]] = None
    self.start = self.last = time.perf_counter()
    self.phase_start = self.start
    self.run_phases: dict[int, dict[str, float]] = {}  # run -> phase -> seconds

  def update(self, run: int, phase: str, fraction: float) -> tuple[Optional[float], Optional[float]]:
    """``(phase ETA, total ETA)`` in seconds (``None``: not known yet)."""
    now = time.perf_counter()
    if self.current != (run, phase):
      self.current, self.phase_start = (run, phase), self.last
    self.last = now
    spent = now - self.phase_start
    self.run_phases.setdefault(run, {})[phase] = spent
    phase_eta = spent * (1 - fraction) / fraction if 0 < fraction < 1 else (0.0 if fraction >= 1 else None)
    done = [r for r in self.run_phases if r < run and len(self.run_phases[r]) == len(self.phases)]
    if phase_eta is None or not done:
      return phase_eta, None
    later = self.phases[self.phases.index(phase) + 1:] if phase in self.phases else ()
    mean = {p: sum(self.run_phases[r].get(p, 0.0) for r in done) / len(done) for p in self.phases}
    total = phase_eta + sum(mean[p] for p in later) + (self.num_runs - 1 - run) * sum(mean.values())
    return phase_eta, total

  @staticmethod
  def text(phase_eta: Optional[float], total_eta: Optional[float]) -> str:
    return f"phase ETA {fmt_seconds(phase_eta)}, total ETA {fmt_seconds(total_eta)}"
