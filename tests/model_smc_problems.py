"""Small ModelSMC problems for the tests of ``methods/model_smc``, built without the launcher.

Each problem is built from ``envs``, ``datasets`` and ``methods`` alone, with
the observation model, prior and fit settings of the ``model_smc`` config's
task and preset that its docstring names (``launch/configs/model_smc.py``),
written out here.
"""

import dataclasses
import math
from typing import NamedTuple, Optional

import jax
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import jax.numpy as jnp
import numpy as np

from datasets import population
from envs import ode_systems
from methods.model_smc import fit as fit_lib
from methods.model_smc import model as mdl
from methods.model_smc import problems
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator

# The cpu preset's observation model and priors, and its fit (the other presets change the fit's budget).
CPU_PROBLEM = dict(substeps=5, noise_prior_loc=math.log(0.25), noise_prior_scale=0.5, state_bound=1e4)
CPU_FIT = dict(newton_steps=2, num_val=3)
SMOKE_FIT = dict(newton_steps=1, num_val=3, restarts=2, steps=60, batch_size=16)


class Problem(NamedTuple):
  """A task's data and settings: what ``launch.experiments.model_smc.tasks.build`` would give."""

  spec: mdl.ProblemSpec
  data: mdl.Data
  library: st.Library
  prior: st.PriorConfig
  fit: fit_lib.FitConfig
  truth: Optional[st.Structure] = None  # the true structure in the library's terms (simulated data)

  @property
  def num_fit(self) -> int:
    return self.fit.num_fit


def _simulated(system, *, num_points=None, noise_scale=None, library=None, prior=None, fit=None,
               **spec) -> Problem:
  spec = problems.spec_for(system, **{**CPU_PROBLEM, **spec})
  data = problems.simulate(jax.random.key(0), system, spec, num_points=num_points, noise_scale=noise_scale)
  lib = st.Library(system.states, library or system.library or st.default_bodies(system.states))
  truth = problems.truth_structure(problems.unit_coefficients(system)["equations"], lib)
  return Problem(spec, data, lib, prior or st.PriorConfig(), fit, truth)


def oscillator() -> Problem:
  """``smoke,task=exact``: the damped oscillator with two bodies (81 structures), 12 rows, noise sd 0.3."""
  return _simulated(ode_systems.DAMPED_OSCILLATOR, num_points=12, noise_scale=0.3, substeps=4, noise="gaussian",
                    init="fixed", param_prior_loc=0.0, param_prior_scale=1.0, noise_prior_loc=math.log(0.1),
                    noise_prior_scale=0.5, state_bound=1e3, prior=st.PriorConfig(p_include=0.5, max_terms=2),
                    fit=fit_lib.FitConfig(num_fit=12, **SMOKE_FIT))


def num_fit(system: ode_systems.OdeSystem) -> int:
  """Rows fitted of a simulated task: all but the last quarter."""
  return system.num_points - max(1, system.num_points // 4)


def lotka_volterra(**fit) -> Problem:
  """``cpu,task=lv_sim``: simulated Lotka-Volterra (21 rows, 16 fitted); ``fit`` overrides the fit's keys."""
  system = ode_systems.LOTKA_VOLTERRA
  return _simulated(system, fit=fit_lib.FitConfig(num_fit=num_fit(system), **{**CPU_FIT, **fit}))


def pelts() -> Problem:
  """``cpu,task=pelts``: Hudson's Bay hare and lynx pelts, 1900-1915 fitted."""
  table = population.load_pelts()
  states = ("hare", "lynx")
  spec = mdl.ProblemSpec(states=states, observed=(0, 1), dt=1.0, **CPU_PROBLEM)
  data = mdl.Data(jnp.asarray(table.values, jnp.float32), jnp.asarray(table.values[0], jnp.float32))
  return Problem(spec, data, st.Library(states, st.default_bodies(states)), st.PriorConfig(),
                 fit_lib.FitConfig(num_fit=16, **CPU_FIT))


def flu() -> Problem:
  """``cpu,task=flu``: the 1978 boarding-school influenza (S latent), t = 0 and days 1-10 fitted."""
  table = population.load_influenza()
  y = np.concatenate([np.full((1, 2), np.nan), table.values / 100.0], axis=0)
  x0 = np.array([(population.INFLUENZA_POPULATION - 1) / 100.0, 0.01, 0.0])
  spec = mdl.ProblemSpec(states=("S", "I", "C"), observed=(1, 2), dt=1.0, **{
      **CPU_PROBLEM, "noise_offset": 0.01, "init": "fixed", "param_prior_loc": math.log(0.3),
      "param_prior_scale": 1.5, "state_bound": 100.0})
  data = mdl.Data(jnp.asarray(y, jnp.float32), jnp.asarray(x0, jnp.float32))
  return Problem(spec, data, st.Library(spec.states, ("a*S*I", "a*S", "a*I", "a*C")),
                 st.PriorConfig(max_terms=2), fit_lib.FitConfig(num_fit=11, **CPU_FIT))


def evaluator(problem: Problem, *, devices: int = 1, **fit) -> Evaluator:
  """The evidence cache of ``problem`` (``fit`` overrides its fit's keys), batches sharded over ``devices``."""
  mesh = jax.make_mesh((devices,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:devices])
  sharding = NamedSharding(mesh, PartitionSpec("data"))
  cfg = dataclasses.replace(problem.fit, **fit)
  batch = -(-cfg.batch_size // devices) * devices

  def place(x):
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

  return Evaluator(problem.library, problem.spec, cfg, problem.data, batch_size=batch, place=place,
                   to_host=lambda tree: jax.tree.map(np.asarray, tree), mesh=mesh)
