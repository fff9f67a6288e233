r"""GraphPFN network: pretrain on streamed prior graphs, then predict node labels in context.

Launch from the repository root:

  python -m launch.main --config=launch/configs/graphpfn.py:cpu --workdir=runs/graphpfn

  # seconds (tests, notebook, demo), or the paper's sizes on a GPU (the same command
  # shards the batch over every device of the machine or cluster):
  python -m launch.main --config=launch/configs/graphpfn.py:smoke --workdir=runs/graphpfn_smoke
  python -m launch.main --config=launch/configs/graphpfn.py:paper --workdir=runs/graphpfn_paper

  # also score a Planetoid graph on disk (ind.cora.* files, or your own graph's ind.<name>.*;
  # nothing is downloaded):
  ... --config.planetoid_dir=/path/to/planetoid --config.planetoid_name=cora

Sections: ``model`` (:class:`methods.graphpfn.ModelConfig`), ``train``
(``TrainConfig``), ``buckets`` (``BucketConfig``), ``baselines``
(``BaselineConfig``), and the prior's ``structure`` / ``attributes``
(``StructureConfig`` / ``AttributeConfig``); the run's own keys are
:class:`Run`. ``arg`` options: ``steps=N`` (training steps),
``eval_graphs=N`` (held-out graphs per setting).
"""

import dataclasses

import ml_collections

from launch.configs import common
from methods import graphpfn
from methods.common import hparams
from methods.graphpfn import baselines as baselines_lib

F = hparams.field


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The run's own keys: evaluation sets, learning curve, shifted prior, real graphs."""

  bin_batches: int = F(4, "Prior batches (their own key) whose regression targets fit the Riemann bins.", low=1)
  curve_points: int = F(6, "Learning-curve points (equally spaced steps, the last one the final step).", low=1)
  curve_graphs: int = F(64, "Held-out prior graphs scored at each learning-curve point.", low=1)
  eval_graphs: int = F(256, "Held-out graphs per evaluation setting (in-distribution and shifted).", low=1)
  eval_batch: int = F(32, "Graphs per evaluation call.", low=1)
  compared: tuple[str, ...] = F(baselines_lib.BASELINES, "Per-graph baselines fitted on each graph's training nodes.",
                                 choices=baselines_lib.BASELINES, unique=True)
  shift_nodes_factor: float = F(2.0, "Shifted prior: n_nodes_min and n_nodes_max times this.", low=1.0)
  shift_offdiagonal_coef: float = F(0.5, "Shifted prior: offdiagonal_coef (weaker blocks, other homophily).", low=0.0)
  karate_splits: int = F(20, "Random karate-club splits (train_per_class nodes per club) scored.", low=0)
  karate_train_per_class: int = F(2, "Karate club: training nodes per club.", low=1, high=16)
  planetoid_dir: str = F("", "Directory with a Planetoid graph's ind.<name>.* files ('': skip).")
  planetoid_name: str = F("cora", "Graph read from planetoid_dir: the <name> of its ind.<name>.* files (cora, citeseer, "
                             "pubmed, or your own graph's name, written by datasets.graphs.planetoid.write).")


def _sizes(config: ml_collections.ConfigDict):
  """Cross-section checks: the prior fits the model and the buckets (named keys)."""
  m, s, a, r = config.model, config.structure, config.attributes, config
  if a.n_features_max > m.num_features:
    yield "attributes.n_features_max", f"{a.n_features_max} is more than model.num_features={m.num_features}"
  if a.num_classes_max > m.num_classes:
    yield "attributes.num_classes_max", f"{a.num_classes_max} is more than model.num_classes={m.num_classes}"
  largest = int(round(s.n_nodes_max * r.shift_nodes_factor))
  if largest > config.buckets.node_buckets[-1]:
    yield "buckets.node_buckets", (f"the largest bucket {config.buckets.node_buckets[-1]} cannot hold the shifted "
                                   f"prior's {largest} nodes (structure.n_nodes_max * shift_nodes_factor)")


SECTIONS = common.declare(
    "graphpfn",
    ("", Run),
    ("model", graphpfn.ModelConfig),
    ("train", graphpfn.TrainConfig),
    ("buckets", graphpfn.BucketConfig),
    ("baselines", graphpfn.BaselineConfig),
    ("structure", graphpfn.StructureConfig),
    ("attributes", graphpfn.AttributeConfig),
    checks=(_sizes,),
)


@dataclasses.dataclass(frozen=True)
class Hparams:
  """Every section of a config as its dataclass."""

  run: Run
  model: graphpfn.ModelConfig
  train: graphpfn.TrainConfig
  buckets: graphpfn.BucketConfig
  baselines: graphpfn.BaselineConfig
  structure: graphpfn.StructureConfig
  attributes: graphpfn.AttributeConfig

  def shifted(self) -> graphpfn.StructureConfig:
    """The shifted prior's structure: larger graphs, weaker blocks."""
    s, r = self.structure, self.run
    return dataclasses.replace(
        s, n_nodes_min=int(round(s.n_nodes_min * r.shift_nodes_factor)),
        n_nodes_max=int(round(s.n_nodes_max * r.shift_nodes_factor)), offdiagonal_coef=r.shift_offdiagonal_coef)


def hparams_of(config: ml_collections.ConfigDict) -> Hparams:
  """The config's sections as dataclasses."""
  return Hparams(*(SECTIONS.build(config, s.cls) for s in SECTIONS.sections[1:]))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,steps=N][,eval_graphs=N]"``."""
  opts = common.parse_arg(arg, steps=-1, eval_graphs=-1)
  config = SECTIONS.defaults(opts.preset)
  m, t, b, s, a = config.model, config.train, config.buckets, config.structure, config.attributes
  if opts.preset in ("smoke", "cpu"):
    # The prior at laptop size (the graphpfn_prior experiment's smoke sizes: 64-128 nodes).
    s.n_nodes_min, s.n_nodes_max = 64, 128
    s.low_degree_min, s.low_degree_max = 1.5, 16.0
    s.high_degree_min, s.high_degree_max = 16.0, 32.0
    s.min_first_level_nodes = 8
    s.subgraphs_max, s.groups_max = 4, 6
    a.hidden_dim_max, a.num_layers_max = 32, 4
    a.n_features_max = 24
    m.num_features, m.num_classes = 24, 10
    b.node_buckets = (64, 128, 256, 512, 4096)
    b.edge_buckets = tuple(2 ** k for k in range(8, 16))
    config.checkpoint.every = 100
    config.checkpoint.max_to_keep = 2
  if opts.preset == "smoke":
    m.width, m.num_layers, m.heads, m.num_bins = 32, 2, 4, 32
    t.batch_size, t.total_steps, t.warmup_steps, t.learning_rate = 8, 20, 5, 3e-3
    config.bin_batches = 2
    config.curve_points, config.curve_graphs = 2, 8
    config.eval_graphs, config.eval_batch = 16, 8
    config.karate_splits = 4
    config.checkpoint.every = 5
  elif opts.preset == "cpu":
    m.width, m.num_layers, m.heads, m.num_bins = 64, 4, 4, 64
    t.batch_size, t.total_steps, t.warmup_steps, t.learning_rate = 16, 3000, 100, 1e-3
  elif opts.preset == "paper":
    # Paper-sized prior graphs (1000-5000 nodes; StructureConfig's defaults), a 12-layer width-256 network
    # with remat, 100k steps; one GPU holds a batch of 8 such graphs (see docs/graphpfn.md).
    m.num_features, m.num_classes = 100, 10
    m.width, m.num_layers, m.heads, m.num_bins, m.remat = 256, 12, 8, 256, True
    t.batch_size, t.total_steps, t.warmup_steps, t.learning_rate = 8, 100_000, 2000, 3e-4
    b.node_buckets = (1024, 2048, 4096, 8192, 16384)
    b.edge_buckets = tuple(2 ** k for k in range(12, 23))
    config.shift_nodes_factor = 1.5
    config.curve_points, config.curve_graphs = 20, 256
    config.eval_graphs, config.eval_batch = 512, 8
    config.checkpoint.every = 1000
  if opts.steps > 0:
    t.total_steps = opts.steps
    t.warmup_steps = min(t.warmup_steps, opts.steps)
  if opts.eval_graphs > 0:
    config.eval_graphs = opts.eval_graphs
  return config
