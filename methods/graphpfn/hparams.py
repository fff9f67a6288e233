"""Hyperparameters of the GraphPFN prior: the ranges its per-graph hyperparameters are drawn from.

GraphPFN (Eremeev, Bazhenov, Platonov, Babenko, Prokhorenkova, 2025,
arXiv:2509.21489), Sec. 3: the structure prior (multi-level stochastic block
models with preferential attachment) and the attribute prior (graph-aware
structural causal models). Each field is a range or a probability; every
graph draws its own values from them. Static array sizes (the most nodes,
edges, features, hidden units) follow from the maxima.
"""

from __future__ import annotations

import dataclasses
import math

from methods.common import hparams

CONV_TYPES = ("gcn", "sage-mean", "sage-min", "sage-max", "gt")
ACTIVATIONS = (
    "identity", "tanh", "relu", "leaky_relu", "elu", "sigmoid", "sin", "abs", "square",
    "softplus", "gelu", "step", "gaussian", "log_abs", "sqrt_abs", "silu", "relu6", "sign",
    "fourier",
)
SAMPLINGS = ("normal", "mixed", "uniform")
TASKS = ("regression", "binary", "multiclass")
SUBGRAPH_DEGREES = ("equal", "size_weighted")
NODE_WEIGHTS = ("uniform", "equal")
GROUP_SIZES = ("min_size", "unconstrained")
DIAGONAL_PAIRS = ("n_squared", "n_choose_2")


def _pairs(obj, names):
  for lo, hi in names:
    a, b = getattr(obj, lo), getattr(obj, hi)
    if a > b:
      yield lo, f"{a} is above {hi}={b}: the range is empty"


@dataclasses.dataclass(frozen=True)
class StructureConfig(hparams.Hyperparameters):
  """The multi-level SBM + preferential-attachment structure prior (GraphPFN Sec. 3.1).

  The defaults are the reference's prior (its ``pretrain.toml`` and
  sampler). The options after ``min_group_fraction`` are off by default:
  five keep this project's earlier variants of the points where it differed
  from the reference, ``n_groups_per_sbm`` draws the number of groups per
  SBM as the reference's code can (see :mod:`methods.graphpfn.structure`).
  """

  n_nodes_min: int = hparams.field(1000, "Fewest nodes (SBM + PA), log-uniform.", low=2)
  n_nodes_max: int = hparams.field(5000, "Most nodes (SBM + PA); the padded node count.", low=2, high=46340)
  high_degree_prob: float = hparams.field(0.5, "Probability of the high average-degree range.", low=0, high=1)
  low_degree_min: float = hparams.field(1.5, "Low range of the target average degree: min (log-uniform).", low=0, low_open=True)
  low_degree_max: float = hparams.field(100.0, "Low range of the target average degree: max.", low=0, low_open=True)
  high_degree_min: float = hparams.field(100.0, "High range of the target average degree: min.", low=0, low_open=True)
  high_degree_max: float = hparams.field(500.0, "High range of the target average degree: max.", low=0, low_open=True)
  pa_ratio_max: float = hparams.field(0.3, "PA nodes / all nodes ~ U(0, pa_ratio_max).", low=0, high=0.9)
  pa_max_degree: int = hparams.field(2, "Each PA node attaches randint(1, pa_max_degree) edges.", low=1, high=16)
  subgraphs_min: int = hparams.field(2, "First-level subgraphs ~ randint(min, max).", low=1)
  subgraphs_max: int = hparams.field(8, "First-level subgraphs: max.", low=1, high=32)
  groups_min: int = hparams.field(2, "Blocks of each SBM ~ randint(min, max).", low=1)
  groups_max: int = hparams.field(8, "Blocks of each SBM: max.", low=1, high=32)
  first_level_ratio_min: float = hparams.field(0.05, "Share of SBM edges at level 1 ~ U(min, max).", low=0, high=1)
  first_level_ratio_max: float = hparams.field(0.95, "Share of SBM edges at level 1: max.", low=0, high=1)
  min_first_level_nodes: int = hparams.field(64, "Fewest nodes of a first-level subgraph.", low=1)
  offdiagonal_coef: float = hparams.field(0.1, "Off-diagonal block densities are coef * U(0, 1) (times sqrt(d_r d_s)).", low=0)
  uniform_density_prob: float = hparams.field(
      0.5, "Probability that an SBM has unit diagonal densities and one shared off-diagonal density.", low=0, high=1)
  zipf_prob: float = hparams.field(0.5, "Probability that an SBM draws Zipf node weights (else node_weights).", low=0, high=1)
  zipf_gamma_min: float = hparams.field(2.0, "Zipf exponent gamma ~ U(min, max), drawn per SBM.", low=1, low_open=True)
  zipf_gamma_max: float = hparams.field(3.0, "Zipf exponent: max.", low=1, low_open=True)
  min_group_size: int = hparams.field(4, "Fewest nodes of an SBM group (the reference's constant).", low=1)
  min_group_fraction: float = hparams.field(
      0.1, "A group has >= this share of an even split (n / groups), if more than min_group_size.", low=0, high=1)
  # The reference's prior is the default; the alternatives are earlier variants of this project, kept for comparison.
  subgraph_degree: str = hparams.field(
      "equal", "First-level expected degree: the same in every subgraph ('equal', reference) or edges spread "
      "over all subgraphs by density times both block sizes ('size_weighted').", choices=SUBGRAPH_DEGREES)
  cap_first_level_degree: bool = hparams.field(
      True, "Cap the first-level degree at min_first_level_nodes - 1 (reference).")
  node_weights: str = hparams.field(
      "uniform", "Non-Zipf node weights: U(0, 1) ('uniform', reference) or all equal ('equal').", choices=NODE_WEIGHTS)
  group_sizes: str = hparams.field(
      "min_size", "Group sizes: uniform over compositions with the minimum size ('min_size', reference) or "
      "with empty groups allowed ('unconstrained').", choices=GROUP_SIZES)
  n_groups_per_sbm: bool = hparams.field(
      False, "Draw the number of groups afresh for every SBM (else one per graph, as the reference's pretraining config).")
  diagonal_pairs: str = hparams.field(
      "n_squared", "Node pairs counted in a diagonal block of n nodes: n^2 ('n_squared', reference) or "
      "n (n - 1) / 2 ('n_choose_2').", choices=DIAGONAL_PAIRS)

  def checks(self):
    yield from _pairs(self, [
        ("n_nodes_min", "n_nodes_max"), ("low_degree_min", "low_degree_max"),
        ("high_degree_min", "high_degree_max"), ("subgraphs_min", "subgraphs_max"),
        ("groups_min", "groups_max"), ("first_level_ratio_min", "first_level_ratio_max"),
        ("zipf_gamma_min", "zipf_gamma_max"),
    ])
    top = max(self.low_degree_max, self.high_degree_max if self.high_degree_prob > 0 else 0)
    if top > self.n_nodes_min - 1:
      yield "high_degree_max" if self.high_degree_prob > 0 else "low_degree_max", (
          f"average degree {top} is more than a simple graph of n_nodes_min={self.n_nodes_min} nodes allows "
          f"(at most {self.n_nodes_min - 1})")
    sbm_min = self.n_nodes_min - math.ceil(self.pa_ratio_max * self.n_nodes_min)
    if sbm_min < self.subgraphs_min * self.min_first_level_nodes:
      yield "min_first_level_nodes", (
          f"{self.subgraphs_min} subgraphs of {self.min_first_level_nodes} nodes do not fit in the "
          f"{sbm_min} SBM nodes of the smallest graph (n_nodes_min={self.n_nodes_min}, pa_ratio_max={self.pa_ratio_max})")

  @property
  def max_pa_nodes(self) -> int:
    return math.ceil(self.pa_ratio_max * self.n_nodes_max)

  @property
  def max_degree(self) -> float:
    return max(self.low_degree_max, self.high_degree_max if self.high_degree_prob > 0 else 0.0)

  @property
  def sbm_edge_slots(self) -> int:
    """Padded SBM edge slots: the largest target plus 6 Poisson standard deviations."""
    m = self.n_nodes_max * self.max_degree / 2
    return int(math.ceil(m + 6 * math.sqrt(m) + 16))

  @property
  def pa_edge_slots(self) -> int:
    return self.max_pa_nodes * self.pa_max_degree


@dataclasses.dataclass(frozen=True)
class AttributeConfig(hparams.Hyperparameters):
  """The graph-aware SCM attribute prior and the node tasks (GraphPFN Sec. 3.2)."""

  num_causes_min: int = hparams.field(1, "Root causes (mean ~ U(min, max), clipped).", low=1)
  num_causes_max: int = hparams.field(12, "Root causes: max.", low=1)
  num_layers_min: int = hparams.field(2, "SCM layers (mean ~ U(min, max), clipped).", low=2)
  num_layers_max: int = hparams.field(6, "SCM layers: max.", low=2, high=16)
  hidden_dim_min: int = hparams.field(4, "Units per layer (mean ~ U(min, max), clipped).", low=1)
  hidden_dim_max: int = hparams.field(130, "Units per layer: max (the padded width).", low=1, high=1024)
  init_std_min: float = hparams.field(0.01, "Weight std ~ log-U(min, max).", low=0, low_open=True)
  init_std_max: float = hparams.field(10.0, "Weight std: max.", low=0, low_open=True)
  noise_std_min: float = hparams.field(1e-4, "Per-layer Gaussian noise std ~ log-U(min, max).", low=0, low_open=True)
  noise_std_max: float = hparams.field(0.3, "Noise std: max.", low=0, low_open=True)
  dropout_max: float = hparams.field(0.3, "Weight dropout probability ~ U(0, max).", low=0, high=0.95)
  causal_prob: float = hparams.field(0.5, "P(X and y are hidden units) else X = causes, y = output.", low=0, high=1)
  y_is_effect_prob: float = hparams.field(0.5, "P(y is a last-layer unit) in causal mode.", low=0, high=1)
  in_clique_prob: float = hparams.field(0.5, "P(X are consecutive units) in causal mode.", low=0, high=1)
  sort_features_prob: float = hparams.field(0.5, "P(X keeps the units' order).", low=0, high=1)
  samplings: tuple[str, ...] = hparams.field(SAMPLINGS, "Cause distributions to choose from.", choices=SAMPLINGS, nonempty=True, unique=True)
  activations: tuple[str, ...] = hparams.field(ACTIVATIONS, "Activations to choose from per layer.", choices=ACTIVATIONS, nonempty=True, unique=True)
  conv_types: tuple[str, ...] = hparams.field(CONV_TYPES, "Graph convolutions to choose from per graph.", choices=CONV_TYPES, nonempty=True, unique=True)
  graph_conv_ratios: tuple[float, ...] = hparams.field(
      tuple(i / 10 for i in range(11)), "Share of units that aggregate over neighbours (choices).", low=0, high=1, nonempty=True)
  degree_input_prob: float = hparams.field(0.5, "P(node degree is a cause).", low=0, high=1)
  pagerank_input_prob: float = hparams.field(0.5, "P(PageRank is a cause).", low=0, high=1)
  eigvec_input_prob: float = hparams.field(0.5, "P(Laplacian eigenvectors are causes).", low=0, high=1)
  num_eigvecs: int = hparams.field(4, "Laplacian eigenvectors used as causes.", low=1, high=32)
  tasks: tuple[str, ...] = hparams.field(TASKS, "Task kinds to choose from.", choices=TASKS, nonempty=True, unique=True)
  binary_quantile_min: float = hparams.field(0.01, "Binary threshold quantile ~ U(min, max).", low=0, high=1, low_open=True, high_open=True)
  binary_quantile_max: float = hparams.field(0.99, "Binary threshold quantile: max.", low=0, high=1, low_open=True, high_open=True)
  num_classes_min: int = hparams.field(2, "Multiclass classes ~ randint(min, max).", low=2)
  num_classes_max: int = hparams.field(10, "Multiclass classes: max.", low=2, high=64)
  ordered_prob: float = hparams.field(0.2, "P(multiclass labels follow the value order).", low=0, high=1)
  reversed_prob: float = hparams.field(0.5, "P(ordered labels are reversed).", low=0, high=1)
  n_features_min: int = hparams.field(4, "Features ~ round(U(min, max)).", low=1)
  n_features_max: int = hparams.field(100, "Features: max (the padded width).", low=1, high=1024)
  categorical_prob: float = hparams.field(0.2, "P(a feature column becomes categorical, rank-based).", low=0, high=1)
  categories_max: int = hparams.field(10, "Categories of a categorical column ~ randint(2, max).", low=2)
  outlier_sigma: float = hparams.field(4.0, "Features are clipped at this many standard deviations.", low=0, low_open=True)
  train_ratio_min: float = hparams.field(0.05, "Training nodes / nodes ~ U(min, max).", low=0, high=1, low_open=True)
  train_ratio_max: float = hparams.field(0.5, "Training share: max.", low=0, high=1, high_open=True)

  def checks(self):
    yield from _pairs(self, [
        ("num_causes_min", "num_causes_max"), ("num_layers_min", "num_layers_max"),
        ("hidden_dim_min", "hidden_dim_max"), ("init_std_min", "init_std_max"),
        ("noise_std_min", "noise_std_max"), ("binary_quantile_min", "binary_quantile_max"),
        ("num_classes_min", "num_classes_max"), ("n_features_min", "n_features_max"),
        ("train_ratio_min", "train_ratio_max"),
    ])

  @property
  def max_causes(self) -> int:
    """Padded cause columns: causal mode uses num_causes, non-causal mode one per feature."""
    return max(self.num_causes_max, self.n_features_max)
