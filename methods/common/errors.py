"""Error types that methods raise for bad input from a user.

The launcher reports these in one line, without a traceback
(``launch.errors.user_error_types``). They live here, in a module that imports
nothing, so that naming them does not load a method's package.
"""

from __future__ import annotations

from typing import Optional


class UnsafeExpression(ValueError):
  """An expression that the language refuses; ``reason`` says why."""

  def __init__(self, reason: str, text: Optional[str] = None):
    self.reason = reason
    self.text = text
    shown = "" if text is None else f" in {text[:80]!r}{'...' if len(text) > 80 else ''}"
    super().__init__(f"rejected expression{shown}: {reason}")
