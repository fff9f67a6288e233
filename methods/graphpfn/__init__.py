"""GraphPFN prior: synthetic attributed graphs and node tasks (Eremeev et al., 2025, arXiv:2509.21489)."""

from methods.graphpfn.hparams import ACTIVATIONS, CONV_TYPES, SAMPLINGS, TASKS, AttributeConfig, StructureConfig
from methods.graphpfn.structure import StructureParams, StructureSample, edge_targets, sample_graph, sample_params
from methods.graphpfn.scm import AttributeParams
from methods.graphpfn.tasks import BINARY, MULTICLASS, REGRESSION, Sample, permute_nodes, sample
from methods.graphpfn.probe import ProbeResult, batch_fn, probe
from methods.graphpfn import statistics
