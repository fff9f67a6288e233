"""Error types that environments raise for bad input from a user.

The launcher reports these in one line, without a traceback
(``launch.errors.user_error_types``). They live here, in a module that imports
nothing, so that naming them does not load an environment's code.
"""

from __future__ import annotations


class MDPFileError(ValueError):
  """A user's MDP file is malformed; the message names the file and the array."""
