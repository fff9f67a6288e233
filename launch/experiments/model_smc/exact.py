"""The ``exact`` task of ``model_smc``: SMC frequencies against brute force.

Every structure of a small space (the damped oscillator with two bodies:
81 structures) is fitted, so ``p(m | x) ∝ p(m) Z(m)`` is known exactly for
the very ``Z`` the sampler uses. ``exact.repeats`` independent tempered SMC
runs then estimate each structure's mass; the results report, per
structure, the mean SMC mass, its standard error over runs and the z-score,
the total variation distance, and the SMC normaliser estimates against
``log sum_m p(m) Z(m)``. Each finished run is checkpointed.
"""

from __future__ import annotations

import math
import time

from absl import logging
import jax
import numpy as np

from launch.experiments.model_smc import figures
from launch.experiments.model_smc import report
from methods.model_smc import pooled
from methods.model_smc import smc
from methods.model_smc import structure as st


def run_exact(config, ctx, task, evaluator, grammar, *, prior: st.PriorConfig, tempering: smc.TemperingConfig,
              final: smc.FinalConfig) -> dict:
  """Brute force over the whole space, then ``exact.repeats`` SMC runs."""
  space = st.enumerate_space(len(evaluator.library), len(evaluator.library.states), prior.max_terms)
  repeats = config.exact.repeats
  step, arrays, meta = ctx.restore_or({"freqs": np.zeros((repeats, len(space))),
                                       "log_norm": np.zeros((repeats,))})
  if meta:
    evaluator.load_state_dict(meta["evaluator"])
  t0 = time.perf_counter()
  log_z = evaluator.evaluate(space)
  k_all = len(evaluator.library)
  lp = np.array([prior.log_prior(m, k_all) for m in space])
  joint = lp + log_z
  log_norm_exact = float(np.logaddexp.reduce(joint))
  exact = np.exp(joint - log_norm_exact)
  keys = [evaluator.key(m) for m in space]
  index = {k: i for i, k in enumerate(keys)}
  freqs = np.asarray(arrays["freqs"], np.float64)
  log_norms = np.asarray(arrays["log_norm"], np.float64)
  iterations = list(meta["iterations"]) if meta else []
  for r in range(step, repeats):
    state = pooled.run(jax.random.fold_in(jax.random.key(config.seed), r), evaluator, grammar, prior=prior,
                       tempering=tempering, final=final)
    for k, v in smc.run_mass(state, evaluator.key).items():
      freqs[r, index[k]] = v
    log_norms[r] = state.log_normalizer
    iterations.append(state.iteration)
    ctx.writer.log(r + 1, log_normalizer=state.log_normalizer, iterations=state.iteration,
                   map_mass=float(freqs[r, int(np.argmax(exact))]))
    logging.info("[model_smc exact] run %d/%d: %d tempering steps, log normaliser %.3f", r + 1, repeats,
                 state.iteration, state.log_normalizer)
    ctx.save(r + 1, {"freqs": freqs, "log_norm": log_norms},
             {"evaluator": evaluator.state_dict(), "iterations": iterations}, force=r + 1 == repeats)
  mean = freqs.mean(0)
  se = freqs.std(0, ddof=1) / math.sqrt(repeats)
  z = (mean - exact) / np.maximum(se, 1e-12)
  relevant = (exact > 1e-3) | (mean > 1e-3)
  order = np.argsort(-exact)
  table = [{"key": keys[i], "exact": float(exact[i]), "smc": float(mean[i]), "se": float(se[i]),
            "z": float(z[i]) if relevant[i] else 0.0, "log_evidence": report.finite_or_text(log_z[i])}
           for i in order if exact[i] > 1e-4 or mean[i] > 1e-4]
  results = {
      "experiment": "model_smc", "task": task.name, "dataset": task.dataset, "citation": task.citation,
      "algorithm": config.algorithm, "proposal": config.proposal, "evidence": config.fit.evidence,
      "num_particles": tempering.num_particles, "states": list(task.states), "library": list(evaluator.library.keys),
      "exact": {
          "num_structures": len(space), "repeats": repeats, "table": table,
          "max_abs_z": float(np.max(np.abs(z[relevant]))) if relevant.any() else 0.0,
          "total_variation": float(0.5 * np.abs(mean - exact).sum()),
          "log_normalizer_exact": log_norm_exact, "log_normalizer_smc": float(log_norms.mean()),
          "log_normalizer_se": float(log_norms.std(ddof=1) / math.sqrt(repeats)),
          "tempering_steps": iterations, "wall_time_s": time.perf_counter() - t0,
      },
      "fit_health": evaluator.fit_health(keys),
  }
  failed = figures.make_figures(results, ctx.writer, None, None, "", ())
  if failed:
    results["figure_errors"] = failed
  return results
