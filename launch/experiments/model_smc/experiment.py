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

import difflib

from absl import logging
import ml_collections
import numpy as np

from datasets import timeseries
from launch import mesh as mesh_lib
from launch import metrics
from launch.configs import model_smc as smc_config
from launch.experiments.model_smc import exact as exact_lib
from launch.experiments.model_smc import profile as profile_lib
from launch.experiments.model_smc import report
from launch.experiments.model_smc import sampler
from launch.experiments.model_smc import scoring
from launch.experiments.model_smc import tasks
from launch.runtime import Context, Experiment
from methods.model_smc import codec
from methods.model_smc import expr as ex
from methods.model_smc import grammar as grammar_lib
from methods.model_smc import pooled as pooled_lib
from methods.model_smc import smc
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator


# ----------------------------------------------------------------------------
# Validation: every key's type, range and choices come from the declarations
# (launch/configs/model_smc.py SECTIONS, with the checks that need only the
# config); the checks below need the task's data.


def _csv_checks(config):
  """The user's file: named errors before any fit (``(key, message)``)."""
  try:
    d = tasks.read_csv(config)
  except timeseries.CsvError as e:
    yield e.key, str(e)
    return
  problems = list(tasks.check_fit_rows(d, config.num_fit, config.data.path))
  if problems:
    yield from problems
    return
  latent = tuple(config.data.latent)
  for s in latent:
    if s in d.states or latent.count(s) > 1 or not ex.is_state_name(s):
      yield "data.latent", (f"{s!r} must be a new state name, listed once ({ex.STATE_NAME_RULE}); the observed "
                            f"states are {list(d.states)}")
      return
  bound = config.problem.state_bound
  for what, names, values in (("column", d.states, d.y), ("latent initial state", latent, config.data.latent_x0)):
    problem = tasks.state_bound_problem(config.data.path, what, names, values, bound) if names else None
    if problem:
      yield "problem.state_bound", problem
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
  max_terms = smc_config.SECTIONS.build(config, st.PriorConfig).max_terms
  largest = len(states) * sum(counts[:max_terms]) + len(d.states)
  largest += len(states) if config.problem.init == "fit" else 0
  seen = int(np.isfinite(d.y[:config.num_fit]).sum())
  if seen < largest:
    yield "num_fit", (f"the {config.num_fit} fitted rows hold {seen} observations, fewer than the {largest} parameters "
                      f"of the largest structure (prior.max_terms={max_terms} terms per equation, noise "
                      "and initial states); add rows or shrink the library / prior.max_terms")


CSV_ONLY = ("path", "time_column", "states", "latent", "latent_x0")  # the data.* keys that describe the user's file


def _checks(config):
  """Cross-field checks that need the task (each yields ``(key, message)``)."""
  if config.task != "csv":
    for key in CSV_ONLY:
      if config.data[key]:
        yield f"data.{key}", f"is read only with task=csv; task is {config.task!r} (give --config.task=csv)"
  if config.task == "csv":
    problems = list(_csv_checks(config))
    yield from problems
    if problems:
      return
  rows = tasks.num_rows(config) if config.task != "csv" else None
  if rows is not None and not 3 <= config.num_fit < rows:
    yield "num_fit", f"{config.num_fit} training rows; task {config.task!r} has {rows} rows (need 3 <= num_fit < {rows})"
  if config.task not in smc_config.REAL:  # the simulated data are checked against the bound in tasks.build
    system = tasks.system_of(config)
    source = "sim.x0" if config.sim.equations else f"the {config.task!r} task's system {system.name!r}"
    problem = tasks.state_bound_problem(source, "initial state", system.states, system.x0, config.problem.state_bound)
    if problem:
      yield "problem.state_bound", problem
  states = tasks.states_of(config)
  seen, bare = set(), []
  for i, body in enumerate(tasks.library_of(config, states)):
    if not body.strip():
      yield f"library[{i}]", "an empty expression"
      continue
    try:
      parsed = ex.parse(body, states=states)
      key = ex.canonical_text(parsed)
    except ex.UnsafeExpression as e:
      yield f"library[{i}]", f"{body!r}: {e.reason} (states of task {config.task!r}: {list(states)})"
      continue
    params = ex.params_of(parsed)
    if not params:
      bare.append((i, body))
    misspelt = _misspelt_state(parsed, params, states)
    if misspelt:
      yield f"library[{i}]", f"{body!r}: {misspelt}"
    if key in seen:
      yield f"library[{i}]", f"{body!r} repeats another body (canonical form {key!r})"
    seen.add(key)
  if bare:
    # A state named like the default library's parameter turns every default body into a fixed term.
    clash = sorted(set(states) & set(ex.params_of(ex.parse(st.default_bodies(())[0], states=()))))
    why = (f"the state {clash[0]!r} has the name of the default library's parameter: rename it" if clash else
           "every body carries a positive parameter, e.g. 'a*...'")
    i, body = bare[0]
    more = f" (and {len(bare) - 1} more bodies)" if len(bare) > 1 else ""
    yield f"library[{i}]", f"{body!r}{more} has no parameter, every name in it is a state of {list(states)}: {why}"


def _misspelt_state(parsed, params: tuple[str, ...], states) -> str:
  """Why a library body reads like one with a misspelt state ("" if it does not).

  Every name that is not a state is a parameter, so a misspelt state silently
  becomes one: refused are a parameter named like a state (``positon`` for
  ``position``) and a body with no state and several parameters (a constant
  that is their product, which no data can separate). ``params``: the
  body's parameters (``ex.params_of(parsed)``).
  """
  for name in params:
    close = difflib.get_close_matches(name, states, n=1, cutoff=0.75)
    if close:
      return (f"the parameter {name!r} is named like the state {close[0]!r} (a name that is not a state of "
              f"{list(states)} is a parameter): did you mean {close[0]!r}?")
  has_state = any(isinstance(n, ex.Sym) and n.kind == "state" for n in ex.walk(parsed))
  if not has_state and len(params) > 1:
    return (f"no state of {list(states)} and the parameters {list(params)}: a constant needs one parameter; is one "
            "of them a misspelt state?")
  return ""


# ----------------------------------------------------------------------------
# Set-up and run.


def make_evaluator(config, task: tasks.Task, library: st.Library, mesh) -> Evaluator:
  """The evidence cache; batches are sharded over ``mesh``'s data axis."""
  batch = mesh_lib.padded_size(config.fit.batch_size, mesh)
  sharding = mesh_lib.data_sharding(mesh)

  def place(x):
    return mesh_lib.global_array(x.shape, sharding, lambda idx: x[idx])

  return Evaluator(library, task.spec, smc_config.fit_config(config), task.data, seed=config.seed, batch_size=batch,
                   place=place, to_host=mesh_lib.to_host, mesh=mesh)


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs the task; returns ``results.json``'s content."""
  task = tasks.build(config)
  logging.info("[model_smc %s] initial states: %s (problem.init=%r, problem.init_space=%r, noise %s)", config.task,
               task.spec.init_scale, config.problem.init, config.problem.init_space, config.problem.noise)
  library = st.Library(task.states, tasks.library_of(config, task.states))
  evaluator = make_evaluator(config, task, library, ctx.mesh)
  prior = smc_config.SECTIONS.build(config, st.PriorConfig)
  grammar = grammar_lib.GrammarProposal(library, max_terms=prior.max_terms, move_probs=prior.move_probs)
  if config.task == "exact":
    return exact_lib.run_exact(config, ctx, task, evaluator, grammar, prior=prior,
                               tempering=smc_config.SECTIONS.build(config, smc.TemperingConfig),
                               final=smc_config.SECTIONS.build(config, smc.FinalConfig))

  alg = sampler.algorithm(config, task, evaluator, grammar)
  step, arrays, meta = ctx.restore_or(alg.template())
  profile = profile_lib.Profile(evaluator)
  if meta:
    for k in meta["library"]:
      library.add(ex.parse(k, states=library.states))
    evaluator.load_state_dict(meta["evaluator"])
    profile.restore(meta.get("profile"))
    logging.info("resuming model_smc from step %d (stage %s)", step, meta["stage"])
  done = bool(meta) and meta["stage"] == "done"
  if done:
    sampled = sampler.Sampled.decode(meta["sampled"], library)
  else:
    sampled = sampler.run_sampler(config, ctx, alg, evaluator, meta, arrays, profile)

  hill = None
  if "hill_climb" in config.baselines:
    if done and meta.get("hill") is not None:
      hill = dict(meta["hill"], structure=codec.decode_structure(meta["hill"]["structure"], library))
    else:
      with profile.phase("hill climbing"):
        hill = scoring.hill_climb(config, task, evaluator, grammar, sampled.proposals)
  if not done and config.algorithm == "tempered":  # after the baselines: their structures are in the visited set
    with profile.phase("averaging"):
      v = pooled_lib.visited_posterior(evaluator, prior)
      sampled = sampled._replace(visited=sampler.visited_summary(evaluator, prior, v),
                                 mixing=sampler.mixing_check(evaluator, prior, sampled, hill, v))
  if not done:
    with profile.phase("checkpoint (final)"):
      done_meta = {
          "stage": "done", "library": list(library.keys), "evaluator": evaluator.state_dict(),
          "sampled": sampled.encode(library), "profile": profile.as_dict(),
          "hill": None if hill is None else {**hill, "structure": codec.encode_structure(hill["structure"], library)},
      }
      ctx.save(len(sampled.diagnostics) + 1, alg.template(), done_meta, force=True)
  return _score(config, ctx, task, evaluator, sampled, hill, profile)


SAMPLER_RESULTS = "sampler_results.json"


class ScoringError(RuntimeError):
  """Scoring failed after the sampler finished; its results are on disk (the message names the file)."""


def _score(config, ctx: Context, task, evaluator, sampled, hill, profile: profile_lib.Profile) -> dict:
  """Writes the sampler's own results, then scores every method; a failure names what is kept on disk.

  ``sampler_results.json`` (the structures found, their masses, the mixing
  check, hill climbing's structure, the truth's rank) needs no fit beyond
  the sampler's; the sampler's final checkpoint is saved before it, so a
  rerun in the same workdir goes straight to scoring.
  """
  path = ctx.writer.path(SAMPLER_RESULTS)
  if ctx.writer.primary:
    metrics.write_json_atomic(path, {**scoring.sampler_summary(config, task, evaluator, sampled, hill),
                                     "profile": profile.as_dict()})
  logging.info("[model_smc %s] the sampler's results are in %s; scoring", config.task, path)
  try:
    results = scoring.finish(config, ctx, task, evaluator, sampled, hill, profile)
    results["profile"] = profile.as_dict()
    _log_profile(config.task, results["profile"])
    return results
  except Exception as e:  # pylint: disable=broad-except  (re-raised with what survives named)
    kept = (f"and its final checkpoint in {ctx.workdir} (rerunning there retries the scoring only)"
            if ctx.checkpointer is not None else "(checkpointing is off: a rerun samples again)")
    raise ScoringError(f"scoring failed after the sampler finished ({type(e).__name__}: {e}); the sampler's "
                       f"results are in {path} {kept}") from e


def _log_profile(task: str, table: dict) -> None:
  """One log line per phase: seconds, fits, compiles (``results.json`` keeps the table as ``profile``)."""
  for name, row in table.items():
    logging.info("[model_smc %s] profile %-20s %8.1f s: fits %.1f s (%d calls), first fit calls %.1f s, "
                 "transfers %.1f s, checkpoints %.1f s, other %.1f s; %d compiles (%.1f s)", task, name,
                 row["seconds"], row["fit_seconds"], row["fit_calls"], row["first_call_seconds"],
                 row["transfer_seconds"], row["checkpoint_seconds"], row.get("other_seconds", 0.0),
                 row["compiles"], row["compile_seconds"])


EXPERIMENT = Experiment(
    declaration=smc_config.SECTIONS,
    get_config=smc_config.get_config,
    run=run,
    summary=report.format_table,
    markdown=report.markdown_table,
    headline=report.headline_table,
    checks=(_checks,),
    inputs=lambda config: [("data.path", config.data.path)] if config.task == "csv" else [],
)
