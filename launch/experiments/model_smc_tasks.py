"""The data and observation models of the ``model_smc`` tasks.

:func:`build` turns a config into a :class:`Task`: the observations (real
tables from :mod:`datasets.population` or simulations from
:mod:`envs.ode_systems`), the :class:`methods.model_smc.model.ProblemSpec`,
the library and, for simulated tasks, the true structure and parameters.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from datasets import population
from envs import ode_systems
from methods.common import hparams
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


# The states of each task, in equation order (declared once: validation and build use them).
STATES = {
    "pelts": ("hare", "lynx"),
    "flu": ("S", "I", "C"),
    "lv_sim": ode_systems.LOTKA_VOLTERRA.states,
    "exact": ode_systems.DAMPED_OSCILLATOR.states,
}


def num_rows(task: str) -> Optional[int]:
  """Rows of the task's data (``None``: the exact task simulates ``num_fit`` rows)."""
  if task == "pelts":
    return len(population.load_pelts().times)
  if task == "flu":
    return 1 + len(population.load_influenza().times)  # t = 0 (no data) and the observed days
  if task == "lv_sim":
    return ode_systems.LOTKA_VOLTERRA.num_points
  return None


def build(config: ml_collections.ConfigDict) -> Task:
  """The :class:`Task` of ``config.task``."""
  if config.task == "pelts":
    table = population.load_pelts()
    states = STATES["pelts"]
    y = table.values
    spec = _spec(config, states, (0, 1), 1.0)
    data = mdl.Data(jnp.asarray(y, jnp.float32), jnp.asarray(y[0], jnp.float32))
    desc = ("Hudson's Bay Company pelts (thousands) of snowshoe hare and Canadian lynx, one row per year "
            "(t = years since 1900). Training rows:\n" + _table_text(states, table.times - 1900, y, config.num_fit))
    return Task("pelts", table.name, table.citation, states, (0, 1), states, spec, data, table.times,
                "year", config.num_fit, None, desc)
  if config.task == "flu":
    table = population.load_influenza()
    states = STATES["flu"]
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
  if config.task == "lv_sim":
    system = ode_systems.LOTKA_VOLTERRA
    y, _ = ode_systems.simulate(jax.random.key(config.sim.data_seed), system, noise_scale=config.sim.noise_scale)
    y = np.asarray(y, np.float64)
    spec = _spec(config, system.states, system.observed, system.dt)
    data = mdl.Data(jnp.asarray(y, jnp.float32), jnp.asarray(y[0], jnp.float32))
    truth = {"equations": dict(zip(system.states, system.equations)), "params": dict(system.params)}
    desc = ("Simulated predator-prey data: x prey, y predator, one row per time unit. Training rows:\n"
            + _table_text(system.states, np.arange(len(y)), y, config.num_fit))
    return Task("lv_sim", "simulated_lotka_volterra", "simulated by envs.ode_systems.LOTKA_VOLTERRA",
                system.states, system.observed, system.states, spec, data, np.arange(len(y)) * system.dt,
                "time", config.num_fit, truth, desc)
  if config.task == "exact":
    system = ode_systems.DAMPED_OSCILLATOR
    y, _ = ode_systems.simulate(jax.random.key(config.sim.data_seed), system, num_points=config.num_fit,
                                noise_scale=config.sim.noise_scale)
    y = np.asarray(y, np.float64)
    spec = _spec(config, system.states, system.observed, system.dt)
    data = mdl.Data(jnp.asarray(y, jnp.float32), jnp.asarray(system.x0, jnp.float32))
    truth = {"equations": {"x": "a*v", "v": "-k*x - c*v"}, "params": {"a": 1.0, **system.params}}
    desc = ("Simulated oscillator: x position, v velocity. Rows:\n"
            + _table_text(system.states, np.arange(len(y)) * system.dt, y, config.num_fit))
    return Task("exact", "simulated_damped_oscillator", "simulated by envs.ode_systems.DAMPED_OSCILLATOR",
                system.states, system.observed, system.states, spec, data, np.arange(len(y)) * system.dt,
                "time", config.num_fit, truth, desc)
  raise ValueError(f"unknown task {config.task!r}")


def truth_structure(task: Task, library: st.Library) -> Optional[st.Structure]:
  """The true structure in ``library``'s terms (None for real data or if it is outside the library)."""
  if task.truth is None:
    return None
  scratch = st.Library(library.states, library.keys, limits=library.limits)
  m = st.from_equations(task.truth["equations"], scratch)
  if len(scratch) != len(library):
    return None
  return m
