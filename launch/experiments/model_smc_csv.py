"""The user's own data for ``model_smc``: a CSV file (``task=csv``) or NumPy arrays.

File format: a header row, then one row per time. The time column is the
first one (or ``data.time_column``); the observed states are the other
columns (or ``data.states``), named by the header. An empty cell or ``NA`` /
``NaN`` is a missing observation. Times must increase strictly; they may
skip grid points (e.g. ``0, 1, 2, 4``): the rows are laid on the regular
grid of the smallest step, and the skipped points become missing rows.
Time is shifted so that the first row is ``t = 0``. Latent (unobserved)
states follow the observed ones in equation order, with their initial
values in ``data.latent_x0``.

Every problem with a file is a :class:`CsvError` naming the file and the
line, column or key, raised by the config check -- before any fit.

:func:`discover` is the Python entry point (like PySINDy's ``fit(x, t)``):
it writes the arrays to ``<workdir>/data.csv`` and runs the experiment on it.
"""

from __future__ import annotations

import difflib
import math
import os
from typing import NamedTuple, Optional, Sequence

import numpy as np

_MISSING = ("", "na", "nan", "n/a")
_RESERVED = ("t", "exp", "log", "sqrt", "sin", "cos", "tanh", "abs")


class CsvError(ValueError):
  """A data file that cannot be used; the message names the file and the place, ``key`` the config key."""

  def __init__(self, message: str, key: str = "data.path"):
    super().__init__(message)
    self.key = key


class CsvData(NamedTuple):
  """A parsed file on its regular grid.

  Attributes:
    times: ``[T]`` original time of each grid row.
    y: ``[T, O]`` observations (NaN: missing).
    states: names of the observed columns (equation order).
    dt: grid step.
    time_name: the time column's name.
  """

  times: np.ndarray
  y: np.ndarray
  states: tuple[str, ...]
  dt: float
  time_name: str


def _pick(name: str, columns: Sequence[str], where: str, key: str) -> int:
  if name in columns:
    return list(columns).index(name)
  close = difflib.get_close_matches(name, columns, n=1)
  hint = f" (did you mean {close[0]!r}?)" if close else ""
  raise CsvError(f"column {name!r} is not in {where}{hint}; its columns are {list(columns)}", key)


def read_csv(path: str, *, time_column: str = "", states: Sequence[str] = ()) -> CsvData:
  """Reads and checks ``path``; see the module docstring for the format."""
  if not path:
    raise CsvError("task=csv needs a file (--config.data.path=<file.csv>)")
  if not os.path.isfile(path):
    raise CsvError(f"{path!r} does not exist")
  try:
    with open(path, encoding="utf-8") as f:
      lines = [(i, ln.rstrip("\r\n")) for i, ln in enumerate(f, start=1)]
  except (OSError, UnicodeDecodeError) as e:
    raise CsvError(f"cannot read {path!r}: {e}") from e
  lines = [(i, ln) for i, ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
  if not lines:
    raise CsvError(f"{path}: empty file")
  columns = [c.strip() for c in lines[0][1].split(",")]
  if len(set(columns)) != len(columns) or not all(columns):
    raise CsvError(f"{path}, line {lines[0][0]}: the header {columns} has empty or repeated names")
  t_idx = _pick(time_column, columns, path, "data.time_column") if time_column else 0
  names = tuple(states) if states else tuple(c for j, c in enumerate(columns) if j != t_idx)
  idx = [_pick(s, columns, path, "data.states") for s in names]
  if not names:
    raise CsvError(f"{path}: no state columns besides the time column {columns[t_idx]!r}")
  for s in names:
    if not s.isidentifier() or s in _RESERVED or s.startswith("__"):
      raise CsvError(f"{path}: column {s!r} cannot name a state (use a plain identifier, not t or a function)")
  rows = []
  for i, ln in lines[1:]:
    fields = [x.strip() for x in ln.split(",")]
    if len(fields) != len(columns):
      raise CsvError(f"{path}, line {i}: {len(fields)} fields, the header has {len(columns)}")
    row = []
    for j in [t_idx] + idx:
      x = fields[j]
      if x.lower() in _MISSING:
        if j == t_idx:
          raise CsvError(f"{path}, line {i}, column {columns[j]!r}: a time is missing")
        row.append(math.nan)
        continue
      try:
        v = float(x)
      except ValueError:
        raise CsvError(f"{path}, line {i}, column {columns[j]!r}: {x!r} is not a number") from None
      if not math.isfinite(v):
        raise CsvError(f"{path}, line {i}, column {columns[j]!r}: {x!r} is not finite")
      row.append(v)
    rows.append((i, row))
  if len(rows) < 3:
    raise CsvError(f"{path}: {len(rows)} data rows; at least 3 are needed")
  arr = np.asarray([r for _, r in rows], np.float64)
  t = arr[:, 0]
  for (i, _), prev, cur in zip(rows[1:], t[:-1], t[1:]):
    if cur <= prev:
      what = "repeats" if cur == prev else "is earlier than"
      raise CsvError(f"{path}, line {i}, column {columns[t_idx]!r}: time {cur:g} {what} the previous time {prev:g} "
                     "(times must increase strictly)")
  steps = np.diff(t)
  dt = float(steps.min())
  k = steps / dt
  if np.any(np.abs(k - np.round(k)) > 1e-6 * np.maximum(k, 1.0)):
    raise CsvError(f"{path}: the times are not on a regular grid of step {dt:g} (the smallest step); "
                   "rows may skip grid points but not fall between them")
  pos = np.concatenate([[0], np.cumsum(np.round(k).astype(int))])
  y = np.full((pos[-1] + 1, len(names)), np.nan)
  y[pos] = arr[:, 1:]
  times = t[0] + dt * np.arange(len(y))
  for o, s in enumerate(names):
    if not np.isfinite(y[:, o]).any():
      raise CsvError(f"{path}: column {s!r} has no observations (every cell is empty or NA)")
  return CsvData(times, y, names, dt, columns[t_idx])


def check_fit_rows(data: CsvData, num_fit: int, path: str) -> None:
  """Named errors for a training window that cannot be fitted."""
  if not 3 <= num_fit < len(data.y):
    raise CsvError(f"{num_fit} training rows; {path} has {len(data.y)} grid rows (need 3 <= num_fit < "
                   f"{len(data.y)}; the rest are held out)", "num_fit")
  for o, s in enumerate(data.states):
    if not np.isfinite(data.y[:num_fit, o]).any():
      raise CsvError(f"{path}: column {s!r} has no observations in the {num_fit} fitted rows", "num_fit")


def first_values(data: CsvData) -> np.ndarray:
  """``[O]`` the first observed value of each column (the centre of its ``x0`` prior)."""
  return np.array([data.y[np.argmax(np.isfinite(data.y[:, o])), o] for o in range(len(data.states))])


def write_csv(path: str, t: np.ndarray, x: np.ndarray, states: Sequence[str], time_name: str = "t") -> None:
  """Writes ``x [T, S]`` at times ``t [T]`` (NaN as an empty cell) in the format :func:`read_csv` reads."""
  x = np.asarray(x, np.float64).reshape(len(t), -1)
  with open(path, "w", encoding="utf-8") as f:
    f.write(",".join([time_name, *states]) + "\n")
    for ti, row in zip(np.asarray(t, np.float64), x):
      f.write(",".join([f"{ti:g}"] + ["" if not math.isfinite(v) else f"{v:.6g}" for v in row]) + "\n")


def discover(x: np.ndarray, t: np.ndarray, *, states: Optional[Sequence[str]] = None, workdir: str,
             preset: str = "smoke", num_fit: Optional[int] = None, noise: str = "gaussian",
             latent: Sequence[str] = (), latent_x0: Sequence[float] = (), extra_terms: Sequence[str] = (),
             overrides: Optional[dict] = None) -> dict:
  """ModelSMC on arrays: ``x [T, S]`` observations (NaN: missing) at times ``t [T]``.

  Args:
    x: observations, one column per observed state.
    t: times (strictly increasing; may skip points of a regular grid).
    states: column names (default ``x0, x1, ...``).
    workdir: where the run (and ``data.csv``) is written; a rerun resumes.
    preset: ``smoke`` | ``cpu`` | ``paper``.
    num_fit: rows fitted (default: all but the last quarter); the rest are held out.
    noise: ``gaussian`` (signed data) or ``lognormal`` (positive data).
    latent: names of unobserved states; ``latent_x0`` their initial values.
    extra_terms: bodies added to the default library (e.g. ``"a*x/(b + x)"``).
    overrides: other config keys, dotted (e.g. ``{"smc.num_particles": 32}``).

  Returns:
    The run's ``results.json`` content.
  """
  from launch import runner  # pylint: disable=g-import-not-at-top
  from launch.configs import model_smc as smc_config  # pylint: disable=g-import-not-at-top

  x = np.asarray(x, np.float64)
  x = x[:, None] if x.ndim == 1 else x
  states = tuple(states) if states is not None else tuple(f"x{i}" for i in range(x.shape[1]))
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "data.csv")
  write_csv(path, np.asarray(t), x, states)
  config = smc_config.get_config(f"{preset},task=csv")
  config.data.path = path
  config.data.latent = tuple(latent)
  config.data.latent_x0 = tuple(float(v) for v in latent_x0)
  config.library_extra = tuple(extra_terms)
  config.problem.noise = noise
  rows = len(read_csv(path).y)
  config.num_fit = int(num_fit) if num_fit is not None else rows - max(1, rows // 4)
  for key, value in (overrides or {}).items():
    node, parts = config, key.split(".")
    for p in parts[:-1]:
      node = node[p]
    node[parts[-1]] = value
  return runner.run(config, workdir)


EXAMPLE = os.path.join("methods", "model_smc", "examples", "oscillator.csv")


def write_example(path: str = EXAMPLE) -> None:
  """Writes the shipped example: the damped oscillator (envs.ode_systems), Gaussian noise, two missing cells.

  ``python -c "from launch.experiments import model_smc_csv; model_smc_csv.write_example()"``
  regenerates it (the test suite checks that the shipped file is this output).
  """
  import jax  # pylint: disable=g-import-not-at-top
  from envs import ode_systems  # pylint: disable=g-import-not-at-top

  system = ode_systems.DAMPED_OSCILLATOR
  y, _ = ode_systems.simulate(jax.random.key(2026), system, num_points=24)
  y = np.asarray(y, np.float64)
  y[5, 0] = y[11, 1] = np.nan  # missing observations
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  write_csv(path, np.arange(len(y)) * system.dt, y, ("position", "velocity"), time_name="time")
