"""ModelSMC on the user's own arrays: the Python entry point, and the shipped example file.

:func:`discover` is the Python entry point (like PySINDy's ``fit(x, t)``):
it writes the arrays to ``<workdir>/data.csv`` in the format of
:mod:`datasets.timeseries` and runs the ``model_smc`` experiment on it
(``task=csv``) through :func:`launch.runner.run`, like ``python -m
launch.main`` would. It is an entry point, not an experiment: no experiment
imports it.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import jax
import numpy as np

from datasets import timeseries
from envs import ode_systems
from launch import runner
from launch.configs import model_smc as smc_config


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
    overrides: other config keys, dotted (e.g. ``{"tempering.num_particles": 32}``).

  Returns:
    The run's ``results.json`` content.
  """
  x, t, states = check_arrays(x, t, states)
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "data.csv")
  timeseries.write_csv(path, t, x, states)
  config = smc_config.get_config(f"{preset},task=csv")
  config.data.path = path
  config.data.latent = tuple(latent)
  config.data.latent_x0 = tuple(float(v) for v in latent_x0)
  config.library_extra = tuple(extra_terms)
  config.problem.noise = noise
  rows = len(timeseries.read_csv(path).y)
  config.num_fit = int(num_fit) if num_fit is not None else rows - max(1, rows // 4)
  for key, value in (overrides or {}).items():
    node, parts = config, key.split(".")
    for p in parts[:-1]:
      node = node[p]
    node[parts[-1]] = value
  return runner.run(config, workdir)


def check_arrays(x, t, states: Optional[Sequence[str]] = None) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """``(x [T, S], t [T], states)`` as :func:`discover` writes them, or a ``ValueError`` naming the argument.

  ``x`` is one row per time and one column per state (a 1-D ``x`` is one
  state); its NaN cells are missing observations, an infinite cell is refused
  (the CSV has no way to write it but as missing). The times must be finite.
  """
  x, t = np.asarray(x, np.float64), np.asarray(t, np.float64)
  if t.ndim != 1:
    raise ValueError(f"t must be 1-D, one time per row of x; its shape is {t.shape}")
  x = x[:, None] if x.ndim == 1 else x
  if x.ndim != 2:
    raise ValueError(f"x must be [times, states]; its shape is {x.shape}")
  if x.shape[0] != t.shape[0]:
    hint = f" (x looks transposed: pass x.T, of shape {x.shape[::-1]})" if x.shape[1] == t.shape[0] else ""
    raise ValueError(f"x has {x.shape[0]} rows but t has {t.shape[0]} times{hint}")
  states = tuple(states) if states is not None else tuple(f"x{i}" for i in range(x.shape[1]))
  if len(states) != x.shape[1]:
    raise ValueError(f"states names {len(states)} columns {list(states)} but x has {x.shape[1]}")
  if not np.isfinite(t).all():
    raise ValueError(f"t[{int(np.flatnonzero(~np.isfinite(t))[0])}] is not finite")
  infinite = np.argwhere(np.isinf(x))
  if len(infinite):
    row, col = (int(i) for i in infinite[0])
    raise ValueError(f"x[{row}, {col}] (state {states[col]!r}) is {x[row, col]}: not finite (NaN marks a "
                     f"missing observation)")
  return x, t, states


EXAMPLE = os.path.join("methods", "model_smc", "examples", "oscillator.csv")


def write_example(path: str = EXAMPLE) -> None:
  """Writes the shipped example: the damped oscillator (envs.ode_systems), Gaussian noise, two missing cells.

  ``python -c "from launch.experiments.model_smc import discover; discover.write_example()"``
  regenerates it (the test suite checks that the shipped file is this output).
  """
  system = ode_systems.DAMPED_OSCILLATOR
  y, _ = ode_systems.simulate(jax.random.key(2026), system, num_points=24)
  y = np.asarray([[float(f"{v:.6g}") for v in row] for row in np.asarray(y, np.float64)])  # 6 digits, as measured
  y[5, 0] = y[11, 1] = np.nan  # missing observations
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  timeseries.write_csv(path, np.arange(len(y)) * system.dt, y, ("position", "velocity"), time_name="time")
