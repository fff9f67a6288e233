"""GraphPFN prior: synthetic attributed graphs and node tasks (Eremeev et al., 2025, arXiv:2509.21489)."""

from methods.graphpfn import statistics
from methods.graphpfn import two_sample
from methods.graphpfn.hparams import ACTIVATIONS, CONV_TYPES, SAMPLINGS, TASKS, AttributeConfig, StructureConfig
from methods.graphpfn.probe import ProbeResult, batch_fn, probe
from methods.graphpfn.sbm import SBMDraws
from methods.graphpfn.scm import AttributeParams
from methods.graphpfn.structure import (VARIANTS, StructureParams, StructureSample, Variant, edge_targets,
                                        level_degrees, only, sample_graph, sample_params, variant_of)
from methods.graphpfn.tasks import BINARY, MULTICLASS, REGRESSION, Sample, permute_nodes, sample

__all__ = [
    "ACTIVATIONS", "BINARY", "CONV_TYPES", "MULTICLASS", "REGRESSION", "SAMPLINGS", "TASKS", "VARIANTS",
    "AttributeConfig", "AttributeParams", "ProbeResult", "SBMDraws", "Sample", "StructureConfig", "StructureParams",
    "StructureSample", "Variant", "batch_fn", "edge_targets", "level_degrees", "only", "permute_nodes", "probe",
    "sample", "sample_graph", "sample_params", "statistics", "two_sample", "variant_of",
]

# The GraphPFN network: batching, model, Riemann head, pretraining, in-context evaluation, baselines.
from methods.graphpfn import baselines, batching, evaluation, model, prior_stream, riemann, train  # noqa: E402
from methods.graphpfn.batching import BatchError, GraphBatch, collate  # noqa: E402
from methods.graphpfn.evaluation import LearningCurve, Predictions, Scores, Summary  # noqa: E402
from methods.graphpfn.model import GraphPFN, Outputs  # noqa: E402
from methods.graphpfn.model_hparams import BaselineConfig, BucketConfig, ModelConfig, TrainConfig  # noqa: E402
from methods.graphpfn.train import Metrics, TrainState  # noqa: E402

__all__ += [
    "BaselineConfig", "BatchError", "BucketConfig", "GraphBatch", "GraphPFN", "LearningCurve", "Metrics",
    "ModelConfig", "Outputs", "Predictions", "Scores", "Summary", "TrainConfig", "TrainState", "baselines",
    "batching", "collate", "evaluation", "model", "prior_stream", "riemann", "train",
]
