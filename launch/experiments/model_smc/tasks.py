"""The data and observation models of the ``model_smc`` tasks.

:func:`build` turns a config into a :class:`Task`: the observations (real
tables from :mod:`datasets.population`, the user's file read by
:mod:`datasets.timeseries`, or simulations of :mod:`envs.ode_systems` by
:mod:`methods.model_smc.problems`), the
:class:`methods.model_smc.model.ProblemSpec`, the library and, for simulated
tasks, the true structure and parameters.
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple, Optional

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from datasets import population
from datasets import timeseries
from envs import ode_systems
from launch import errors
from launch.configs import model_smc as smc_config
from methods.common import hparams
from methods.model_smc import model as mdl
from methods.model_smc import problems
from methods.model_smc import structure as st


class Task(NamedTuple):
  """Everything a run needs to know about its data.

  Attributes:
    name: the task.
    dataset: dataset name.
    citation: where the data come from.
    states: state names.
    observed: indices of the observed states.
    observed_names: display names of the observed columns.
    spec: the observation model.
    data: ``Data`` (all rows; the first ``num_fit`` are fitted).
    times: ``[T]`` time of each row in the data's own unit.
    time_label: axis label of ``times``.
    num_fit: training rows.
    truth: ``{"equations": {state: text}, "params": {name: value}}`` or None.
    description: a text for LLM prompts (the data and what they mean).
  """

  name: str
  dataset: str
  citation: str
  states: tuple[str, ...]
  observed: tuple[int, ...]
  observed_names: tuple[str, ...]
  spec: mdl.ProblemSpec
  data: mdl.Data
  times: np.ndarray
  time_label: str
  num_fit: int
  truth: Optional[dict]
  description: str

  @property
  def num_points(self) -> int:
    return int(self.data.y.shape[0])

  @property
  def all_observed(self) -> bool:
    return sorted(self.observed) == list(range(len(self.states)))


def _spec(config, states, observed, dt) -> mdl.ProblemSpec:
  return hparams.from_config(mdl.ProblemSpec, config.problem, states=tuple(states), observed=tuple(observed),
                             dt=float(dt))


def _table_text(names, times, y, rows) -> str:
  lines = ["t, " + ", ".join(names)]
  for i in range(rows):
    vals = ", ".join("NA" if not np.isfinite(v) else f"{v:.4g}" for v in y[i])
    lines.append(f"{times[i]:g}, {vals}")
  return "\n".join(lines)


REAL = smc_config.REAL  # tasks without a simulated system


def system_of(config) -> Optional[ode_systems.OdeSystem]:
  """The simulated system of ``config`` (``None`` for real data)."""
  if config.task in REAL:
    return None
  if config.task == "sim" and config.sim.equations:
    return text_system(config)
  return ode_systems.SYSTEMS[config.sim.system]


def text_system(config) -> ode_systems.OdeSystem:
  """The system of ``sim.equations`` (safe parser and interpreter), simulated with ``problem.noise``."""
  sim = config.sim
  return problems.system_from_equations(
      sim.equations, sim.params, x0=sim.x0, observed=sim.observed, dt=sim.dt, num_points=sim.num_points,
      noise=config.problem.noise, noise_scale=sim.noise_scale,
      description="Simulated from sim.equations: " + "; ".join(sim.equations))


def states_of(config) -> tuple[str, ...]:
  """The states of the task, in equation order (validation and build use this)."""
  if config.task == "pelts":
    return ("hare", "lynx")
  if config.task == "flu":
    return ("S", "I", "C")
  if config.task == "csv":
    return read_csv(config).states + tuple(config.data.latent)
  return tuple(system_of(config).states)


def read_csv(config) -> timeseries.CsvData:
  """The user's file of ``task=csv`` (``data.path``, ``data.time_column``, ``data.states``).

  Raises:
    timeseries.CsvError: naming the file and the place; its ``key`` is the config key at fault.
  """
  data = config.data
  try:
    if not data.path:
      raise timeseries.CsvError("task=csv needs a file (--config.data.path=<file.csv>)")
    return timeseries.read_csv(data.path, time_column=data.time_column, states=data.states,
                               max_grid_points=data.max_grid_points, dtype=np.float32)
  except timeseries.CsvError as e:
    e.key = f"data.{e.key}"
    raise


def check_fit_rows(d: timeseries.CsvData, num_fit: int, path: str):
  """Named problems of a training window that cannot be fitted (each yields ``(key, message)``)."""
  if len(d.y) < 4:
    yield "data.path", f"{path} has {len(d.y)} grid rows; a fit needs at least 4 (3 fitted and 1 held out)"
    return
  if not 3 <= num_fit < len(d.y):
    yield "num_fit", (f"{num_fit} training rows; {path} has {len(d.y)} grid rows (need 3 <= num_fit < "
                      f"{len(d.y)}; the rest are held out)")
    return
  for o, s in enumerate(d.states):
    if not np.isfinite(d.y[:num_fit, o]).any():
      yield "num_fit", f"{path}: column {s!r} has no observations in the {num_fit} fitted rows"
      return


def library_of(config, states) -> tuple[str, ...]:
  """``config.library`` (empty: the default one from the state names) plus ``config.library_extra``."""
  return tuple(config.library or st.default_bodies(states)) + tuple(config.library_extra)


def num_rows(config) -> Optional[int]:
  """Rows of the task's data (``None``: the exact task simulates ``num_fit`` rows)."""
  if config.task == "pelts":
    return len(population.load_pelts().times)
  if config.task == "flu":
    return 1 + len(population.load_influenza().times)  # t = 0 (no data) and the observed days
  if config.task == "exact":
    return None
  if config.task == "csv":
    return len(read_csv(config).y)
  return system_of(config).num_points


def _simulated(config) -> Task:
  """Any system of ``envs.ode_systems.SYSTEMS``; logs every default that overrides the system's own values."""
  system = system_of(config)
  num_points = config.num_fit if config.task == "exact" else system.num_points
  if num_points != system.num_points:
    logging.info("task %s simulates num_fit=%d rows (the system's num_points is %d)", config.task, num_points,
                 system.num_points)
  if config.sim.noise_scale > 0 and config.sim.noise_scale != system.noise_scale:
    logging.info("sim.noise_scale=%g overrides %s's own noise scale %g", config.sim.noise_scale, system.name,
                 system.noise_scale)
  if config.problem.noise != system.noise:
    logging.warning("problem.noise=%r fits %s's %s noise (sim.allow_noise_mismatch=True)", config.problem.noise,
                    system.name, system.noise)
  spec = _spec(config, system.states, system.observed, system.dt)
  data = problems.simulate(jax.random.key(config.sim.data_seed), system, spec, num_points=num_points,
                           noise_scale=config.sim.noise_scale or None)
  latent = [i for i in range(len(system.states)) if i not in system.observed]
  if config.problem.init == "fixed":
    logging.info("problem.init='fixed': the initial states are %s's true x0 %s", system.name, list(system.x0))
  elif latent:
    logging.info("the x0 prior of the latent states %s is centred on the true x0", [system.states[i] for i in latent])
  y = np.asarray(data.y, np.float64)
  names = tuple(system.states[i] for i in system.observed)
  times = np.arange(len(y)) * system.dt
  desc = (system.description or f"Simulated system {system.name}.") + " Training rows:\n" + _table_text(
      names, times, y, min(config.num_fit, len(y)))
  return Task(config.task, f"simulated_{system.name}", f"simulated by envs.ode_systems.SYSTEMS[{system.name!r}]",
              tuple(system.states), tuple(system.observed), names, spec, data, times, "time", config.num_fit,
              problems.unit_coefficients(system), desc)


def _csv(config) -> Task:
  """The user's file (checked by the config check before any fit)."""
  d = read_csv(config)
  path = config.data.path
  states = d.states + tuple(config.data.latent)
  x0 = np.concatenate([timeseries.first_values(d), np.asarray(config.data.latent_x0, np.float64)])
  spec = _spec(config, states, range(len(d.states)), d.dt)
  data = mdl.Data(jnp.asarray(d.y, jnp.float32), jnp.asarray(x0, jnp.float32))
  name = os.path.splitext(os.path.basename(path))[0]
  latent = f"; latent states {list(config.data.latent)} start at {list(config.data.latent_x0)}" if \
      config.data.latent else ""
  desc = (f"User data from {os.path.basename(path)}: observed {list(d.states)}{latent}; time column "
          f"{d.time_name!r} (t = 0 is its first row). Training rows:\n"
          + _table_text(d.states, d.times - d.times[0], d.y, config.num_fit))
  return Task("csv", name, f"user file {path}", states, tuple(range(len(d.states))), d.states, spec, data,
              d.times, d.time_name, config.num_fit, None, desc)


def build(config: ml_collections.ConfigDict) -> Task:
  """The :class:`Task` of ``config.task``, its arrays checked in the precision they are computed in.

  Raises:
    errors.DataError: an observation or initial state that is not finite
      after the cast to float32 (a missing observation, NaN in the data, is
      allowed; an infinity never is; simulated data must be finite), naming
      the array, row and state; or one that reaches ``problem.state_bound``
      (:func:`state_bound_problem`), naming that key.
  """
  task = _build(config)
  source = f"the {config.task!r} task's data" if config.task != "csv" else config.data.path
  check_arrays(task, source)
  for what, names, values in (("state", task.observed_names, task.data.y),
                              ("initial state", task.states, task.data.x0_ref)):
    problem = state_bound_problem(source, what, names, values, config.problem.state_bound)
    if problem:
      raise errors.DataError(f"'problem.state_bound': {problem}; nothing was fitted")
  return task


def state_bound_problem(source: str, what: str, names, values, bound: float) -> Optional[str]:
  """Why ``values`` cannot be fitted under ``problem.state_bound`` (``None``: every value stays below it).

  Every integrated state is clipped to ``+-bound``, so no structure can follow
  an observation, or start from an initial state, at or past it.

  Args:
    source: the file or task the values come from (the message starts with it).
    what: what a value is, e.g. ``"column"`` or ``"initial state"``.
    names: ``[N]`` the name of each column of ``values``.
    values: ``[N]`` or ``[T, N]`` (NaN: missing, ignored).
    bound: ``problem.state_bound``.
  """
  a = np.abs(np.asarray(values, np.float64)).reshape(-1, len(names))
  peak = np.where(np.isnan(a), 0.0, a).max(axis=0, initial=0.0)
  over = [(s, float(v)) for s, v in zip(names, peak) if v >= bound]
  if not over:
    return None
  s, v = max(over, key=lambda sv: sv[1])
  fix = "rescale the data" if what != "column" else "rescale the column"
  if math.isfinite(v) and v < 1e37:  # a bound that stays finite in float32
    fix = f"pass --config.problem.state_bound={10.0 ** (math.ceil(math.log10(v)) + 1):g} or {fix}"
  return (f"{source}: {what} {s!r} reaches {v:.3g}, but every integrated state is clipped to +-{bound:g}, so no "
          f"structure can follow it; {fix}")


def check_arrays(task: Task, source: str) -> None:
  """Raises ``errors.DataError`` for a value of ``task.data`` that is not finite (NaN: missing, only in real data)."""
  y = np.asarray(task.data.y)
  bad = ~np.isfinite(y) if task.truth is not None else np.isinf(y)
  if bad.any():
    r, o = np.argwhere(bad)[0]
    what = "simulated observation" if task.truth is not None else "observation"
    raise errors.DataError(f"{source}: {what} data.y[{r}, {o}] (time {task.times[r]:g}, state "
                           f"{task.observed_names[o]!r}) is {y[r, o]} in {y.dtype}; nothing was fitted")
  x0 = np.asarray(task.data.x0_ref)
  if not np.isfinite(x0).all():
    s = int(np.argmax(~np.isfinite(x0)))
    raise errors.DataError(f"{source}: the initial state x0_ref[{s}] (state {task.states[s]!r}) is {x0[s]} in "
                           f"{x0.dtype}; nothing was fitted")


def _build(config: ml_collections.ConfigDict) -> Task:
  if config.task == "pelts":
    table = population.load_pelts()
    states = states_of(config)
    y = table.values
    spec = _spec(config, states, (0, 1), 1.0)
    data = mdl.Data(jnp.asarray(y, jnp.float32), jnp.asarray(y[0], jnp.float32))
    desc = ("Hudson's Bay Company pelts (thousands) of snowshoe hare and Canadian lynx, one row per year "
            "(t = years since 1900). Training rows:\n" + _table_text(states, table.times - 1900, y, config.num_fit))
    return Task("pelts", table.name, table.citation, states, (0, 1), states, spec, data, table.times,
                "year", config.num_fit, None, desc)
  if config.task == "flu":
    table = population.load_influenza()
    states = states_of(config)
    y = np.concatenate([np.full((1, 2), np.nan), table.values / 100.0], axis=0)
    times = np.concatenate([[0.0], table.times])
    spec = _spec(config, states, (1, 2), 1.0)
    x0 = np.array([(population.INFLUENZA_POPULATION - 1) / 100.0, 0.01, 0.0])
    data = mdl.Data(jnp.asarray(y, jnp.float32), jnp.asarray(x0, jnp.float32))
    desc = ("1978 influenza outbreak in a boarding school of 763 boys, in hundreds of boys: S susceptible "
            "(not observed; S(0) = 7.62), I confined to bed, C convalescent; t in days since 21 January "
            "(I(0) = 0.01, C(0) = 0). Training rows:\n" + _table_text(("I", "C"), times, y, config.num_fit))
    return Task("flu", table.name, table.citation, states, (1, 2), ("in_bed", "convalescent"), spec, data,
                times, "day (1 = 22 Jan 1978)", config.num_fit, None, desc)
  if config.task == "csv":
    return _csv(config)
  return _simulated(config)


def truth_structure(task: Task, library: st.Library) -> Optional[st.Structure]:
  """The true structure in ``library``'s terms (None for real data or if it is outside the library)."""
  if task.truth is None:
    return None
  return problems.truth_structure(task.truth["equations"], library)
