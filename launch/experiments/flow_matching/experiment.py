"""Experiment ``flow_matching``: latent flow matching on MNIST under an evaluation protocol fixed in advance.

Config: ``launch/configs/flow_matching.py``. Briq et al., "Exploring and
Exploiting Stability in Latent Flow Matching" (ICML 2026). The run:

1. reads the images and splits them, class-stratified, into generative /
   feature / feature-test parts (:func:`training.load_data`);
2. trains the frozen feature network and one convolutional autoencoder per
   seed (checkpoint step 1);
3. trains the groups of flows on the scaled latents, one checkpoint per chunk
   (:mod:`launch.experiments.flow_matching.training`);
4. samples every model from the same noises and evaluates
   (:mod:`~launch.experiments.flow_matching.evaluation`,
   :mod:`~launch.experiments.flow_matching.studies`).

A run killed at any moment resumes from its last checkpoint and ends with
bit-identical parameters (``results.json`` has a SHA-256 per group).
"""

from __future__ import annotations

import time

import ml_collections
import numpy as np

from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import evaluation
from launch.experiments.flow_matching import report
from launch.experiments.flow_matching import studies
from launch.experiments.flow_matching import training
from launch.runtime import Context, Experiment


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Trains every model (resuming), evaluates, writes figures; returns ``results.json``'s content."""
  start = time.perf_counter()
  hp = fm_config.hparams_of(config)
  data = training.load_data(config, hp)
  groups = training.groups_of(hp.run)
  step, state = training.restore_or_start(config, hp, groups, data, ctx)
  zs, scales = training.latents(hp, state, data)
  env = evaluation.make_env(config, hp, state, data, scales, ctx.mesh)
  state, rows = training.train_groups(config, hp, groups, state, step, zs, data.gen_y,
                                      lambda g, ema: evaluation.curve_fn(env, g, ema), ctx)
  params = {m.name: training.member_params(st, i) for g, st in zip(groups, state.groups)
            for i, m in enumerate(g.members)}
  curves = {m.name: np.asarray(c)[i] for g, c in zip(groups, state.curves) for i, m in enumerate(g.members)}
  alone = evaluation.sample_unconditional(env, groups, params)
  c2f, c2f_test = evaluation.coarse_to_fine(env, params, alone)
  lv = hp.protocol.level
  quality = {prefix: {k: evaluation.interval([alone[training.seeded(prefix, s)][k] for s in range(hp.run.seeds)], lv)
                      for k in ("fid", "kid")} for prefix in ("large", "large_alt", "small")}
  results = {
      "dataset": config.dataset, "seeds": hp.run.seeds, "num_samples": hp.protocol.num_samples,
      "splits": {"generative": len(data.gen_y), "feature": len(data.feat_y), "feature_test": len(data.test_y)},
      "latent_shape": list(zs[0].shape[1:]), "tokens": int(np.prod(zs[0].shape[1:3])) // hp.large.patch**2,
      "sampler": {"solver": hp.sampler.solver, "steps": hp.sampler.steps},
      "protocol": {"fid_margin": hp.protocol.fid_margin, "kid_margin": hp.protocol.kid_margin, "level": lv},
      **evaluation.auxiliary_scores(env, data),
      "quality": quality, "coarse_to_fine": c2f, "costs": evaluation.model_costs(env, data, params),
      "reduction": studies.reduction(env, groups, alone, curves, rows) if hp.run.reduction_fractions else [],
      "stability": studies.stability(env, groups, alone),
      "conditional": studies.conditional(env, groups, params),
      "param_digest": {g.name: training.digest(s) for g, s in zip(groups, state.groups)},
  }
  report.make_figures(results, alone, c2f_test, data, hp, ctx.writer)
  results["wall_time_s"] = time.perf_counter() - start
  return results


EXPERIMENT = Experiment(declaration=fm_config.SECTIONS, get_config=fm_config.get_config, run=run,
                        summary=report.format_tables, markdown=report.markdown, headline=report.headline,
                        inputs=lambda config: [("data_file", config.data_file)] if config.dataset == "npz" else [])
