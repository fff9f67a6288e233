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
phases still to come, their durations on the runs that finished them.
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

  Each run goes through ``phases`` in order; the runs advance in lockstep
  (:func:`methods.model_smc.pooled.run_pooled`), so their wall times
  overlap. :meth:`update` is called after every step with the run, its
  phase and the phase's completed fraction. A phase's time left is its
  elapsed time (since the run's last step of its previous phase) times
  ``(1 - f) / f``; the sampler's time left is the largest over the runs of
  the current phase's time left plus the mean duration of each phase still
  to come, measured on the runs that finished it (unknown, ``?``, until
  some run has finished every phase still to come).
  """

  def __init__(self, num_runs: int, phases: tuple[str, ...]):
    self.num_runs, self.phases = num_runs, phases
    self.start = time.perf_counter()
    # run -> [phase, its start, the run's last update, the phase's ETA, whether its duration is recorded]
    self.current: dict[int, list] = {}
    self.durations: dict[str, list[float]] = {}  # phase -> durations on the runs that finished it

  def update(self, run: int, phase: str, fraction: float) -> tuple[Optional[float], Optional[float]]:
    """``(phase ETA, total ETA)`` in seconds (``None``: not known yet)."""
    now = time.perf_counter()
    cur = self.current.get(run)
    if cur is None or cur[0] != phase:
      start = self.start if cur is None else cur[2]
      if cur is not None and not cur[4]:  # the run's previous phase ended at its last update
        self.durations.setdefault(cur[0], []).append(cur[2] - cur[1])
      cur = self.current[run] = [phase, start, now, None, False]
    cur[2] = now
    spent = now - cur[1]
    phase_eta = spent * (1 - fraction) / fraction if 0 < fraction < 1 else (0.0 if fraction >= 1 else None)
    cur[3] = phase_eta
    if fraction >= 1 and not cur[4]:  # the phase is complete: its duration counts once
      self.durations.setdefault(phase, []).append(spent)
      cur[4] = True
    return phase_eta, self._total()

  def _left(self, phases) -> Optional[float]:
    if any(p not in self.durations for p in phases):
      return None
    return sum(sum(self.durations[p]) / len(self.durations[p]) for p in phases)

  def _total(self) -> Optional[float]:
    worst = 0.0
    for r in range(self.num_runs):
      cur = self.current.get(r)
      if cur is None:
        later = self._left(self.phases)
      else:
        i = self.phases.index(cur[0]) if cur[0] in self.phases else len(self.phases)
        rest = self._left(self.phases[i + 1:])
        later = None if cur[3] is None or rest is None else cur[3] + rest
      if later is None:
        return None
      worst = max(worst, later)
    return worst

  @staticmethod
  def text(phase_eta: Optional[float], total_eta: Optional[float]) -> str:
    return f"phase ETA {fmt_seconds(phase_eta)}, total ETA {fmt_seconds(total_eta)}"
