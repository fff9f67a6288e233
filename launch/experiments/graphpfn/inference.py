"""In-context prediction with a trained ``graphpfn`` run: restore its newest checkpoint, predict on any graph.

After ``python -m launch.main --config=launch/configs/graphpfn.py:<preset> --workdir=W``::

  step, state = inference.restore(W, config)
  batch = batching.collate([graph], buckets=hp.buckets, num_features=hp.model.num_features,
                           num_classes=hp.model.num_classes)
  pred = evaluation.predict(state.train.params, batch, state.borders, model_hp=hp.model)

``graph`` is the dict of :mod:`methods.graphpfn.batching` (a user's own graph,
``datasets.graphs.real_tasks.karate_task()``, or a Planetoid task).
"""

from __future__ import annotations

import os

from launch import checkpoint as ckpt_lib
from launch import mesh as mesh_lib
from launch.configs import graphpfn as gcfg
from launch.experiments.graphpfn import pretrain


def restore(workdir: str, config) -> tuple[int, pretrain.RunState]:
  """``(step, state)`` of the run in ``workdir`` (its newest checkpoint that verifies), on one device.

  Args:
    workdir: the run's workdir (holds ``checkpoints/``).
    config: the run's config (``get_config(arg)``, with the run's overrides).

  Raises:
    CheckpointError: ``workdir`` holds no checkpoint of this config that loads.
  """
  hp = gcfg.hparams_of(config)
  points = pretrain.curve_steps(hp.train.total_steps, hp.run.curve_points)
  target = pretrain.initial_state(hp, config.seed, mesh_lib.make_mesh(1), len(points))
  with ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")) as ck:
    step, state, _ = ck.restore(target)
  return step, state
