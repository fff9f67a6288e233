"""``run(config, workdir)``: validate, set up, run one experiment, write results.

The launcher (``launch.main``), the demo, the tests and the colabs all go
through :func:`run`, so every run gets the same checks and the same files:
``config.json``, ``metrics.jsonl``, ``results.json``, PNG figures and
``checkpoints/``.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from absl import logging
import jax
import ml_collections

from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import mesh as mesh_lib
from launch import metrics
from launch import registry
from launch.runtime import Context

# Keys that may change between a run and its resumption.
RESUMABLE_KEYS = ("checkpoint", "mesh")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ``ConfigError`` naming every bad key of ``config``."""
  if "experiment" not in config:
    raise config_schema.ConfigError(
        [f"missing key 'experiment'; registered: {sorted(registry.EXPERIMENTS)}"]
    )
  if config.experiment not in registry.EXPERIMENTS:
    raise config_schema.ConfigError(
        [f"'experiment': {config.experiment!r} is not registered; allowed: {sorted(registry.EXPERIMENTS)}"]
    )
  config_schema.validate(config, registry.get(config.experiment).schema())


def _check_same_run(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Refuses to resume a workdir that holds a run of a different config."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  with open(path) as f:
    try:
      old = json.load(f)
    except json.JSONDecodeError as e:
      raise config_schema.ConfigError([f"{path} is not valid JSON ({e}); use a new --workdir"]) from e
  new = json.loads(json.dumps(metrics._jsonable(config.to_dict())))  # pylint: disable=protected-access
  old_f, new_f = (config_schema.flatten(d) for d in (old, new))
  differ = sorted(
      k for k in set(old_f) | set(new_f)
      if k.split(".")[0] not in RESUMABLE_KEYS and old_f.get(k) != new_f.get(k)
  )
  if differ:
    raise config_schema.ConfigError(
        [f"{workdir} holds a run with a different config (keys {differ}); "
         "use a new --workdir to start another run (nothing was changed)"]
    )


def run(config: ml_collections.ConfigDict, workdir: str, *, log_summary: bool = True) -> dict:
  """Runs ``config`` in ``workdir`` (resuming from its checkpoints) and returns the results."""
  validate(config)
  metrics.quiet_library_logs()
  experiment = registry.get(config.experiment)
  primary = jax.process_index() == 0
  _check_same_run(config, workdir)
  writer = metrics.Writer(workdir, primary=primary)
  writer.write_config(config)
  mesh = mesh_lib.make_mesh(config.mesh.data)
  checkpointer = None
  if config.checkpoint.enabled:
    checkpointer = ckpt_lib.Checkpointer(
        os.path.join(os.path.abspath(workdir), "checkpoints"),
        max_to_keep=config.checkpoint.max_to_keep,
        every=config.checkpoint.every,
    )
  logging.info("running %s in %s on %d devices (%d processes)",
               config.experiment, workdir, mesh.devices.size, jax.process_count())
  try:
    results = experiment.run(config, Context(workdir, writer, mesh, checkpointer))
  finally:
    if checkpointer is not None:
      checkpointer.close()
  writer.write_results(results)
  if log_summary and primary:
    logging.info("results of %s:\n%s", config.experiment, experiment.summary(results))
  return results
