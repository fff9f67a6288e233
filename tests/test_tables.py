"""Plain-text tables: columns sized to their content, named errors for malformed input."""

import pytest

from launch import tables


def test_columns_are_as_wide_as_their_widest_cell_so_numbers_line_up():
  rows = [["ModelSMC (visited-set posterior)", "1.23", "0.50"], ["SINDy", "-10.40", "0.9"]]
  lines = tables.text(["method", "lpd", "cov50"], rows)
  assert len(lines) == 3
  # Every number column ends at the same position on every line.
  ends = {len(line) for line in lines}
  assert ends == {len(lines[0])}
  assert lines[0].startswith("method" + " " * (len(rows[0][0]) - len("method")) + "  ")
  lpd_end = len(rows[0][0]) + 2 + len("-10.40")
  assert [line[:lpd_end].endswith(v) for line, v in zip(lines, ["lpd", "1.23", "-10.40"])] == [True] * 3


def test_a_header_wider_than_its_cells_sets_the_width_and_alignment_is_per_column():
  lines = tables.text(["a", "a long header"], [["x", 1], ["yy", 22]], align="><")
  assert lines == [" a  a long header", " x  1", "yy  22"]


def test_gap_and_trailing_spaces():
  assert tables.text(["k", "v"], [["a", ""]], align="<<", gap=3) == ["k   v", "a"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(head=[], rows=[]), "no columns"),
    (dict(head=["a", "b"], rows=[["1"]]), r"row 0 has 1 cells for 2 columns"),
    (dict(head=["a", "b"], rows=[], align="<"), r"align='<' has 1 characters for 2 columns"),
    (dict(head=["a", "b"], rows=[], align="<^"), r"\['\^'\]"),
    (dict(head=["a"], rows=[], gap=0), "gap=0"),
])
def test_malformed_tables_are_named(kwargs, match):
  with pytest.raises(ValueError, match=match):
    tables.text(**kwargs)
