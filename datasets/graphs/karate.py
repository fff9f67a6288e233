"""Zachary's karate club (Zachary, 1977), as shipped by networkx: 34 nodes, 78 edges, 2 clubs."""

from __future__ import annotations

import networkx as nx
import numpy as np


def load() -> dict:
  """The karate club as arrays.

  Returns:
    ``senders``/``receivers`` (``[78]`` int32, each edge once, ``u < v``),
    ``num_nodes`` (34), ``y`` (``[34]`` int32: 0 "Mr. Hi", 1 "Officer") and
    ``x`` (``[34, 0]``: the graph has no node features).
  """
  g = nx.karate_club_graph()
  edges = np.array(sorted((min(u, v), max(u, v)) for u, v in g.edges()), np.int32)
  y = np.array([0 if g.nodes[i]["club"] == "Mr. Hi" else 1 for i in range(g.number_of_nodes())], np.int32)
  return {"senders": edges[:, 0], "receivers": edges[:, 1], "num_nodes": g.number_of_nodes(), "y": y,
          "x": np.zeros((g.number_of_nodes(), 0), np.float32)}
