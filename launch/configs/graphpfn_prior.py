r"""GraphPFN prior: sample thousands of synthetic attributed graphs and report their statistics.

Launch from the repository root:

  python -m launch.main --config=launch/configs/graphpfn_prior.py:cpu --workdir=runs/graphpfn_prior

  # smoke size (seconds) or the paper's sizes (1000-5000 nodes, degrees up to 500; a GPU/TPU):
  python -m launch.main --config=launch/configs/graphpfn_prior.py:smoke --workdir=runs/graphpfn_smoke
  python -m launch.main --config=launch/configs/graphpfn_prior.py:paper --workdir=runs/graphpfn_paper

The ``structure`` and ``attributes`` sections are built from
``methods.graphpfn.StructureConfig`` and ``AttributeConfig`` (every key, its
range and doc are declared there); presets only change values. Any key can
be overridden, e.g. ``--config.structure.n_nodes_max=512
--config.attributes.graph_conv_ratios='(0.0,)'``.
"""

import dataclasses

import ml_collections

from launch.configs import common
from methods import graphpfn
from methods.common import hparams

F = hparams.field


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys (the prior's are the ``structure`` and ``attributes`` sections)."""

  num_graphs: int = F(2048, "Prior samples whose statistics are reported.", low=1)
  batch_size: int = F(64, "Graphs per jitted call (sharded over the mesh; one checkpoint each).", low=1)
  panel_graphs: int = F(400, "Graph pairs per sampler of the two-sample tests against the reference's sampler "
                        "(0: skip).", low=0)
  attribute_panel_graphs: int = F(
      400, "Graphs of the attribute generator's two-sample tests against the reference's generator: its "
      "default (the paper's) attribute hyperparameters on graphs of 64-128 nodes, whatever the attributes section "
      "says (0: skip).", low=0)
  probe_graphs: int = F(1536, "Samples of the graph-matters probe, over both ratios and every task kind (0: skip).",
                        low=0)
  probe_high_ratio: float = F(1.0, "graph_conv_ratio of the probe's graph arm (the other arm: 0).", low=0, high=1,
                              low_open=True)
  num_drawings: int = F(6, "Sampled graphs drawn in graphs.png.", low=0, high=24)
  tfds_examples: int = F(32, "Samples written and read back through the TFDS builder graphpfn_prior (0: none).",
                         low=0)
  data_dir: str = F("", "TFDS data dir ('': <workdir>/data).")

  def checks(self):
    if 0 < self.panel_graphs < 8:
      yield "panel_graphs", f"{self.panel_graphs} pairs are too few for the two-sample tests (at least 8, or 0)"
    if 0 < self.attribute_panel_graphs < 8:
      yield "attribute_panel_graphs", (f"{self.attribute_panel_graphs} graphs are too few for the two-sample tests "
                                       "(at least 8, or 0)")
    if self.num_drawings > self.num_graphs:
      yield "num_drawings", f"{self.num_drawings} is more than num_graphs={self.num_graphs}"
    if self.num_drawings > self.batch_size:
      yield "num_drawings", f"{self.num_drawings} is more than batch_size={self.batch_size}"


SECTIONS = common.declare(
    "graphpfn_prior",
    ("", Run),
    ("structure", graphpfn.StructureConfig),
    ("attributes", graphpfn.AttributeConfig),
)


def hparams_of(config: ml_collections.ConfigDict) -> tuple[graphpfn.StructureConfig, graphpfn.AttributeConfig]:
  """The prior's hyperparameters: ``(structure, attributes)``."""
  return (SECTIONS.build(config, graphpfn.StructureConfig), SECTIONS.build(config, graphpfn.AttributeConfig))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,probe_graphs=N][,panel_graphs=N]"`` (``make demo`` runs
  ``smoke,probe_graphs=0,panel_graphs=0``)."""
  opts = common.parse_arg(arg, probe_graphs=-1, panel_graphs=-1)
  config = SECTIONS.defaults(opts.preset)

  if opts.preset in ("smoke", "cpu"):
    # Laptop sizes: smaller graphs, degrees and SCM widths than the paper's (the same distributions' shapes).
    s, a = config.structure, config.attributes
    s.n_nodes_min, s.n_nodes_max = 64, 256
    s.low_degree_min, s.low_degree_max = 1.5, 16.0
    s.high_degree_min, s.high_degree_max = 16.0, 48.0
    s.min_first_level_nodes = 8
    s.subgraphs_max, s.groups_max = 4, 6
    a.hidden_dim_max, a.num_layers_max = 32, 4
    a.n_features_max = 24
  if opts.preset == "smoke":
    config.structure.n_nodes_max = 128
    config.structure.high_degree_max = 32.0
    config.num_graphs = 64
    config.batch_size = 32
    config.probe_graphs = 64
    config.panel_graphs = 32
    config.attribute_panel_graphs = 0  # one more compilation (the default attribute sizes); the tests turn it on
    config.num_drawings = 4
    config.tfds_examples = 8
  elif opts.preset == "paper":
    config.num_graphs = 100_000
    config.batch_size = 16
    config.probe_graphs = 4096
    config.panel_graphs = 200
  if opts.probe_graphs >= 0:
    config.probe_graphs = opts.probe_graphs
  if opts.panel_graphs >= 0:
    config.panel_graphs = opts.panel_graphs
  return config
