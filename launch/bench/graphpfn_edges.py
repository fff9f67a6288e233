r"""GraphPFN structure prior at the paper's sizes: paired node and edge counts, JAX default vs the NumPy oracle.

  python -m launch.bench.graphpfn_edges --pairs=256

For ``pairs`` hyperparameter sets drawn by
:func:`methods.graphpfn.structure.sample_params` (the paper's ranges:
1,000-5,000 nodes, degrees up to 500), one graph of the JAX sampler (its
default, padded to the maxima, one jitted call per graph) and one of the
oracle (``launch/bench/graphpfn_oracle.py``) on the same hyperparameters.
For the output edges, the SBM edges drawn before simplification and the
nodes kept: both means, the mean paired difference relative to the oracle's
mean with its standard error, the median ratio and the signed-rank p-value
of the paired differences (edge counts have long tails, so the rank test
and the median are the ones to read). The benchmark's notes compare mean
edge counts over its 16 graphs only; this is the check with enough pairs.
"""

from __future__ import annotations

import json
import time

import jax
import numpy as np
from absl import app
from absl import flags
from scipy import stats

from launch.bench import graphpfn_oracle
from methods import graphpfn
from methods.graphpfn import structure

_PAIRS = flags.DEFINE_integer("pairs", 256, "Hyperparameter sets (graph pairs).")
_SEEDS = flags.DEFINE_list("seeds", ["7", "8", "3"], "Seeds of the hyperparameters, the JAX keys and the "
                           "oracle's generator.")
_OUT = flags.DEFINE_string("out", "", "Write every pair's counts to this JSON file ('': do not).")

COUNTS = ("edges", "drawn", "nodes")


def pairs(hp: graphpfn.StructureConfig, count: int, seeds: tuple[int, int, int]) -> dict[str, np.ndarray]:
  """``{"jax_<c>", "oracle_<c>": [count]}`` for ``c`` in :data:`COUNTS`."""
  draw = jax.jit(jax.vmap(lambda k: structure.sample_params(k, hp)))
  params = draw(jax.random.split(jax.random.key(seeds[0]), count))
  host = jax.tree.map(np.asarray, params)
  keys = jax.random.split(jax.random.key(seeds[1]), count)
  fn = jax.jit(lambda k, p: structure.sample_graph(k, p, hp))
  rng = np.random.default_rng(seeds[2])
  out = {f"{side}_{c}": [] for side in ("jax", "oracle") for c in COUNTS}
  start = time.perf_counter()
  for i in range(count):
    o = graphpfn_oracle.sample({f: getattr(host, f)[i] for f in structure.StructureParams._fields}, hp, rng)
    s = fn(keys[i], jax.tree.map(lambda x, i=i: x[i], params))
    out["jax_edges"].append(int(s.graph.num_edges))
    out["jax_drawn"].append(int(s.sbm_edges))
    out["jax_nodes"].append(int(np.sum(np.asarray(s.graph.node_mask))))
    out["oracle_edges"].append(len(o.senders))
    out["oracle_drawn"].append(int(o.sbm_edges))
    out["oracle_nodes"].append(int(o.num_nodes))
    if (i + 1) % 32 == 0:
      print(f"{i + 1} pairs, {time.perf_counter() - start:.0f}s", flush=True)
  return {k: np.asarray(v, float) for k, v in out.items()}


def summary(counts: dict[str, np.ndarray]) -> list[str]:
  """One line per count: means, relative paired difference with its standard error, median ratio, p-value."""
  lines = []
  for c in COUNTS:
    a, b = counts[f"jax_{c}"], counts[f"oracle_{c}"]
    d = a - b
    rel, se = d.mean() / b.mean(), d.std(ddof=1) / np.sqrt(len(d)) / b.mean()
    p = stats.wilcoxon(d).pvalue if np.any(d != 0) else 1.0
    lines.append(f"{c}: JAX mean {a.mean():,.0f}, oracle mean {b.mean():,.0f}; paired difference {100 * rel:+.2f}% "
                 f"+- {100 * se:.2f}% (s.e.); median ratio {np.median(a / np.maximum(b, 1)):.4f}; signed-rank p {p:.2f} "
                 f"({len(d)} pairs)")
  return lines


def main(argv):
  del argv
  seeds = tuple(int(x) for x in _SEEDS.value)
  if len(seeds) != 3:
    raise ValueError(f"--seeds: three seeds (hyperparameters, JAX keys, oracle), got {_SEEDS.value}")
  counts = pairs(graphpfn.StructureConfig(), _PAIRS.value, seeds)
  print("\n".join(summary(counts)))
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump({k: v.tolist() for k, v in counts.items()}, f)


if __name__ == "__main__":
  app.run(main)
