"""Orbax checkpoints: save, verify, restore onto a mesh, resume, refuse non-finite states.

:class:`Checkpointer` wraps ``orbax.checkpoint.CheckpointManager`` with the
project's rules:

* a state is written only if every floating-point leaf is finite; otherwise
  :class:`NonFiniteError` names the step and the offending leaves and the
  previous (good) checkpoints stay untouched;
* every saved step carries ``checksum.json`` (SHA-256 of every file of the
  step, and the hash of the config it was written under), written after the
  data; a step whose files do not match -- flipped bytes, truncation, a kill
  before the checksum was written -- is reported in one line naming the step
  and moved aside to ``<directory>/../checkpoints.corrupt/`` (never deleted),
  and the newest step that verifies is used; "last good" only ever names a
  verified step;
* a step written under a different config is refused (:class:`CheckpointError`),
  even when the workdir's ``config.json`` is gone;
* every step records the SHA-256 of each input file the run was made from
  (the files an experiment declares, ``Experiment.inputs``); a resume whose
  files differ is refused (:class:`InputsChangedError`, naming the files), so
  a run never mixes old and new data;
* restore targets are abstract trees (``jax.eval_shape`` + shardings) so that
  arrays come back sharded as they were saved, on one process or many;
* a verified checkpoint that still fails to restore (or restores NaN/Inf) is
  reported with its path and the next older one is tried.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import Any, Optional

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from launch import errors
from launch import mesh as mesh_lib

CHECKSUM_FILE = "checksum.json"


class NonFiniteError(errors.UserError, FloatingPointError):
  """A state with NaN/Inf values; it was not saved."""

  def __init__(self, step: int, leaves: list[str], last_good: Optional[int]):
    self.step, self.leaves, self.last_good = step, leaves, last_good
    kept = f"the last good checkpoint (step {last_good}) is kept" if last_good is not None else "nothing was saved"
    super().__init__(f"non-finite values at step {step} in {', '.join(leaves)}; {kept}")


class CheckpointError(errors.UserError, RuntimeError):
  """No checkpoint could be restored, or one belongs to a different config."""


class InputsChangedError(CheckpointError):
  """A checkpoint was made from input files whose contents have changed since.

  Attributes:
    step: the checkpoint step.
    changed: the paths whose digests differ (or that were added or removed).
  """

  def __init__(self, step: int, directory: str, changed: list[str]):
    self.step, self.changed = step, changed
    super().__init__(
        f"input file {', '.join(changed)} changed since checkpoint step {step} in {directory} was written; "
        "the run would mix old and new data: restore the file, use a new --workdir, or rerun with "
        "--on_input_change=restart (the old run is kept in <workdir>/superseded/)"
    )


def tree_digest(tree) -> str:
  """SHA-256 of every leaf's bytes of a pytree (bit-identity across runs, resumes and device counts)."""
  h = hashlib.sha256()
  for leaf in jax.tree.leaves(mesh_lib.to_host(tree)):
    h.update(np.ascontiguousarray(leaf).tobytes())
  return h.hexdigest()


def file_digest(path: str) -> str:
  """SHA-256 of a file's bytes, or of every file under a directory (names and bytes)."""
  if os.path.isdir(path):
    return step_digest(path)
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def step_digest(path: str) -> str:
  """SHA-256 over the relative names and bytes of every file under ``path`` (but the checksum)."""
  h = hashlib.sha256()
  for root, dirs, files in os.walk(path):
    dirs.sort()
    for name in sorted(files):
      full = os.path.join(root, name)
      rel = os.path.relpath(full, path)
      if rel == CHECKSUM_FILE:
        continue
      h.update(f"{rel}\0{os.path.getsize(full)}\0".encode())
      with open(full, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
          h.update(block)
      h.update(b"\0")
  return h.hexdigest()


def _seal(files_digest: str, config_hash: Optional[str], inputs: Optional[dict] = None) -> str:
  """The recorded checksum: the files' digest bound to the config hash and the input digests.

  A flipped byte in either record is corruption, not a different config or data.
  Steps without an input record (``inputs`` None or empty) seal as before.
  """
  text = f"{files_digest}:{config_hash}"
  if inputs:
    text += ":" + json.dumps(inputs, sort_keys=True)
  return hashlib.sha256(text.encode()).hexdigest()


def _log_weight_paths(tree: Any, prefix: tuple = ()) -> set[str]:
  """Paths of leaves declared as log-weights: fields named in a NamedTuple's ``LOG_WEIGHTS``."""
  out: set[str] = set()
  if isinstance(tree, tuple) and hasattr(tree, "_fields"):
    declared = set(getattr(type(tree), "LOG_WEIGHTS", ()))
    for name, value in zip(tree._fields, tree):
      if name in declared:
        out.add("/".join(prefix + (name,)))
      out |= _log_weight_paths(value, prefix + (name,))
  elif isinstance(tree, dict):
    for k, v in tree.items():
      out |= _log_weight_paths(v, prefix + (str(k),))
  elif isinstance(tree, (list, tuple)):
    for i, v in enumerate(tree):
      out |= _log_weight_paths(v, prefix + (str(i),))
  return out


def non_finite_leaves(tree: Any) -> list[str]:
  """Paths (``a/b/0``) of floating-point leaves holding a NaN or an Inf.

  Leaves declared as log-weights (listed in their NamedTuple's ``LOG_WEIGHTS``)
  may hold ``-inf`` (a weight of zero); NaN and ``+inf`` are refused there too.
  """
  bad = []
  log_weights = _log_weight_paths(tree)
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.inexact):
      continue
    name = "/".join(_key_name(k) for k in path) or "<root>"
    xp = jnp if isinstance(leaf, jax.Array) else np
    ok = xp.all(~xp.isnan(leaf) & (leaf != xp.inf)) if name in log_weights else xp.all(xp.isfinite(leaf))
    if not bool(_host_scalar(ok)):
      bad.append(name)
  return bad


def check_finite(step: int, state: Any, last_good: Optional[int] = None) -> None:
  """Raises :class:`NonFiniteError` if ``state`` has a NaN or an Inf."""
  bad = non_finite_leaves(state)
  if bad:
    raise NonFiniteError(step, bad, last_good)


def _host_scalar(x):
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    return np.asarray(x.addressable_data(0))
  return np.asarray(x)


def _key_name(k) -> str:
  for attr in ("key", "name", "idx"):
    if hasattr(k, attr):
      return str(getattr(k, attr))
  return str(k)


def abstract_like(tree: Any, sharding: Any = None) -> Any:
  """Restore target for ``tree``: shapes and dtypes, with ``sharding``.

  ``sharding`` is one sharding for every array leaf, or ``None`` to keep each
  leaf's own (NumPy leaves restore as NumPy arrays).
  """

  def leaf(x):
    if isinstance(x, jax.Array):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding or x.sharding)
    if sharding is not None and isinstance(x, np.ndarray):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
    return x

  return jax.tree.map(leaf, tree)


class Checkpointer:
  """Numbered, checksummed checkpoints of a pytree state plus JSON metadata in ``directory``.

  Args:
    directory: where the numbered steps live.
    max_to_keep: newest steps kept.
    every: :meth:`save` writes every ``every`` steps (unless forced).
    config_hash: hash of the run's config (see ``launch.runner.config_hash``);
      recorded with every step, and a step recorded under another hash is
      refused. ``None``: not recorded, not checked.
    inputs: ``{path: SHA-256}`` of the input files the run reads (see
      :func:`file_digest`); recorded with every step, and a step recorded
      with other digests is refused (:class:`InputsChangedError`). ``None``:
      not recorded, not checked. Steps that recorded none are not checked.

  Use it as a context manager (or call :meth:`close`): closing is
  deterministic, also when the run stops with an error.
  """

  def __init__(self, directory: str, *, max_to_keep: int = 2, every: int = 1,
               config_hash: Optional[str] = None, inputs: Optional[dict[str, str]] = None):
    self.directory = os.path.abspath(directory)
    self.every = every
    self.config_hash = config_hash
    self.inputs = dict(inputs) if inputs else None
    self.corrupt_dir = self.directory.rstrip(os.sep) + ".corrupt"
    self._verified: set[int] = set()
    self._closed = False
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            enable_async_checkpointing=False,
            cleanup_tmp_directories=True,
        ),
    )
    # orbax removes the temporary directories of unfinished saves in a background thread; a run
    # that stops right away (a one-line error) would leave it running into interpreter exit,
    # where it fails with a long traceback after the error line. Wait for it here.
    await_cleanup = getattr(self._manager, "_maybe_await_cleanup_tmp_directory", None)
    if await_cleanup is not None:
      await_cleanup()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  # ---------------------------------------------------------------- verification

  def _path(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  def _problem(self, step: int) -> Optional[str]:
    """Why ``step`` does not verify (``None``: it does); raises on a config or input-file mismatch."""
    path = os.path.join(self._path(step), CHECKSUM_FILE)
    try:
      with open(path) as f:
        record = json.load(f)
      expected = record["sha256"]
    except FileNotFoundError:
      return "no checksum (the run stopped before it was written)"
    except (OSError, ValueError, KeyError, TypeError) as e:
      return f"unreadable checksum ({type(e).__name__})"
    recorded_inputs = record.get("inputs")
    if _seal(step_digest(self._path(step)), record.get("config_hash"), recorded_inputs) != expected:
      return "its files do not match their checksum (corrupt)"
    if record.get("config_hash") and self.config_hash and record["config_hash"] != self.config_hash:
      raise CheckpointError(
          f"checkpoint step {step} in {self.directory} was written under a different config "
          f"(config hash {record['config_hash'][:12]}, this run's {self.config_hash[:12]}); "
          "rerun with the original flags or use a new --workdir"
      )
    changed = self.changed_inputs(recorded_inputs)
    if changed:
      raise InputsChangedError(step, self.directory, changed)
    return None

  def changed_inputs(self, recorded: Optional[dict]) -> list[str]:
    """Paths whose digest in ``recorded`` (a step's record) differs from this run's ``inputs``."""
    if not recorded or self.inputs is None:
      return []
    return sorted(p for p in set(recorded) | set(self.inputs) if recorded.get(p) != self.inputs.get(p))

  def _move_aside(self, step: int, why: str) -> None:
    """Reports ``step`` in one line and moves it to :attr:`corrupt_dir` (primary process only)."""
    dest = os.path.join(self.corrupt_dir, str(step))
    n = 1
    while os.path.exists(dest):
      dest, n = os.path.join(self.corrupt_dir, f"{step}.{n}"), n + 1
    logging.warning("checkpoint step %d fails verification: %s; moved to %s", step, why, dest)
    if jax.process_index() == 0:
      os.makedirs(self.corrupt_dir, exist_ok=True)
      shutil.move(self._path(step), dest)
    self._manager.reload()

  def verified_steps(self) -> list[int]:
    """Steps newest first, after moving aside every step newer than the newest that verifies."""
    for s in sorted(self._manager.all_steps(), reverse=True):
      if s in self._verified:
        break
      why = self._problem(s)
      if why is None:
        self._verified.add(s)
        break
      self._move_aside(s, why)
    return sorted(self._manager.all_steps(), reverse=True)

  def latest_step(self) -> Optional[int]:
    """The newest step that verifies (newer ones that do not are moved aside first)."""
    steps = self.verified_steps()
    return steps[0] if steps else None

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def should_save(self, step: int) -> bool:
    return step % self.every == 0

  def save(self, step: int, state: Any, metadata: Optional[dict] = None, *, force: bool = False) -> bool:
    """Saves ``state`` at ``step`` (every ``every`` steps, or when ``force``), then its checksum.

    Raises:
      NonFiniteError: ``state`` has NaN/Inf leaves; nothing is written (the
        error names the newest verified step as the last good one).
    """
    check_finite(step, state, self.latest_step())
    if not (force or self.should_save(step)) or step in self.all_steps():
      return False
    args = {"state": ocp.args.StandardSave(state)}
    if metadata is not None:
      args["meta"] = ocp.args.JsonSave(metadata)
    self._manager.save(step, args=ocp.args.Composite(**args), force=True)
    self._manager.wait_until_finished()
    if jax.process_index() == 0:  # written after the data: a step without it never verifies
      record = {"sha256": _seal(step_digest(self._path(step)), self.config_hash, self.inputs),
                "config_hash": self.config_hash, "step": step}
      if self.inputs:
        record["inputs"] = self.inputs
      tmp = os.path.join(self._path(step), f".{CHECKSUM_FILE}.tmp")
      with open(tmp, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
      os.replace(tmp, os.path.join(self._path(step), CHECKSUM_FILE))
    self._verified.add(step)
    return True

  def restore(self, target: Any, step: Optional[int] = None) -> tuple[int, Any, Optional[dict]]:
    """Restores ``(step, state, metadata)``; ``step=None`` is the newest that verifies and loads.

    Args:
      target: abstract tree (see :func:`abstract_like`) or a concrete tree of
        the same structure.
      step: a specific step; then a failure raises instead of falling back.

    Raises:
      CheckpointError: no checkpoint exists, none verifies and loads, or one
        was written under another config.
    """
    if step is not None:
      why = self._problem(step) if step in self.all_steps() else "no such step"
      if why is not None:
        raise CheckpointError(f"checkpoint step {step} in {self.directory}: {why}")
      steps = [step]
    else:
      steps = self.verified_steps()
    if not steps:
      raise CheckpointError(f"no checkpoint in {self.directory}")
    errors_ = []
    for s in steps:
      why = self._problem(s)  # always re-verified before use, even if this process wrote it
      if why is not None:
        self._verified.discard(s)
        self._move_aside(s, why)
        continue
      self._verified.add(s)
      try:
        restored = self._manager.restore(
            s, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))
        )
        meta = None
        if os.path.isdir(os.path.join(self._path(s), "meta")):
          meta = self._manager.restore(s, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        bad = non_finite_leaves(restored["state"])
        if bad:  # never resume from (or call "last good") a NaN/Inf state
          self._verified.discard(s)
          self._move_aside(s, f"it holds non-finite values in {', '.join(bad)}")
          errors_.append(f"{self._path(s)}: non-finite values in {', '.join(bad)}")
          continue
        return s, restored["state"], meta
      except Exception as e:  # pylint: disable=broad-except
        logging.warning("checkpoint %s could not be restored (%s: %s)", self._path(s), type(e).__name__, e)
        errors_.append(f"{self._path(s)}: {type(e).__name__}: {e}")
        if step is not None:
          break
    raise CheckpointError(
        "no checkpoint could be restored (a run whose state changes shape between steps cannot fall "
        "back to older steps; use a new --workdir):\n" + "\n".join(errors_ or ["none verifies"])
    )

  def restore_or(self, initial: Any, target: Any = None) -> tuple[int, Any, Optional[dict]]:
    """Latest checkpoint if any (``(step, state, meta)``), else ``(0, initial, None)``."""
    if self.latest_step() is None:
      return 0, initial, None
    return self.restore(target if target is not None else abstract_like(initial))

  def close(self) -> None:
    """Closes the orbax manager (once; later calls do nothing)."""
    if not self._closed:
      self._closed = True
      self._manager.close()
