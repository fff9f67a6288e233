"""The data and observation models of the ``model_smc`` tasks.

:func:`build` turns a config into a :class:`Task`: the observations (real
tables from :mod:`datasets.population` or simulations from
:mod:`envs.ode_systems`), the :class:`methods.model_smc.model.ProblemSpec`,
the library and, for simulated tasks, the true structure and parameters.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from datasets import population
from envs import ode_systems
from launch.experiments import model_smc_csv as csv
from methods.common import hparams
from methods.model_smc import expr as ex
from methods.model_smc import interpret
from methods.model_smc import model as mdl
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


REAL = ("pelts", "flu", "csv")  # tasks without a simulated system


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
  states, trees, values = st.parse_system(sim.equations, sim.params)
  names = tuple(values)
  fns = [interpret.compile_expr(t, states=states, params=names) for t in trees]

  def rhs(x, p):
    theta = jnp.stack([jnp.asarray(p[n], x.dtype) for n in names]) if names else jnp.zeros((0,), x.dtype)
    return jnp.stack([jnp.asarray(f(x, theta, 0.0), x.dtype) for f in fns])

  observed = tuple(states.index(o) for o in sim.observed) if sim.observed else tuple(range(len(states)))
  return ode_systems.OdeSystem(
      name="equations", states=states, equations=tuple(ex.to_text(t) for t in trees), params=values,
      x0=tuple(sim.x0), dt=sim.dt, num_points=sim.num_points, observed=observed, noise=config.problem.noise,
      noise_scale=sim.noise_scale, rhs=rhs, description="Simulated from sim.equations: " + "; ".join(sim.equations))


def states_of(config) -> tuple[str, ...]:
  """The states of the task, in equation order (validation and build use this)."""
  if config.task == "pelts":
    return ("hare", "lynx")
  if config.task == "flu":
    return ("S", "I", "C")
  if config.task == "csv":
    return read_csv(config).states + tuple(config.data.latent)
  return tuple(system_of(config).states)


def read_csv(config) -> csv.CsvData:
  return csv.read_csv(config.data.path, time_column=config.data.time_column, states=config.data.states)


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


def _unit_coefficients(system: ode_systems.OdeSystem) -> dict:
  """The true equations with a parameter (true value 1) on every parameter-free term.

  Library bodies carry a positive parameter each, so a term such as ``v`` is
  the body ``a*v`` with ``a = 1``.
  """
  eqs, params = {}, dict(system.params)
  for state, text in zip(system.states, system.equations):
    terms = []
    for sign, body in ex.split_terms(ex.parse(text, states=system.states, params=tuple(system.params))):
      if not ex.params_of(body):
        name = f"unit{len(params)}"
        params[name] = 1.0
        body = ex.BinOp("mul", ex.Sym("param", name), body)
      terms.append(("-" if sign < 0 else "+") + "(" + ex.to_text(body) + ")")
    eqs[state] = " ".join(terms) if terms else "0"
  return {"equations": eqs, "params": params}


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
  y, _ = ode_systems.simulate(jax.random.key(config.sim.data_seed), system, num_points=num_points,
                              noise_scale=config.sim.noise_scale or None)
  y = np.asarray(y, np.float64)
  x0 = np.asarray(system.x0, np.float64)
  latent = [i for i in range(len(system.states)) if i not in system.observed]
  if config.problem.init == "fixed":
    logging.info("problem.init='fixed': the initial states are %s's true x0 %s", system.name, list(system.x0))
  else:
    x0[list(system.observed)] = y[0]
    if latent:
      logging.info("the x0 prior of the latent states %s is centred on the true x0", [system.states[i] for i in latent])
  spec = _spec(config, system.states, system.observed, system.dt)
  data = mdl.Data(jnp.asarray(y, jnp.float32), jnp.asarray(x0, jnp.float32))
  names = tuple(system.states[i] for i in system.observed)
  times = np.arange(len(y)) * system.dt
  desc = (system.description or f"Simulated system {system.name}.") + " Training rows:\n" + _table_text(
      names, times, y, min(config.num_fit, len(y)))
  return Task(config.task, f"simulated_{system.name}", f"simulated by envs.ode_systems.SYSTEMS[{system.name!r}]",
              tuple(system.states), tuple(system.observed), names, spec, data, times, "time", config.num_fit,
              _unit_coefficients(system), desc)


def _csv(config) -> Task:
  """The user's file (checked by the config check before any fit)."""
  d = read_csv(config)
  path = config.data.path
  states = d.states + tuple(config.data.latent)
  x0 = np.concatenate([csv.first_values(d), np.asarray(config.data.latent_x0, np.float64)])
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
  """The :class:`Task` of ``config.task``."""
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
  scratch = st.Library(library.states, library.keys, limits=library.limits)
  m = st.from_equations(task.truth["equations"], scratch)
  if len(scratch) != len(library):
    return None
  return m
