"""Time series of observed states from a CSV file: the reader, its errors and the writer.

File format: a header row, then one row per time. The time column is the
first one (or ``time_column``); the observed states are the other columns
(or ``states``), named by the header. An empty cell or ``NA`` / ``NaN`` is a
missing observation; lines starting with ``#`` are comments. Times must
increase strictly; they may skip grid points (e.g. ``0, 1, 2, 4``): the rows
are laid on the regular grid of the smallest step, and the skipped points
become missing rows. State names must be plain identifiers (not ``t``, a
function name of ModelSMC's expression language or a Python keyword such as
``lambda``), each listed once and none of them the time column. The file is
UTF-8; a leading byte-order mark (Excel's "CSV UTF-8") is dropped.

Bounds: the grid may hold at most ``max_grid_points`` rows (times
``0, 1e-9, 1`` imply a billion of them: an error naming the row that passes
the bound, before anything is allocated), and every value must stay finite
in ``dtype``, the precision the data are computed in (a cell ``1e308`` is
finite in float64 but not in float32: an error naming the line and column,
never a silently missing value); the grid step must be positive in
``dtype`` too.

Every problem with a file is a :class:`CsvError` naming the file and the
line, column or argument. NumPy only.
"""

from __future__ import annotations

import difflib
import keyword
import math
import os
from typing import NamedTuple, Sequence

import numpy as np

_MISSING = ("", "na", "nan", "n/a")
MAX_GRID_POINTS = 5000  # default bound on the rows of the regular grid (config key data.max_grid_points)
_RESERVED = ("t", "exp", "log", "sqrt", "sin", "cos", "tanh", "abs")


class CsvError(ValueError):
  """A data file that cannot be used; the message names the file and the place.

  ``key`` names the argument of :func:`read_csv` at fault: ``"path"`` (the
  file itself), ``"time_column"`` or ``"states"``.
  """

  def __init__(self, message: str, key: str = "path"):
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


def _lines(path: str) -> list[tuple[int, str]]:
  """``(line number, text)`` of the non-blank, non-comment lines of ``path``."""
  if not path:
    raise CsvError("no file given")
  if os.path.isdir(path):
    raise CsvError(f"{path!r} is a directory, not a file")
  if not os.path.isfile(path):
    raise CsvError(f"{path!r} does not exist")
  try:
    with open(path, encoding="utf-8-sig") as f:  # -sig: drops the byte-order mark of Excel's "CSV UTF-8"
      lines = [(i, ln.rstrip("\r\n")) for i, ln in enumerate(f, start=1)]
  except (OSError, UnicodeDecodeError) as e:
    raise CsvError(f"cannot read {path!r}: {e}") from e
  lines = [(i, ln) for i, ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
  if not lines:
    raise CsvError(f"{path}: empty file")
  return lines


def _header(path: str, line: tuple[int, str], time_column: str, states: Sequence[str]):
  """``(columns, time index, state names, state indices)`` from the header line."""
  columns = [c.strip() for c in line[1].split(",")]
  if all(_is_number(c) for c in columns):
    example = [f"x{j}" for j in range(1, len(columns))]
    raise CsvError(f"{path}, line {line[0]}: the first row holds numbers {columns[:4]}, not column names; the file "
                   f"needs a header row naming the time column and the states (e.g. t,{','.join(states or example)})")
  if len(set(columns)) != len(columns) or not all(columns):
    raise CsvError(f"{path}, line {line[0]}: the header {columns} has empty or repeated names")
  t_idx = _pick(time_column, columns, path, "time_column") if time_column else 0
  names = tuple(states) if states else tuple(c for j, c in enumerate(columns) if j != t_idx)
  idx = [_pick(s, columns, path, "states") for s in names]
  if not names:
    raise CsvError(f"{path}: no state columns besides the time column {columns[t_idx]!r}")
  for s, j in zip(names, idx):
    if j == t_idx:
      others = [c for k, c in enumerate(columns) if k != t_idx]
      raise CsvError(f"{path}: the state {s!r} is the time column; the states are among the other columns {others}",
                     "states")
    if names.count(s) > 1:
      raise CsvError(f"{path}: the state {s!r} is listed {names.count(s)} times in {list(names)}", "states")
    if not s.isidentifier() or keyword.iskeyword(s) or s in _RESERVED or s.startswith("__"):
      raise CsvError(f"{path}: column {s!r} cannot name a state (use a plain identifier, not t, a function "
                     "or a Python keyword)")
  return columns, t_idx, names, idx


def _is_number(text: str) -> bool:
  try:
    float(text)
  except ValueError:
    return False
  return True


def _cell(x: str, where: str, is_time: bool, dtype) -> float:
  """One cell as a float (NaN when missing); ``where`` names its file, line and column."""
  if x.lower() in _MISSING:
    if is_time:
      raise CsvError(f"{where}: a time is missing")
    return math.nan
  try:
    v = float(x)
  except ValueError:
    raise CsvError(f"{where}: {x!r} is not a number") from None
  if not math.isfinite(v):
    raise CsvError(f"{where}: {x!r} is not finite")
  if not is_time and not _finite_in(v, dtype):
    raise CsvError(f"{where}: {x!r} is not finite in {np.dtype(dtype).name}, the precision of the fit "
                   f"(largest finite value {float(np.finfo(dtype).max):.4g}); rescale the column")
  return v


def _on_grid(path: str, rows, arr: np.ndarray, time_name: str, max_grid_points: int, dtype):
  """``(times, y with NaN rows for skipped grid points, dt)`` of rows whose times increase strictly."""
  t = arr[:, 0]
  for (i, _), prev, cur in zip(rows[1:], t[:-1], t[1:]):
    if cur <= prev:
      what = "repeats" if cur == prev else "is earlier than"
      raise CsvError(f"{path}, line {i}, column {time_name!r}: time {cur:g} {what} the previous time {prev:g} "
                     "(times must increase strictly)")
  steps = np.diff(t)
  dt = float(steps.min())
  _check_grid(path, rows, t, dt, time_name, max_grid_points, dtype)
  k = steps / dt
  if np.any(np.abs(k - np.round(k)) > 1e-6 * np.maximum(k, 1.0)):
    raise CsvError(f"{path}: the times are not on a regular grid of step {dt:g} (the smallest step); "
                   "rows may skip grid points but not fall between them")
  pos = np.concatenate([[0], np.cumsum(np.round(k).astype(np.int64))])
  y = np.full((pos[-1] + 1, arr.shape[1] - 1), np.nan)
  y[pos] = arr[:, 1:]
  return t[0] + dt * np.arange(len(y)), y, dt


def read_csv(path: str, *, time_column: str = "", states: Sequence[str] = (),
             max_grid_points: int = MAX_GRID_POINTS, dtype=np.float32) -> CsvData:
  """Reads and checks ``path``; see the module docstring for the format.

  Args:
    path: the file.
    time_column: the time column's name (default: the first column).
    states: the observed columns, in equation order (default: every other column).
    max_grid_points: the most rows the regular grid may have (skipped points included).
    dtype: the precision the observations are computed in; every value must
      be finite in it (the returned arrays stay float64).
  """
  lines = _lines(path)
  columns, t_idx, names, idx = _header(path, lines[0], time_column, states)
  rows = []
  for i, ln in lines[1:]:
    fields = [x.strip() for x in ln.split(",")]
    if len(fields) != len(columns):
      raise CsvError(f"{path}, line {i}: {len(fields)} fields, the header has {len(columns)}")
    rows.append((i, [_cell(fields[j], f"{path}, line {i}, column {columns[j]!r}", j == t_idx, dtype)
                     for j in [t_idx] + idx]))
  if len(rows) < 3:
    raise CsvError(f"{path}: {len(rows)} data rows; at least 3 are needed")
  arr = np.asarray([r for _, r in rows], np.float64)
  times, y, dt = _on_grid(path, rows, arr, columns[t_idx], max_grid_points, dtype)
  for o, s in enumerate(names):
    if not np.isfinite(y[:, o]).any():
      raise CsvError(f"{path}: column {s!r} has no observations (every cell is empty or NA)")
  return CsvData(times, y, names, dt, columns[t_idx])


def _finite_in(v: float, dtype) -> bool:
  with np.errstate(over="ignore"):
    return bool(np.isfinite(np.asarray(v, dtype)))


def _check_grid(path: str, rows, t: np.ndarray, dt: float, time_name: str, max_grid_points: int, dtype) -> None:
  """The regular grid of step ``dt`` fits in ``max_grid_points`` rows and ``dt`` is positive in ``dtype``."""
  small = int(np.argmin(np.diff(t)))  # the step that sets the grid: rows small and small + 1
  between = f"between line {rows[small][0]} and line {rows[small + 1][0]}"
  with np.errstate(under="ignore"):
    positive = bool(np.asarray(dt, dtype) > 0)
  if not positive:
    raise CsvError(f"{path}: the smallest time step {dt:g} ({between}) is zero in {np.dtype(dtype).name}, "
                   "the precision of the fit; rescale the time column")
  with np.errstate(over="ignore"):
    offset = (t - t[0]) / dt  # grid index of each row (float: no integer overflow)
  total = offset[-1] + 1
  if not total <= max_grid_points:
    r = int(np.argmax(~(offset + 1 <= max_grid_points)))  # the first row past the bound
    raise CsvError(f"{path}: the times imply {total:,.0f} grid points (step {dt:g}, the smallest step, "
                   f"{between}); line {rows[r][0]} ({time_name} {t[r]:g}) is grid point {offset[r] + 1:,.0f}, "
                   f"beyond the bound of {max_grid_points:,} (data.max_grid_points; check the times, or raise "
                   "the bound: every fit integrates over the whole grid)")


def first_values(data: CsvData) -> np.ndarray:
  """``[O]`` the first observed value of each column (the centre of its ``x0`` prior)."""
  return np.array([data.y[np.argmax(np.isfinite(data.y[:, o])), o] for o in range(len(data.states))])


def write_csv(path: str, t: np.ndarray, x: np.ndarray, states: Sequence[str], time_name: str = "t") -> None:
  """Writes ``x [T, S]`` at times ``t [T]`` (NaN as an empty cell) in the format :func:`read_csv` reads.

  Every number is written in full (its shortest round-trip text), so
  :func:`read_csv` reads back exactly the float64 values given.

  Raises:
    ValueError: ``t`` not ``[T]``, or ``x`` neither ``[T, S]`` nor ``[T]``
      with one state (``S = len(states)``), named with the shapes.
  """
  t, x = np.asarray(t, np.float64), np.asarray(x, np.float64)
  if x.ndim == 1 and len(states) == 1:
    x = x[:, None]
  if t.ndim != 1 or x.shape != (len(t), len(states)):
    raise ValueError(f"x has shape {x.shape} and t {t.shape}; write_csv needs x [T, S] = ({len(t)}, {len(states)}) "
                     f"for t [T] and the states {list(states)}")
  with open(path, "w", encoding="utf-8") as f:
    f.write(",".join([time_name, *states]) + "\n")
    for ti, row in zip(t, x):
      f.write(",".join([_exact(ti)] + ["" if not math.isfinite(v) else _exact(v) for v in row]) + "\n")


def _exact(v) -> str:
  """The shortest text that reads back as the float64 ``v`` (``repr``, without a trailing ``.0``)."""
  text = repr(float(v))
  return text[:-2] if text.endswith(".0") else text
