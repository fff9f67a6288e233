"""``run(config, workdir)``: validate, set up, run one experiment, write results.

The launcher (``launch.main``), the demo, the tests and the colabs all go
through :func:`run`, so every run gets the same checks and the same files:
``config.json``, ``metrics.jsonl``, ``results.json``, ``provenance.json``
(the commit and config hash it was produced from), PNG figures and
``checkpoints/``.
"""

from __future__ import annotations

import hashlib
import json
import os

from absl import logging
import jax
import ml_collections

from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import errors
from launch import mesh as mesh_lib
from launch import metrics
from launch import provenance
from launch import registry
from launch.runtime import Context

# Keys that may change between a run and its resumption.
RESUMABLE_KEYS = ("checkpoint", "mesh")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ``ConfigError`` naming every bad key of ``config``."""
  if "experiment" not in config:
    raise config_schema.ConfigError(
        [f"missing key 'experiment'; registered: {sorted(registry.NAMES)}"]
    )
  if config.experiment not in registry.NAMES:
    raise config_schema.ConfigError(
        [f"'experiment': {config.experiment!r} is not registered; allowed: {sorted(registry.NAMES)}"]
    )
  config_schema.validate(config, registry.get(config.experiment).schema())


def _comparable(config: ml_collections.ConfigDict) -> dict:
  """Flattened, JSON-normalised config without the keys that may change on resumption."""
  flat = config_schema.flatten(json.loads(json.dumps(metrics._jsonable(config.to_dict()))))  # pylint: disable=protected-access
  return {k: v for k, v in flat.items() if k.split(".")[0] not in RESUMABLE_KEYS}


def config_hash(config: ml_collections.ConfigDict) -> str:
  """SHA-256 of the config's run-defining keys (recorded in every checkpoint step)."""
  text = json.dumps(_comparable(config), sort_keys=True, default=lambda _: "{}")  # {} marks a sub-dict
  return hashlib.sha256(text.encode()).hexdigest()


def _check_workdir(workdir: str) -> None:
  """Raises ``WorkdirError`` if ``workdir`` cannot be created and written."""
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f".probe{os.getpid()}")
    with open(probe, "w"):
      pass
    os.remove(probe)
  except OSError as e:
    raise errors.WorkdirError(f"--workdir={workdir} is not usable ({e.strerror or e}); pass another --workdir") from e


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
  old_f = {k: v for k, v in config_schema.flatten(old).items() if k.split(".")[0] not in RESUMABLE_KEYS}
  new_f = _comparable(config)
  differ = sorted(k for k in set(old_f) | set(new_f) if old_f.get(k) != new_f.get(k))
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
  if primary:
    _check_workdir(workdir)
  _check_same_run(config, workdir)
  mesh = mesh_lib.make_mesh(config.mesh.data)
  checkpointer = None
  if config.checkpoint.enabled:
    checkpointer = ckpt_lib.Checkpointer(
        os.path.join(os.path.abspath(workdir), "checkpoints"),
        max_to_keep=config.checkpoint.max_to_keep,
        every=config.checkpoint.every,
        config_hash=config_hash(config),
    )
  writer = metrics.Writer(workdir, primary=primary)
  try:  # verifies the checkpoints (and their config) before any compute
    resumable = checkpointer is not None and checkpointer.latest_step() is not None
  except BaseException:
    checkpointer.close()
    raise
  if not resumable:
    writer.reset_metrics()  # a run that starts from scratch does not append to an old run's lines
  writer.write_config(config)
  logging.info("running %s in %s on %d devices (%d processes)",
               config.experiment, workdir, mesh.devices.size, jax.process_count())
  try:
    results = experiment.run(config, Context(workdir, writer, mesh, checkpointer))
  finally:
    if checkpointer is not None:
      checkpointer.close()
  writer.write_results(results)
  if primary:
    metrics.write_json_atomic(writer.path("provenance.json"),
                              {**provenance.state(), "config_hash": config_hash(config)})
  if log_summary and primary:
    logging.info("results of %s:\n%s", config.experiment, experiment.summary(results))
  return results
