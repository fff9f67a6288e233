"""Run outputs: ``config.json``, ``metrics.jsonl``, ``results.json``, figures, progress.

Only the primary process (``jax.process_index() == 0``) writes; the others
get a writer whose methods do nothing, so experiments call it unconditionally.
Files that a reader may open mid-run (``results.json``, ``config.json``) are
written atomically (temporary file + rename); ``metrics.jsonl`` is appended
one flushed line at a time, so a killed run leaves only whole lines.
"""

from __future__ import annotations

import json
import logging as logging_std
import math
import os
import time
from typing import Any, Optional

from absl import logging
import numpy as np


def _jsonable(x: Any) -> Any:
  if isinstance(x, dict):
    return {str(k): _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if isinstance(x, np.ndarray) or hasattr(x, "__array__") and not isinstance(x, (str, bytes)):
    arr = np.asarray(x)
    return _jsonable(arr.tolist()) if arr.ndim else _jsonable(arr.item())
  if isinstance(x, float) and not math.isfinite(x):
    return str(x)  # JSON has no NaN/Inf
  if isinstance(x, (np.integer, np.floating, np.bool_)):
    return _jsonable(x.item())
  return x


def write_json_atomic(path: str, obj: Any) -> None:
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "w") as f:
    json.dump(_jsonable(obj), f, indent=2, sort_keys=False)
    f.write("\n")
  os.replace(tmp, path)


class Writer:
  """Writes a run's files into ``workdir`` (primary process only)."""

  def __init__(self, workdir: str, *, primary: bool = True):
    self.workdir = workdir
    self.primary = primary
    if primary:
      os.makedirs(workdir, exist_ok=True)

  def path(self, name: str) -> str:
    return os.path.join(self.workdir, name)

  def write_config(self, config: Any) -> None:
    if self.primary:
      write_json_atomic(self.path("config.json"), config.to_dict() if hasattr(config, "to_dict") else config)

  def log(self, step: int, **scalars: Any) -> None:
    """Appends ``{"step": step, **scalars}`` to ``metrics.jsonl``."""
    if not self.primary:
      return
    with open(self.path("metrics.jsonl"), "a") as f:
      f.write(json.dumps(_jsonable({"step": step, **scalars})) + "\n")
      f.flush()

  def reset_metrics(self) -> None:
    """Removes ``metrics.jsonl`` (a run that starts from step 0 writes it anew)."""
    if self.primary and os.path.exists(self.path("metrics.jsonl")):
      os.remove(self.path("metrics.jsonl"))

  def truncate_after(self, step: int) -> None:
    """Drops ``metrics.jsonl`` lines past ``step`` (a resumed run rewrites them)."""
    path = self.path("metrics.jsonl")
    if not self.primary or not os.path.exists(path):
      return
    keep = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in keep)
    os.replace(tmp, path)

  def write_results(self, results: dict) -> None:
    if self.primary:
      write_json_atomic(self.path("results.json"), results)

  def save_figure(self, fig: Any, name: str) -> Optional[str]:
    """Saves a matplotlib figure as ``<name>.png`` and closes it."""
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    path = None
    if self.primary:
      path = self.path(f"{name}.png")
      fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def read_jsonl(path: str) -> list[dict]:
  """Records of a JSON-lines file; a torn last line (killed writer) is skipped."""
  out = []
  with open(path) as f:
    for line in f:
      try:
        out.append(json.loads(line))
      except json.JSONDecodeError:
        continue
  return out


class _DropLibraryInfo(logging_std.Filter):
  """Hides INFO/DEBUG records from checkpointing libraries (kept: warnings)."""

  def filter(self, record):
    noisy = any(m in record.pathname for m in ("/orbax/", "/tensorstore/", "/etils/"))
    return not (noisy and record.levelno < logging_std.WARNING)


def quiet_library_logs() -> None:
  """Keeps the run log readable: library INFO chatter is dropped."""
  for handler in logging_std.getLogger().handlers + [logging.get_absl_handler()]:
    if not any(isinstance(f, _DropLibraryInfo) for f in handler.filters):
      handler.addFilter(_DropLibraryInfo())


def _fmt_duration(seconds: float) -> str:
  if not math.isfinite(seconds):
    return "?"
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f"{h:d}:{m:02d}:{s:02d}"


class Progress:
  """Logs ``label done/total (pct) rate unit/s ETA h:mm:ss`` lines."""

  def __init__(self, total: int, *, unit: str = "steps", label: str = "", start: int = 0):
    self.total, self.unit, self.label = total, unit, label
    self.start_count, self.start_time = start, time.perf_counter()

  def rate(self, done: int) -> float:
    elapsed = time.perf_counter() - self.start_time
    return (done - self.start_count) / elapsed if elapsed > 0 else float("nan")

  def line(self, done: int) -> str:
    rate = self.rate(done)
    eta = (self.total - done) / rate if rate and rate > 0 else float("inf")
    pct = 100.0 * done / max(self.total, 1)
    return (
        f"{self.label}{done:,}/{self.total:,} {self.unit} ({pct:.1f}%) "
        f"{rate:,.1f} {self.unit}/s ETA {_fmt_duration(eta)}"
    )

  def update(self, done: int) -> str:
    msg = self.line(done)
    logging.info("%s", msg)
    return msg
