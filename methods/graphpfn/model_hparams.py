"""Hyperparameters of the GraphPFN network, its pretraining, its size buckets and its baselines.

GraphPFN (Eremeev, Bazhenov, Platonov, Babenko, Prokhorenkova, 2025,
arXiv:2509.21489) pretrains a prior-data fitted network (Mueller et al.,
2022, "Transformers can do Bayesian inference") with attention-based
neighbourhood aggregation on samples of its graph prior. The paper builds on
the LimiX tabular foundation model; this package trains a small network of
the same kind from scratch (a reconstruction: see :mod:`methods.graphpfn.model`).
Each class here is one frozen dataclass; a field is one hyperparameter.
"""

from __future__ import annotations

import dataclasses

from methods.common import hparams

F = hparams.field

FEATURE_SCALINGS = ("sqrt", "linear", "none")


def _increasing(name, values):
  if any(b <= a for a, b in zip(values, values[1:])):
    yield name, f"{list(values)} must be strictly increasing"


@dataclasses.dataclass(frozen=True)
class ModelConfig(hparams.Hyperparameters):
  """The network: node tokens, ``num_layers`` x [row attention, neighbour attention, MLP], two heads."""

  num_features: int = F(24, "Most node features F_max (fewer are zero-padded and rescaled).", low=1, high=4096)
  num_classes: int = F(10, "Most classes C_max of the classification head (masked to each task's).", low=2, high=256)
  width: int = F(64, "Token width d.", low=4)
  num_layers: int = F(4, "Layers of [row attention, neighbour attention, MLP].", low=1)
  heads: int = F(4, "Attention heads (row and neighbour attention).", low=1)
  mlp_ratio: int = F(2, "MLP hidden width / d (the reference's graph MLP uses 2).", low=1)
  num_bins: int = F(64, "Bins of the Riemann (bar-distribution) regression head.", low=2)
  feature_scaling: str = F("sqrt", "Rescaling of a graph's F used features: (F_max/F)^(1/2), F_max/F or none.",
                           choices=FEATURE_SCALINGS)
  zero_init: bool = F(True, "Zero-initialise the output projection of every residual branch.")
  self_loops: bool = F(False, "Neighbour attention also attends to the node itself.")
  remat: bool = F(False, "Recompute each layer's activations in the backward pass (saves memory).")

  def checks(self):
    if self.width % self.heads:
      yield "heads", f"{self.heads} does not divide width={self.width}"


@dataclasses.dataclass(frozen=True)
class TrainConfig(hparams.Hyperparameters):
  """Pretraining on streamed prior batches: AdamW with linear warmup and cosine decay (optax)."""

  batch_size: int = F(16, "Graphs per training step, drawn by the stream (the axis sharded over devices).", low=1)
  total_steps: int = F(2000, "Training steps; the cosine decay ends here.", low=1)
  warmup_steps: int = F(100, "Linear warmup steps from 0 to learning_rate.", low=0)
  learning_rate: float = F(1e-3, "Peak AdamW learning rate.", low=0.0, low_open=True)
  end_lr_ratio: float = F(0.1, "Final learning rate / peak.", low=0.0, high=1.0)
  weight_decay: float = F(0.01, "AdamW decoupled weight decay.", low=0.0)
  b1: float = F(0.9, "Adam beta1.", low=0.0, high=1.0, high_open=True)
  b2: float = F(0.999, "Adam beta2.", low=0.0, high=1.0, high_open=True)
  grad_clip: float = F(1.0, "Global gradient-norm clip.", low=0.0, low_open=True)
  regression_weight: float = F(1.0, "Weight of a regression graph's Riemann NLL against a class graph's CE.", low=0.0)

  def checks(self):
    if self.warmup_steps > self.total_steps:
      yield "warmup_steps", f"{self.warmup_steps} is more than total_steps={self.total_steps}"


@dataclasses.dataclass(frozen=True)
class BucketConfig(hparams.Hyperparameters):
  """Size buckets: a batch is padded to the smallest node and edge bucket that holds its largest graph.

  Every distinct (node bucket, edge bucket) pair is one compilation of a
  jitted step; after one batch of each pair has run, no batch recompiles.
  The last bucket is the most a graph may have.
  """

  node_buckets: tuple[int, ...] = F((64, 128, 256, 512, 1024, 2048, 4096, 8192),
                                    "Padded node counts (strictly increasing).", low=1, nonempty=True)
  edge_buckets: tuple[int, ...] = F(tuple(2 ** k for k in range(8, 22)),
                                    "Padded undirected edge counts (strictly increasing).", low=1, nonempty=True)

  def checks(self):
    yield from _increasing("node_buckets", self.node_buckets)
    yield from _increasing("edge_buckets", self.edge_buckets)


@dataclasses.dataclass(frozen=True)
class BaselineConfig(hparams.Hyperparameters):
  """Per-graph baselines fitted on each graph's training nodes (see :mod:`methods.graphpfn.baselines`)."""

  ridge_l2: float = F(1.0, "Ridge penalty (regression tasks).", low=0.0, low_open=True)
  logistic_l2: float = F(1e-3, "L2 penalty of logistic regression (per training node).", low=0.0)
  logistic_steps: int = F(300, "Adam steps of logistic regression.", low=1)
  logistic_lr: float = F(0.05, "Adam learning rate of logistic regression.", low=0.0, low_open=True)
  sgc_hops: int = F(2, "Propagation hops K: features [X, SX, ..., S^K X] (S: GCN normalisation).", low=1, high=8)
  gcn_hidden: int = F(64, "Hidden width of the two-layer GCN.", low=1)
  gcn_steps: int = F(200, "Adam steps of the GCN (Kipf & Welling, 2017: 200 epochs).", low=1)
  gcn_lr: float = F(0.01, "GCN Adam learning rate.", low=0.0, low_open=True)
  gcn_weight_decay: float = F(5e-4, "GCN L2 penalty on the first layer's weights.", low=0.0)
  gcn_dropout: float = F(0.5, "GCN dropout on the input and hidden units.", low=0.0, high=1.0, high_open=True)
  gbdt_max_iter: int = F(100, "Boosting iterations of HistGradientBoosting.", low=1)
  gbdt_learning_rate: float = F(0.1, "HistGradientBoosting learning rate.", low=0.0, low_open=True)
  gbdt_max_leaf_nodes: int = F(15, "Leaves per tree of HistGradientBoosting.", low=2)
  gbdt_min_samples_leaf: int = F(5, "Fewest training nodes per leaf of HistGradientBoosting.", low=1)
