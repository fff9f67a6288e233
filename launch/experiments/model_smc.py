"""Experiment ``model_smc``: ModelSMC against PySINDy and N = 1 hill climbing.

Config: ``launch/configs/model_smc.py``. A run (1) samples structures with
tempered SMC (or the reference's evidence-weighted scheme), checkpointing
after every iteration (particles, weights, the evidence cache) so a killed
run resumes and ends with the same numbers; (2) runs hill climbing with the
same number of proposals; (3) fits PySINDy; (4) scores all of them on the
held-out rows with the same predictive metrics and draws the figures. The
``exact`` task instead fits every structure of a small space and compares
the frequencies of repeated SMC runs with the brute-force posterior.

Fits of new structures are batched; the batch axis is sharded over the
mesh's ``data`` axis (the batch size is rounded up to a multiple of the
number of devices).
"""

from __future__ import annotations

from absl import logging
import ml_collections
import numpy as np

from envs import ode_systems
from launch import config_schema as cs
from launch import mesh as mesh_lib
from launch.configs import common
from launch.configs import model_smc as smc_config
from launch.experiments import model_smc_csv as csv
from launch.experiments import model_smc_exact
from launch.experiments import model_smc_report as report
from launch.experiments import model_smc_sampler as sampler
from launch.experiments import model_smc_scoring as scoring
from launch.experiments import model_smc_tasks as tasks
from launch.runtime import Context, Experiment
from methods.common import hparams
from methods.model_smc import expr as ex
from methods.model_smc import fit as fit_lib
from methods.model_smc import grammar as grammar_lib
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator


# ----------------------------------------------------------------------------
# Validation: every key's type, range and choices come from the declarations
# (launch/configs/model_smc.py SECTIONS); the checks below need the task's data.


def _csv_checks(config):
  """The user's file: named errors before any fit (``(key, message)``)."""
  try:
    d = tasks.read_csv(config)
    csv.check_fit_rows(d, config.num_fit, config.data.path)
  except csv.CsvError as e:
    yield e.key, str(e)
    return
  for s in config.data.latent:
    if s in d.states or not s.isidentifier():
      yield "data.latent", f"{s!r} must be a new identifier (the observed states are {list(d.states)})"
  if config.problem.noise == "lognormal":
    bad = np.argwhere(d.y + config.problem.noise_offset <= 0)
    if len(bad):
      r, o = bad[0]
      yield "problem.noise", (f"lognormal observations must be positive; {config.data.path}: column "
                              f"{d.states[o]!r} at time {d.times[r]:g} is {d.y[r, o]:g} (use problem.noise='gaussian')")
  states = d.states + tuple(config.data.latent)
  try:
    counts = sorted((len(ex.params_of(ex.parse(b, states=states))) for b in tasks.library_of(config, states)),
                    reverse=True)
  except ex.UnsafeExpression:
    return  # named per body below
  largest = len(states) * sum(counts[:config.smc.max_terms]) + len(d.states)
  largest += len(states) if config.problem.init == "fit" else 0
  seen = int(np.isfinite(d.y[:config.num_fit]).sum())
  if seen < largest:
    yield "num_fit", (f"the {config.num_fit} fitted rows hold {seen} observations, fewer than the {largest} parameters "
                      f"of the largest structure (smc.max_terms={config.smc.max_terms} terms per equation, noise "
                      "and initial states); add rows or shrink the library / smc.max_terms")


def _checks(config):
  """Cross-field checks that need the task (each yields ``(key, message)``)."""
  if config.task == "csv":
    problems = list(_csv_checks(config))
    yield from problems
    if problems:
      return
  if config.sim.equations and config.task != "sim":
    yield "sim.equations", f"simulated equations run with task=sim (task is {config.task!r})"
  if config.task not in tasks.REAL and not (config.task == "sim" and config.sim.equations):
    if config.sim.system not in ode_systems.SYSTEMS:
      return  # named by the sim section's own check
    expected = smc_config.SIMULATED.get(config.task)
    if expected is not None and config.sim.system != expected:
      yield "sim.system", f"task {config.task!r} simulates {expected!r}; use task=sim,system={config.sim.system}"
      return
    system = ode_systems.SYSTEMS[config.sim.system]
    if config.problem.noise != system.noise and not config.sim.allow_noise_mismatch:
      yield "problem.noise", (f"{config.problem.noise!r} observation model, but {system.name!r} is simulated with "
                              f"{system.noise} noise; set problem.noise={system.noise!r} (or "
                              "sim.allow_noise_mismatch=True to fit the wrong model on purpose)")
  rows = tasks.num_rows(config) if config.task != "csv" else None
  if rows is not None and not 3 <= config.num_fit < rows:
    yield "num_fit", f"{config.num_fit} training rows; task {config.task!r} has {rows} rows (need 3 <= num_fit < {rows})"
  states = tasks.states_of(config)
  seen = set()
  for i, body in enumerate(tasks.library_of(config, states)):
    if not body.strip():
      yield f"library[{i}]", "an empty expression"
      continue
    try:
      key = ex.canonical_text(ex.parse(body, states=states))
    except ex.UnsafeExpression as e:
      yield f"library[{i}]", f"{body!r}: {e.reason} (states of task {config.task!r}: {list(states)})"
      continue
    if key in seen:
      yield f"library[{i}]", f"{body!r} repeats another body (canonical form {key!r})"
    seen.add(key)


def _sections() -> tuple[cs.Section, ...]:
  out = []
  for prefix, cls in smc_config.SECTIONS:
    if cls is fit_lib.FitConfig:
      out.append(cs.Section(prefix, cls, build=lambda c: [fit_config(c)]))
    elif prefix in ("problem", "reference"):
      out.append(cs.Section(prefix, cls, build=lambda c: []))  # built with the task's data / the smc keys
    else:
      out.append(cs.Section(prefix, cls))
  return tuple(out)


def schema() -> cs.Schema:
  constraints = {**common.BASE_CONSTRAINTS, "experiment": cs.OneOf(("model_smc",))}
  return cs.Schema(smc_config.get_config(), constraints, sections=_sections(),
                   checks=(common.mesh_check, lambda c: list(_checks(c))))


# ----------------------------------------------------------------------------
# Set-up and run.


def fit_config(config) -> fit_lib.FitConfig:
  return hparams.from_config(fit_lib.FitConfig, config.fit, num_fit=config.num_fit)


def make_evaluator(config, task: tasks.Task, library: st.Library, mesh) -> Evaluator:
  """The evidence cache; batches are sharded over ``mesh``'s data axis."""
  batch = mesh_lib.padded_size(config.fit.batch_size, mesh)
  sharding = mesh_lib.data_sharding(mesh)

  def place(x):
    return mesh_lib.global_array(x.shape, sharding, lambda idx: x[idx])

  return Evaluator(library, task.spec, fit_config(config), task.data, seed=config.seed, batch_size=batch,
                   place=place, to_host=mesh_lib.to_host)


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs the task; returns ``results.json``'s content."""
  task = tasks.build(config)
  logging.info("[model_smc %s] initial states: %s (problem.init=%r, problem.init_space=%r, noise %s)", config.task,
               task.spec.init_scale, config.problem.init, config.problem.init_space, config.problem.noise)
  library = st.Library(task.states, tasks.library_of(config, task.states))
  evaluator = make_evaluator(config, task, library, ctx.mesh)
  grammar = grammar_lib.GrammarProposal(library, max_terms=config.smc.max_terms, move_probs=config.smc.move_probs)
  if config.task == "exact":
    return model_smc_exact.run_exact(config, ctx, task, evaluator, grammar,
                                     hparams.from_config(sampler.smc.SMCConfig, config.smc))

  alg = sampler.algorithm(config, task, evaluator, grammar)
  step, arrays, meta = ctx.restore_or(alg.template())
  if meta:
    for k in meta["library"]:
      library.add(ex.parse(k, states=library.states))
    evaluator.load_state_dict(meta["evaluator"])
    logging.info("resuming model_smc from step %d (stage %s)", step, meta["stage"])
  done = bool(meta) and meta["stage"] == "done"
  if done:
    sampled = sampler.Sampled.decode(meta["sampled"], library)
  else:
    sampled = sampler.run_sampler(config, ctx, alg, evaluator, meta, arrays)

  hill = None
  if "hill_climb" in config.baselines:
    if done and meta.get("hill") is not None:
      hill = dict(meta["hill"], structure=sampler.decode_structure(meta["hill"]["structure"], library))
    else:
      hill = scoring.hill_climb(config, task, evaluator, grammar, sampled.proposals)
  if not done and config.algorithm == "tempered":  # after the baselines: their structures are in the visited set
    sampled = sampled._replace(visited=sampler.visited_summary(config, evaluator),
                               mixing=sampler.mixing_check(config, evaluator, sampled, hill))
  if not done:
    done_meta = {
        "stage": "done", "library": list(library.keys), "evaluator": evaluator.state_dict(),
        "sampled": sampled.encode(library),
        "hill": None if hill is None else {**hill, "structure": sampler.encode_structure(hill["structure"], library)},
    }
    ctx.save(len(sampled.diagnostics) + 1, alg.template(), done_meta, force=True)
  return scoring.finish(config, ctx, task, evaluator, sampled, hill)


EXPERIMENT = Experiment(
    name="model_smc",
    get_config=smc_config.get_config,
    schema=schema,
    run=run,
    summary=report.format_table,
    markdown=report.markdown_table,
)
