"""What an experiment receives from the runner, and what it provides.

An :class:`Experiment` is registered in :mod:`launch.registry`; the runner
(:func:`launch.runner.run`) validates the config against its schema, builds a
:class:`Context` (workdir writer, mesh, checkpointer) and calls
``experiment.run(config, ctx)``, which returns the content of
``results.json``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Optional, Sequence

from absl import logging
import ml_collections
from jax.sharding import Mesh

from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import metrics
from launch.configs.common import Check
from launch.configs.common import Declaration


@dataclasses.dataclass(frozen=True)
class Experiment:
  """A registered experiment.

  Attributes:
    declaration: the config module's ``SECTIONS`` (its name is the registry key,
      equal to ``config.experiment``).
    get_config: the config module's ``get_config(arg)``.
    run: ``(config, ctx) -> results`` (a JSON-able dict).
    summary: ``results -> str``, the human-readable table the launcher logs
      and ``make demo`` prints.
    markdown: ``results -> str``, the Markdown that ``launch.report`` puts in
      the docs (default: ``summary`` in a code block).
    checks: the checks that need more than the config (the data a task
      reads, the problem it builds); run after the declared ones.
    headline: ``results -> str``, the short Markdown table that carries the
      paper's claim, for the README (default: ``markdown``).
    inputs: ``config -> [(config key, path), ...]``: every file (or
      directory) of the user's that the run reads, named by the config key
      that points at it. The runner records their SHA-256 with every
      checkpoint and refuses to resume once one has changed (the run would
      mix old and new data); see ``launch.runner.run``'s ``on_input_change``.
      Files the run generates itself are not inputs.
  """

  declaration: Declaration
  get_config: Callable[[Optional[str]], ml_collections.ConfigDict]
  run: Callable[[ml_collections.ConfigDict, "Context"], dict]
  summary: Callable[[dict], str]
  markdown: Optional[Callable[[dict], str]] = None
  checks: Sequence[Check] = ()
  headline: Optional[Callable[[dict], str]] = None
  inputs: Optional[Callable[[ml_collections.ConfigDict], Sequence[tuple[str, str]]]] = None

  @property
  def name(self) -> str:
    return self.declaration.name

  def schema(self) -> config_schema.Schema:
    """Every key's type, range and choices, and every check, derived from the declaration."""
    return self.declaration.schema(self.get_config(), self.checks)

  def input_files(self, config: ml_collections.ConfigDict) -> list[tuple[str, str]]:
    """``[(config key, path)]`` of the user's files the run reads (paths with ``~`` expanded)."""
    if self.inputs is None:
      return []
    return [(key, os.path.expanduser(path)) for key, path in self.inputs(config) if path]

  def to_headline(self, results: dict) -> str:
    return self.headline(results) if self.headline is not None else self.to_markdown(results)

  def to_markdown(self, results: dict) -> str:
    if self.markdown is not None:
      return self.markdown(results)
    return "```\n" + self.summary(results) + "\n```\n"


@dataclasses.dataclass
class Context:
  """Run-time services for one experiment run."""

  workdir: str
  writer: metrics.Writer
  mesh: Mesh
  checkpointer: Optional[ckpt_lib.Checkpointer]

  def latest_step(self) -> Optional[int]:
    """Step of the newest checkpoint, or ``None`` (none yet, or checkpoints off)."""
    return None if self.checkpointer is None else self.checkpointer.latest_step()

  def restore_or(self, initial: Any, target: Any = None) -> tuple[int, Any, Optional[dict]]:
    """``(step, state, meta)`` from the latest checkpoint, else ``(0, initial, None)``."""
    if self.checkpointer is None:
      return 0, initial, None
    step, state, meta = self.checkpointer.restore_or(initial, target)
    if step:
      logging.info("resumed from checkpoint step %d (%s)", step, self.checkpointer.directory)
    self.writer.truncate_after(step)
    return step, state, meta

  def save(self, step: int, state: Any, metadata: Optional[dict] = None, *, force: bool = False) -> bool:
    """Checkpoints ``state`` (raises ``NonFiniteError`` on NaN/Inf; never overwrites)."""
    if self.checkpointer is None:
      ckpt_lib.check_finite(step, state)
      return False
    return self.checkpointer.save(step, state, metadata, force=force)
