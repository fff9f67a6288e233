"""TFDS builder ``graphpfn_prior``: samples of the GraphPFN prior as array_record, for streaming.

Each example is one attributed graph with a node task: ``senders``/``receivers``
(``[E]`` int32, each undirected edge once), ``x`` (``[N, F]`` float32),
``y`` (``[N]`` float32: a standardised value or a class id), ``train_mask``
(``[N]`` bool), ``task`` (0 regression, 1 binary, 2 multiclass) and
``num_classes``. The sampler (``methods.graphpfn``, run by
``launch/experiments/graphpfn/prior.py``) stages examples as
``<manual_dir>/shard_<k>.npz`` (:func:`stage`); :func:`prepare` builds the
array_record files and :func:`data_source` reads them back by index
(``builder.as_data_source``; no TensorFlow needed), e.g. for a training
loop that streams prior samples.
"""

from __future__ import annotations

import glob
import os
from typing import Iterable, Mapping

import numpy as np
import tensorflow_datasets as tfds

from datasets import preparation

FIELDS = ("senders", "receivers", "x", "y", "train_mask", "task", "num_classes")
SHARDS = "shard_*.npz"  # the staged shards, named by stage() and read by the build


class GraphpfnPrior(tfds.core.GeneratorBasedBuilder):
  """Synthetic attributed graphs with node tasks from the GraphPFN prior."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Padding removed; one example per graph."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Generated, not downloaded: launch/experiments/graphpfn/prior.py stages "
      "<manual_dir>/shard_<k>.npz (datasets.graphs.prior_builder.stage)."
  )

  def _info(self) -> tfds.core.DatasetInfo:
    t = tfds.features.Tensor
    return preparation.LocalInfo(
        builder=self,
        description="Samples of the GraphPFN prior (multi-level SBM + PA graphs, graph-aware SCM attributes).",
        features=tfds.features.FeaturesDict({
            "senders": t(shape=(None,), dtype=np.int32),
            "receivers": t(shape=(None,), dtype=np.int32),
            "x": t(shape=(None, None), dtype=np.float32, encoding="zlib"),
            "y": t(shape=(None,), dtype=np.float32),
            "train_mask": t(shape=(None,), dtype=np.bool_),
            "task": t(shape=(), dtype=np.int32),
            "num_classes": t(shape=(), dtype=np.int32),
        }),
        disable_shuffling=True,  # example i is prior sample i
    )

  def _split_generators(self, dl_manager):
    return {"train": self._generate_examples(str(dl_manager.manual_dir))}

  def _generate_examples(self, manual_dir):
    shards = sorted(glob.glob(os.path.join(manual_dir, SHARDS)))
    if not shards:
      raise FileNotFoundError(f"no staged shards in {manual_dir}; stage samples first (prior_builder.stage)")
    for path in shards:
      with np.load(path) as z:
        for i in z["ids"]:
          yield int(i), {f: z[f"{i}/{f}"] for f in FIELDS}


def unstage(manual_dir: str) -> None:
  """Removes every staged shard of ``manual_dir`` (a killed build's, before a build starts again)."""
  for path in glob.glob(os.path.join(manual_dir, SHARDS)):
    os.remove(path)


def stage(manual_dir: str, shard: int, examples: Iterable[tuple[int, Mapping[str, np.ndarray]]]) -> str:
  """Writes ``(id, example)`` pairs as shard ``shard`` (atomically)."""
  os.makedirs(manual_dir, exist_ok=True)
  arrays, ids = {}, []
  dtypes = {"senders": np.int32, "receivers": np.int32, "x": np.float32, "y": np.float32,
            "train_mask": np.bool_, "task": np.int32, "num_classes": np.int32}
  for i, ex in examples:
    ids.append(i)
    for f in FIELDS:
      arrays[f"{i}/{f}"] = np.asarray(ex[f], dtypes[f])
  path = os.path.join(manual_dir, f"shard_{shard:05d}.npz")
  tmp = path + ".tmp.npz"
  np.savez(tmp, ids=np.asarray(ids, np.int64), **arrays)
  os.replace(tmp, path)
  return path


def builder(data_dir: str) -> GraphpfnPrior:
  return GraphpfnPrior(data_dir=data_dir, file_format="array_record")


def prepare(data_dir: str, manual_dir: str) -> GraphpfnPrior:
  """Builds the array_record files from the staged shards (once)."""
  b = builder(data_dir)
  preparation.prepare(b, manual_dir)
  return b


def data_source(data_dir: str):
  """Random-access source of the prepared examples (``len``, ``[i]``)."""
  b = builder(data_dir)
  if not b.is_prepared():
    raise FileNotFoundError(f"graphpfn_prior is not prepared in {data_dir}; run prepare() first")
  return b.as_data_source("train")
