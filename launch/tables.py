"""Plain-text tables for the summaries the launchers log.

Each column is as wide as its widest cell, header included, so a long name (a user's system, a
method with a qualifier) never pushes its numbers out of line with the other rows.
"""

from __future__ import annotations

from typing import Sequence

_JUSTIFY = {"<": str.ljust, ">": str.rjust}


def text(head: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None,
         gap: int = 2) -> list[str]:
  """Lines of a plain-text table: ``head`` then ``rows``, columns sized to their content.

  ``align`` holds one character per column, ``<`` (left) or ``>`` (right); by default the first
  column is left-aligned and the others right-aligned (a label, then numbers). Cells are
  formatted with ``str`` (format numbers before passing them). Trailing spaces are dropped.
  """
  head = [str(h) for h in head]
  n = len(head)
  if n == 0:
    raise ValueError("tables.text: the header has no columns")
  if gap < 1:
    raise ValueError(f"tables.text: gap={gap} must be at least 1")
  align = align if align is not None else "<" + ">" * (n - 1)
  if len(align) != n:
    raise ValueError(f"tables.text: align={align!r} has {len(align)} characters for {n} columns")
  bad = sorted(set(align) - set(_JUSTIFY))
  if bad:
    raise ValueError(f"tables.text: align={align!r} holds {bad}; each character must be '<' or '>'")
  cells = []
  for i, row in enumerate(rows):
    row = [str(c) for c in row]
    if len(row) != n:
      raise ValueError(f"tables.text: row {i} has {len(row)} cells for {n} columns: {row}")
    cells.append(row)
  widths = [max(len(r[j]) for r in [head] + cells) for j in range(n)]
  sep = " " * gap
  return [sep.join(_JUSTIFY[a](c, w) for a, c, w in zip(align, r, widths)).rstrip() for r in [head] + cells]
