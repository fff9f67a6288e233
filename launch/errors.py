"""Failures that are not bugs: the launcher prints one line for them, no traceback.

A :class:`UserError` is raised for problems in what a user gave the run or in
its surroundings -- bad data, an unusable ``--workdir``, a NaN/Inf stop, no
checkpoint that verifies -- as opposed to a bug in the project. ``launch.main``
prints ``error: <one line>`` for these and exits with :attr:`UserError.exit_code`;
``--verbose`` (or ``ICML26_VERBOSE=1`` in the environment) also shows the
traceback. Other exceptions are bugs and keep their traceback.

Errors raised in layers below ``launch`` (``datasets``, ``methods``) cannot
derive from these classes; :func:`user_error_types` lists them too.
"""

from __future__ import annotations

from datasets.offline_rl import errors as d4rl_errors
from envs import errors as env_errors
from methods.common import errors as method_errors

VERBOSE_ENV = "ICML26_VERBOSE"


class UserError(Exception):
  """A failure caused by the run's inputs or environment (not a bug)."""

  exit_code = 1


class WorkdirError(UserError):
  """``--workdir`` cannot be created, written, or holds another run."""


class DataError(UserError):
  """A dataset file or array that cannot be used (named in the message)."""


def user_error_types() -> tuple[type, ...]:
  """Every exception type that ``launch.main`` reports in one line."""
  return (UserError, d4rl_errors.D4RLFormatError, env_errors.MDPFileError, method_errors.UnsafeExpression)


def exit_code(error: BaseException) -> int:
  """The error's ``exit_code``: 2 for config errors (as for bad flags), else 1."""
  return getattr(error, "exit_code", 1)


def one_line(error: BaseException) -> str:
  """The error's message on one line (a config error's problems joined by ``; ``)."""
  problems = getattr(error, "problems", None)
  if problems:
    return "invalid config: " + "; ".join(" ".join(str(p).split()) for p in problems)
  text = " ".join(str(error).split())
  return text or type(error).__name__
