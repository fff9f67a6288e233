"""Orbax checkpoints: save, restore onto a mesh, resume, refuse non-finite states.

:class:`Checkpointer` wraps ``orbax.checkpoint.CheckpointManager`` with the
project's rules:

* a state is written only if every floating-point leaf is finite; otherwise
  :class:`NonFiniteError` names the step and the offending leaves and the
  previous (good) checkpoints stay untouched;
* restore targets are abstract trees (``jax.eval_shape`` + shardings) so that
  arrays come back sharded as they were saved, on one process or many;
* a checkpoint that fails to restore (corrupt or partial files) is reported
  with its path and the next older one is tried; nothing is deleted.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp


class NonFiniteError(FloatingPointError):
  """A state with NaN/Inf values; it was not saved."""

  def __init__(self, step: int, leaves: list[str], last_good: Optional[int]):
    self.step, self.leaves, self.last_good = step, leaves, last_good
    kept = f"the last good checkpoint (step {last_good}) is kept" if last_good is not None else "nothing was saved"
    super().__init__(f"non-finite values at step {step} in {', '.join(leaves)}; {kept}")


class CheckpointError(RuntimeError):
  """No checkpoint in a directory could be restored."""


def non_finite_leaves(tree: Any) -> list[str]:
  """Paths (``a/b/0``) of floating-point leaves holding a NaN or an Inf."""
  bad = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.inexact):
      continue
    ok = jnp.all(jnp.isfinite(leaf)) if isinstance(leaf, jax.Array) else np.all(np.isfinite(leaf))
    if not bool(_host_scalar(ok)):
      bad.append("/".join(_key_name(k) for k in path) or "<root>")
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
  """Numbered checkpoints of a pytree state plus JSON metadata in ``directory``."""

  def __init__(self, directory: str, *, max_to_keep: int = 2, every: int = 1):
    self.directory = os.path.abspath(directory)
    self.every = every
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            enable_async_checkpointing=False,
            cleanup_tmp_directories=True,
        ),
    )

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def should_save(self, step: int) -> bool:
    return step % self.every == 0

  def save(self, step: int, state: Any, metadata: Optional[dict] = None, *, force: bool = False) -> bool:
    """Saves ``state`` at ``step`` (every ``every`` steps, or when ``force``).

    Raises:
      NonFiniteError: ``state`` has NaN/Inf leaves; nothing is written.
    """
    check_finite(step, state, self.latest_step())
    if not (force or self.should_save(step)) or step in self.all_steps():
      return False
    args = {"state": ocp.args.StandardSave(state)}
    if metadata is not None:
      args["meta"] = ocp.args.JsonSave(metadata)
    self._manager.save(step, args=ocp.args.Composite(**args), force=True)
    self._manager.wait_until_finished()
    return True

  def restore(self, target: Any, step: Optional[int] = None) -> tuple[int, Any, Optional[dict]]:
    """Restores ``(step, state, metadata)``; ``step=None`` is the latest that loads.

    Args:
      target: abstract tree (see :func:`abstract_like`) or a concrete tree of
        the same structure.
      step: a specific step; then a failure raises instead of falling back.

    Raises:
      CheckpointError: no checkpoint exists or none could be read.
    """
    steps = [step] if step is not None else sorted(self.all_steps(), reverse=True)
    if not steps:
      raise CheckpointError(f"no checkpoint in {self.directory}")
    errors = []
    for s in steps:
      try:
        restored = self._manager.restore(
            s, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))
        )
        meta = None
        if os.path.isdir(os.path.join(self.directory, str(s), "meta")):
          meta = self._manager.restore(s, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        return s, restored["state"], meta
      except Exception as e:  # pylint: disable=broad-except
        path = os.path.join(self.directory, str(s))
        logging.warning("checkpoint %s could not be restored (%s: %s)", path, type(e).__name__, e)
        errors.append(f"{path}: {type(e).__name__}: {e}")
        if step is not None:
          break
    raise CheckpointError(
        "no checkpoint could be restored (older steps are tried with the same restore "
        "target; pass step= if the state's structure changes between steps):\n" + "\n".join(errors)
    )

  def restore_or(self, initial: Any, target: Any = None) -> tuple[int, Any, Optional[dict]]:
    """Latest checkpoint if any (``(step, state, meta)``), else ``(0, initial, None)``."""
    if self.latest_step() is None:
      return 0, initial, None
    return self.restore(target if target is not None else abstract_like(initial))

  def close(self) -> None:
    self._manager.close()
