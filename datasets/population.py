"""Two small public tables for model discovery, typed in with their citations.

* :func:`load_pelts`: Hudson's Bay Company lynx and snowshoe hare pelts
  (thousands), 1900-1920, as used by the Stan Lotka-Volterra case study.
* :func:`load_influenza`: the 1978 influenza outbreak in an English boarding
  school (763 boys), daily counts of boys confined to bed and convalescent,
  22 January - 4 February 1978.

The tables ship inside this module as CSV text; :func:`read_table` parses
them -- or a CSV file given by path, in the same format -- and checks the
header, every value and the time column, naming the file and line of any
problem.
"""

from __future__ import annotations

import io
import math
import os
from typing import NamedTuple, Optional, Sequence

import numpy as np

PELTS_CITATION = (
    "Hudson's Bay Company pelt records, from Howard, P. (2009), Modeling Basics, lecture notes for "
    "Math 442, Texas A&M University; as used in Carpenter, B. (2018), Predator-Prey Population "
    "Dynamics: the Lotka-Volterra model in Stan, Stan case study."
)

INFLUENZA_CITATION = (
    "Anonymous (1978), Influenza in a boarding school, British Medical Journal 1(6112):587 "
    "(4 March 1978); daily counts as in the R package outbreaks, dataset "
    "influenza_england_1978_school (N = 763 boys)."
)

_PELTS_CSV = """year,hare,lynx
1900,30.0,4.0
1901,47.2,6.1
1902,70.2,9.8
1903,77.4,35.2
1904,36.3,59.4
1905,20.6,41.7
1906,18.1,19.0
1907,21.4,13.0
1908,22.0,8.3
1909,25.4,9.1
1910,27.1,7.4
1911,40.3,8.0
1912,57.0,12.3
1913,76.6,19.5
1914,52.3,45.7
1915,19.5,51.1
1916,11.2,29.7
1917,7.6,15.8
1918,14.6,9.7
1919,16.2,10.1
1920,24.7,8.6
"""

# Day 1 is 1978-01-22.
_INFLUENZA_CSV = """day,in_bed,convalescent
1,3,0
2,8,0
3,26,0
4,76,0
5,225,9
6,298,17
7,258,105
8,233,162
9,189,176
10,128,166
11,68,150
12,29,85
13,14,47
14,4,20
"""

INFLUENZA_POPULATION = 763
INFLUENZA_START_DATE = "1978-01-22"


class DataError(ValueError):
  """A data table that cannot be used; the message names the problem."""


class Table(NamedTuple):
  """A numeric table with a regular time column.

  Attributes:
    name: the dataset's name.
    time_name: name of the time column.
    times: ``[T]`` time values (regular spacing).
    columns: names of the value columns.
    values: ``[T, C]`` float64 values (non-negative, finite).
    citation: where the numbers come from.
  """

  name: str
  time_name: str
  times: np.ndarray
  columns: tuple[str, ...]
  values: np.ndarray
  citation: str


def read_table(source: str, *, name: str, header: Sequence[str], citation: str,
               from_path: bool = False, min_rows: int = 3) -> Table:
  """Parses and validates CSV text (or the file at ``source`` if ``from_path``).

  Raises:
    DataError: missing file, wrong header, wrong number of fields, a value
      that is not a finite non-negative number, or irregular times.
  """
  where = source if from_path else f"built-in table {name!r}"
  if from_path:
    if not os.path.isfile(source):
      raise DataError(f"data file {source!r} does not exist")
    try:
      with open(source, encoding="utf-8") as f:
        text = f.read()
    except (OSError, UnicodeDecodeError) as e:
      raise DataError(f"cannot read {source!r}: {e}") from e
  else:
    text = source
  lines = [ln.strip() for ln in io.StringIO(text) if ln.strip() and not ln.lstrip().startswith("#")]
  if not lines:
    raise DataError(f"{where}: empty")
  got = tuple(c.strip() for c in lines[0].split(","))
  if got != tuple(header):
    raise DataError(f"{where}: header {list(got)} differs from the expected {list(header)}")
  rows = []
  for i, line in enumerate(lines[1:], start=2):
    fields = [x.strip() for x in line.split(",")]
    if len(fields) != len(header):
      raise DataError(f"{where}, line {i}: {len(fields)} fields, expected {len(header)}")
    row = []
    for col, x in zip(header, fields):
      try:
        v = float(x)
      except ValueError:
        raise DataError(f"{where}, line {i}: {col}={x!r} is not a number") from None
      if not math.isfinite(v) or v < 0:
        raise DataError(f"{where}, line {i}: {col}={x!r} must be finite and non-negative")
      row.append(v)
    rows.append(row)
  if len(rows) < min_rows:
    raise DataError(f"{where}: {len(rows)} rows, at least {min_rows} needed")
  arr = np.asarray(rows, np.float64)
  steps = np.diff(arr[:, 0])
  if np.any(steps <= 0) or not np.allclose(steps, steps[0]):
    raise DataError(f"{where}: the {header[0]} column must increase in equal steps")
  return Table(name, header[0], arr[:, 0], tuple(header[1:]), arr[:, 1:], citation)


def load_pelts(path: Optional[str] = None) -> Table:
  """Lynx and hare pelts (thousands) by year, 1900-1920 (columns ``hare``, ``lynx``)."""
  return read_table(path or _PELTS_CSV, name="hudson_bay_pelts", header=("year", "hare", "lynx"),
                    citation=PELTS_CITATION, from_path=path is not None)


def load_influenza(path: Optional[str] = None) -> Table:
  """Boys in bed and convalescent by day (day 1 = 1978-01-22), N = 763."""
  return read_table(path or _INFLUENZA_CSV, name="influenza_england_1978_school",
                    header=("day", "in_bed", "convalescent"), citation=INFLUENZA_CITATION,
                    from_path=path is not None)
