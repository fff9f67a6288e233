"""``run(config, workdir)``: validate, set up, run one experiment, write results.

The launcher (``launch.main``), the demo, the tests and the colabs all go
through :func:`run`, so every run gets the same checks and the same files:
``config.json``, ``metrics.jsonl``, ``results.json``, ``provenance.json``
(the commit, config hash and input-file digests it was produced from), PNG
figures and ``checkpoints/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from typing import Optional

from absl import logging
import jax
from jax.experimental import multihost_utils
import jaxlib
import ml_collections

from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import errors
from launch import mesh as mesh_lib
from launch import metrics
from launch import provenance
from launch import registry
from launch.runtime import Context
from launch.runtime import Experiment

# Keys that may change between a run and its resumption.
RESUMABLE_KEYS = ("checkpoint", "mesh")
# What a run whose input files changed since its newest checkpoint does (``run``'s ``on_input_change``).
ON_INPUT_CHANGE = ("refuse", "restart")
# The files a run leaves in its workdir (besides ``*.png`` figures); a restart moves them to SUPERSEDED.
RUN_FILES = ("checkpoints", "checkpoints.corrupt", "config.json", "metrics.jsonl", "results.json",
             "provenance.json")
SUPERSEDED = "superseded"


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


def _started(workdir: str) -> bool:
  """Whether ``workdir`` holds a run that got somewhere: a metrics line, a checkpoint step or ``results.json``.

  A run without checkpoints that was killed leaves only its metrics lines;
  they count, so another config never replaces them.
  """
  if os.path.exists(os.path.join(workdir, "results.json")):
    return True
  lines = os.path.join(workdir, "metrics.jsonl")
  if os.path.exists(lines) and os.path.getsize(lines) > 0:
    return True
  directory = os.path.join(workdir, "checkpoints")
  return os.path.isdir(directory) and any(name.isdigit() for name in os.listdir(directory))


def _check_same_run(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Refuses to resume a workdir that holds a run of a different config.

  The ``config.json`` of a run that never got to a metrics line, a checkpoint or
  a result (it stopped on a missing file, say) binds nothing: the corrected command may
  run in the same workdir.
  """
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path) or not _started(workdir):
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


def _host_cores() -> int:
  """The cores this process may run on (its affinity where the OS has one)."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def machine() -> dict:
  """What a compiled program depends on beyond the code: JAX's versions, the devices and the host's cores.

  Recorded in ``provenance.json``. XLA's CPU backend spreads work over as
  many threads as the host has cores, so a run reproduces bit for bit on the
  same device and core counts, and elsewhere within its sampling error
  (``docs/model_smc.md``, "Reproducibility across machines").
  """
  return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "backend": jax.default_backend(),
          "devices": jax.device_count(), "processes": jax.process_count(),
          "device_kind": jax.devices()[0].device_kind, "host_cores": _host_cores(),
          "host_machine": platform.machine(), "python": platform.python_version()}


def input_digests(experiment: Experiment, config: ml_collections.ConfigDict) -> dict[str, str]:
  """``{path: SHA-256}`` of the user's files the run reads (``Experiment.inputs``).

  A path that does not exist is left out: the experiment reports it in its
  own words (and a file recorded by a checkpoint that has since gone counts as
  changed).

  Raises:
    DataError: naming the config key and the path of a file that cannot be read.
  """
  out = {}
  for key, path in experiment.input_files(config):
    if not os.path.exists(path):
      continue
    try:
      out[path] = ckpt_lib.file_digest(path)
    except OSError as e:
      raise errors.DataError(f"'{key}': cannot read {path} ({e.strerror or e})") from e
  return out


def _supersede(workdir: str, changed: list[str]) -> str:
  """Moves the previous run's files, unmodified, to ``<workdir>/superseded/<n>/``; returns that folder."""
  base = os.path.join(workdir, SUPERSEDED)
  n = 1
  while os.path.exists(os.path.join(base, str(n))):
    n += 1
  dest = os.path.join(base, str(n))
  os.makedirs(dest)
  for name in sorted(os.listdir(workdir)):
    if name in RUN_FILES or name.endswith(".png"):
      os.replace(os.path.join(workdir, name), os.path.join(dest, name))
  metrics.write_json_atomic(os.path.join(dest, "superseded.json"), {"changed_inputs": changed})
  return dest


def _open_checkpoints(config: ml_collections.ConfigDict, workdir: str, inputs: dict[str, str],
                      on_input_change: str) -> Optional[ckpt_lib.Checkpointer]:
  """The run's checkpointer, its newest step verified before any compute (``None``: checkpoints off).

  A newest step made from other input files is refused, or with
  ``on_input_change="restart"`` the previous run is moved aside and this one
  starts from step 0.
  """
  if not config.checkpoint.enabled:
    return None

  def make():
    return ckpt_lib.Checkpointer(
        os.path.join(os.path.abspath(workdir), "checkpoints"), max_to_keep=config.checkpoint.max_to_keep,
        every=config.checkpoint.every, config_hash=config_hash(config), inputs=inputs)

  checkpointer = make()
  try:
    checkpointer.latest_step()
    return checkpointer
  except ckpt_lib.InputsChangedError as e:
    checkpointer.close()
    if on_input_change != "restart":
      raise
    changed = e.changed
  except BaseException:
    checkpointer.close()
    raise
  if jax.process_index() == 0:
    dest = _supersede(workdir, changed)
    logging.warning("input file %s changed since the last checkpoint; the previous run was moved, unmodified, "
                    "to %s and this one starts over", ", ".join(changed), dest)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices("launch.runner: previous run superseded")
  return make()


def run(config: ml_collections.ConfigDict, workdir: str, *, log_summary: bool = True,
        on_input_change: str = "refuse") -> dict:
  """Runs ``config`` in ``workdir`` (resuming from its checkpoints) and returns the results.

  Args:
    config: the experiment's config (validated first).
    workdir: where the run's files go; a workdir holding this run resumes.
    log_summary: log the experiment's summary table at the end.
    on_input_change: what to do when an input file of the run (see
      ``Experiment.inputs``) has changed since the newest checkpoint:
      ``"refuse"`` (an :class:`launch.checkpoint.InputsChangedError` naming
      the file; nothing is changed) or ``"restart"`` (the previous run's files
      are moved, unmodified, to ``<workdir>/superseded/<n>/`` and the run
      starts from step 0).
  """
  if on_input_change not in ON_INPUT_CHANGE:
    raise ValueError(f"on_input_change={on_input_change!r}; allowed: {list(ON_INPUT_CHANGE)}")
  validate(config)
  metrics.quiet_library_logs()
  experiment = registry.get(config.experiment)
  primary = jax.process_index() == 0
  if primary:
    _check_workdir(workdir)
  _check_same_run(config, workdir)
  inputs = input_digests(experiment, config)
  mesh = mesh_lib.make_mesh(config.mesh.data)
  checkpointer = _open_checkpoints(config, workdir, inputs, on_input_change)
  try:  # the checkpointer is closed whatever stops the run, before the interpreter exits
    writer = metrics.Writer(workdir, primary=primary)
    if checkpointer is None or checkpointer.latest_step() is None:
      writer.reset_metrics()  # a run that starts from scratch does not append to an old run's lines
    writer.write_config(config)
    logging.info("running %s in %s on %d devices (%d processes)",
                 config.experiment, workdir, mesh.devices.size, jax.process_count())
    results = experiment.run(config, Context(workdir, writer, mesh, checkpointer))
  finally:
    if checkpointer is not None:
      checkpointer.close()
  writer.write_results(results)
  if primary:
    metrics.write_json_atomic(writer.path("provenance.json"),
                              {**provenance.state(), "config_hash": config_hash(config), "inputs": inputs,
                               "machine": machine()})
  if log_summary and primary:
    logging.info("results of %s:\n%s", config.experiment, experiment.summary(results))
  return results
