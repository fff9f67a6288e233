"""Error types that the offline-RL readers raise for a bad dataset from a user.

The launcher reports these in one line, without a traceback
(``launch.errors.user_error_types``). They live here, in a module that imports
nothing, so that naming them does not load a reader.
"""

from __future__ import annotations


class D4RLFormatError(ValueError):
  """A D4RL file or array dict that is missing keys or has inconsistent shapes."""


class D4RLFileNotFoundError(D4RLFormatError, FileNotFoundError):
  """No file where a D4RL dataset was looked for."""


class D4RLDimensionError(D4RLFormatError):
  """Observations or actions with other dimensions than the environment's."""
