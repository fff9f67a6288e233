"""ModelSMC fit: BFGS restarts reach SciPy's multi-start optimum, stop per structure, and are deterministic.

One compiled batch fit (pelts, the cpu preset's observation model, 4
restarts) serves every test; the reference optimum is SciPy L-BFGS-B from 6
starts with the exact gradient (the fit-quality panel's peer,
``launch.experiments.model_smc_fit_panel.ScipyPeer``).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from launch.configs import model_smc as smc_config
from launch.experiments import model_smc as smc_exp
from launch.experiments import model_smc_fit_panel as panel
from launch.experiments import model_smc_tasks as tasks
from methods.model_smc import fit as fit_lib
from methods.model_smc import structure as st
from methods.model_smc.model import StructuredModel

# The Lotka-Volterra structure and two pelts-panel structures on which the
# earlier fixed-budget Adam fit (4 restarts of 300 steps) stopped 118 and 5.5
# nats above SciPy's optimum (objective 326.7 vs 209.0, and 157.1 vs 151.6).
STRUCTURES = (
    {"hare": "a*hare - b*hare*lynx", "lynx": "c*hare*lynx - d*lynx"},
    {"hare": "-a - b*lynx^2", "lynx": "-a + b*hare*lynx + c*lynx^2"},
    {"hare": "-a*hare^2 - b*lynx^2", "lynx": "-a*lynx"},
)


@pytest.fixture(scope="module")
def pelts():
  config = smc_config.get_config("cpu,task=pelts")
  task = tasks.build(config)
  lib = st.Library(task.states, tasks.library_of(config, task.states))
  cfg = dataclasses.replace(smc_exp.fit_config(config), restarts=4, keep=4, newton_steps=1)
  model = StructuredModel(lib.bodies, task.spec)
  structures = [st.from_equations(e, lib) for e in STRUCTURES]
  signs = jnp.asarray(np.stack([m.signs(len(lib)) for m in structures]))
  keys = jax.random.split(jax.random.key(0), len(structures))
  data = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(structures),) + x.shape), task.data)
  fit = fit_lib.make_batch_fit(model, cfg)
  out = fit(signs, keys, data)
  return cfg, task, model, fit, signs, keys, data, out


def test_fit_reaches_scipy_multistart_optimum(pelts):
  cfg, task, model, _, signs, _, _, out = pelts
  peer = panel.ScipyPeer(model, cfg, task.data)
  for i in range(signs.shape[0]):
    s = np.asarray(signs[i])
    ours = peer.objective(s, np.asarray(out.phi[i]))
    _, ref = peer.fit(s, 6, seed=i)
    assert ours <= ref + 0.5, (i, ours, ref)
    assert np.isfinite(float(out.log_evidence[i])) and int(out.nonfinite_restarts[i]) == 0


def test_stopping_is_per_structure_and_stopped_entries_are_frozen(pelts):
  _, _, _, fit, signs, keys, data, out = pelts
  iters = np.asarray(out.iterations)
  assert len(set(iters.tolist())) > 1, iters  # entries stop at different iterations
  # The entry that stopped first, batched with copies of itself (the same
  # compiled function, so the loop ends earlier): bit-identical results.
  first = int(np.argmin(iters))
  n = signs.shape[0]
  same = fit(jnp.repeat(signs[first:first + 1], n, axis=0), jnp.stack([keys[first]] * n), data)
  for field in ("phi", "log_evidence", "iterations", "converged"):
    np.testing.assert_array_equal(np.asarray(getattr(same, field))[0], np.asarray(getattr(out, field))[first])


def test_fit_is_deterministic(pelts):
  _, _, _, fit, signs, keys, data, out = pelts
  again = fit(signs, keys, data)
  for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(again)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
