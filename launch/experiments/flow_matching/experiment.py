"""Experiment ``flow_matching``: stability of latent flow matching, coarse-to-fine sampling, data reduction.

Config: ``launch/configs/flow_matching.py``. Briq et al., "Exploring and
Exploiting Stability in Latent Flow Matching" (ICML 2026). The run:

1. prepares the TFDS builder ``small_images`` and reads the train/test split;
2. trains the feature classifier and the latent autoencoder (checkpoint step 1);
3. trains the groups of velocity models, each chunk checkpointed
   (:mod:`launch.experiments.flow_matching.training`);
4. samples every model from identical noise and evaluates
   (:mod:`launch.experiments.flow_matching.evaluation`).

A run killed at any moment resumes from its last checkpoint and ends with
bit-identical parameters (``results.json`` has a SHA-256 per group). A NaN in
a loss stops the run naming the model and training step; the last good
checkpoint is kept.
"""

from __future__ import annotations

import time

import ml_collections
import numpy as np

from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import evaluation
from launch.experiments.flow_matching import report
from launch.experiments.flow_matching import training
from launch.runtime import Context, Experiment
from methods import flow_matching as fm


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Trains every group (resuming), evaluates, writes figures; returns ``results.json``'s content."""
  start = time.perf_counter()
  hp = fm_config.hparams_of(config)
  data = training.load_data(config, ctx.workdir)
  groups = training.groups_of(hp.run)
  side = data["train_x"].shape[1] // 2**hp.autoencoder.downsample
  latent_shape = (side, side, hp.autoencoder.latent_channels)
  step, state = training.restore_or_start(config, hp, groups, data, latent_shape, ctx)
  aux = state.aux
  z_train, scale = training.latents_of(hp, aux, data["train_x"])
  _, features = fm.auxiliary.classify(aux.classifier, data["train_x"], cfg=hp.classifier)
  states, subsets = training.train_groups(config, hp, groups, state, step, latent_shape, z_train * scale,
                                          data["train_y"], np.asarray(features), ctx)
  results = evaluation.evaluate(config, hp, groups, states, aux, data, z_train, scale, subsets, ctx)
  results["param_digest"] = {g.name: training.digest(s) for g, s in zip(groups, states)}
  results["wall_time_s"] = time.perf_counter() - start
  return results


EXPERIMENT = Experiment(declaration=fm_config.SECTIONS, get_config=fm_config.get_config, run=run,
                        summary=report.format_tables, markdown=report.markdown, headline=report.headline)
