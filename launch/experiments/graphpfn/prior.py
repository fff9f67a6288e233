"""Experiment ``graphpfn_prior``: sample the GraphPFN prior, report its statistics.

Config: ``launch/configs/graphpfn_prior.py``. Graph ``i`` is sampled from
``fold_in(key(seed), i)``, so a sample does not depend on the batch size or
the device count. Batches of ``batch_size`` graphs are one jitted, vmapped
call whose graph axis is sharded over the mesh's ``data`` axis; after each
batch the statistics of its graphs (``methods.graphpfn.statistics``) are
checkpointed, so a killed run resumes and ends with the same numbers. Then
the fidelity stages (:mod:`.fidelity`, each cached in the workdir): the
two-sample tests of the structure sampler (the default and each earlier
variant) against the NumPy oracle of the reference's sampler on
``panel_graphs`` hyperparameter sets, with the per-subgraph degree plot;
the attribute generator's two-sample tests against a NumPy port of the
reference's on ``attribute_panel_graphs`` graphs; and the "graph matters"
probe (test accuracy / R^2 of ridge with and without neighbour-averaged
features, classification and regression, at
``graph_conv_ratio`` 0 and ``probe_high_ratio``) on ``probe_graphs``
samples; the first ``tfds_examples`` samples written through the TFDS
builder ``graphpfn_prior`` to ``data_dir`` and read back (a data dir that
holds examples of another seed, count or prior, or entries no build writes,
is refused before any compute); histograms and drawings of sampled graphs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from datasets.graphs import prior_builder
from launch import errors
from launch import mesh as mesh_lib
from launch import metrics
from launch.configs import graphpfn_prior as prior_config
from launch.experiments.graphpfn import fidelity
from launch.experiments.graphpfn import fidelity_report
from launch.experiments.graphpfn import prior_report as report
from launch.runtime import Context, Experiment
from methods import graphpfn
from methods.graphpfn import statistics as stats_lib


class Tallies(NamedTuple):
  """Checkpointed state: one row of statistics per sampled graph."""

  stats: np.ndarray  # [G, len(STATS)] float64, NaN where undefined or not sampled yet
  params: np.ndarray  # [G, len(PARAM_FIELDS)] float64: each graph's sampled hyperparameters


PARAM_FIELDS = (
    [f"structure.{f}" for f in graphpfn.StructureParams._fields]
    + [f"attributes.{f}" for f in graphpfn.AttributeParams._fields if f != "activation"]
)


def _sampler(structure_hp, attribute_hp, mesh):
  """``(seed key, start, count, size) -> samples [size]``: graph ``start + i`` from ``fold_in(key, start + i)``.

  The keys' axis is sharded over ``mesh``; the jitted sampler is
  :func:`methods.graphpfn.batch_fn` (one compilation per config and size).
  """
  fn = graphpfn.batch_fn(structure_hp, attribute_hp)

  def call(key, start, count, size):
    padded = mesh_lib.padded_size(size, mesh)
    ids = np.zeros((padded,), np.int32)
    ids[:count] = np.arange(start, start + count)
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.asarray(ids))
    return mesh_lib.to_host(fn(jax.device_put(keys, mesh_lib.data_sharding(mesh))))

  return call


def _param_row(batch, i) -> list[float]:
  row = [float(np.asarray(getattr(batch.structure, f))[i]) for f in graphpfn.StructureParams._fields]
  row += [float(np.asarray(getattr(batch.attributes, f))[i]) for f in graphpfn.AttributeParams._fields if f != "activation"]
  return row


class Checkpoint(NamedTuple):
  """:class:`Tallies` as checkpointed: finite numbers, undefined statistics (NaN) stored as 0 with a mask."""

  stats: np.ndarray  # [G, len(STATS)] float64
  stats_defined: np.ndarray  # [G, len(STATS)] bool
  params: np.ndarray  # [G, len(PARAM_FIELDS)] float64
  params_defined: np.ndarray  # [G, len(PARAM_FIELDS)] bool


def _to_checkpoint(t: Tallies) -> Checkpoint:
  return Checkpoint(np.nan_to_num(t.stats), np.isfinite(t.stats), np.nan_to_num(t.params), np.isfinite(t.params))


def _from_checkpoint(state: Checkpoint) -> Tallies:
  return Tallies(np.where(state.stats_defined, state.stats, np.nan),
                 np.where(state.params_defined, state.params, np.nan))


def sample_batches(config, ctx: Context, structure_hp, attribute_hp):
  """Samples every graph (resuming from checkpoints); returns the filled :class:`Tallies` and seconds spent."""
  g, b = config.num_graphs, config.batch_size
  chunks = math.ceil(g / b)
  initial = Tallies(np.full((g, len(stats_lib.STATS)), np.nan), np.full((g, len(PARAM_FIELDS)), np.nan))
  done, state, _ = ctx.restore_or(_to_checkpoint(initial))
  tallies = _from_checkpoint(state)
  fn = _sampler(structure_hp, attribute_hp, ctx.mesh)
  base = jax.random.key(config.seed)
  progress = metrics.Progress(g, unit="graphs", start=min(done * b, g))
  progress.label = "[graphpfn_prior] "
  sample_time = 0.0
  for c in range(done, chunks):
    start, count = c * b, min(b, g - c * b)
    t0 = time.perf_counter()
    batch = fn(base, start, count, b)
    sample_time += time.perf_counter() - t0
    for i in range(count):
      row = stats_lib.graph_statistics(stats_lib.host_sample(batch, i))
      tallies.stats[start + i] = [row[k] for k in stats_lib.STATS]
      tallies.params[start + i] = _param_row(batch, i)
    ok = float(np.mean(np.asarray(batch.ok)[:count]))
    ctx.writer.log(c + 1, graphs=start + count, ok_share=ok, graphs_per_s=progress.rate(start + count),
                   mean_nodes=float(np.nanmean(tallies.stats[start:start + count, 0])))
    progress.update(start + count)
    ctx.save(c + 1, _to_checkpoint(tallies), force=c + 1 == chunks)
  return tallies, sample_time


SETTINGS_FILE = "graphpfn_prior_settings.json"
STAGED = "staged"  # the shards staged for the TFDS build, under data_dir
# What a build of the examples writes in data_dir: a data dir holding anything else is the user's, not written into.
BUILD_ENTRIES = (SETTINGS_FILE, STAGED, "downloads", prior_builder.GraphpfnPrior.name)


def tfds_settings(config, structure_hp=None, attribute_hp=None) -> dict:
  """What the examples written to a data dir depend on: the prior's hyperparameters, the seed and the count.

  The hyperparameters are ``prior_config.hparams_of(config)`` unless given.
  """
  if structure_hp is None or attribute_hp is None:
    structure_hp, attribute_hp = prior_config.hparams_of(config)
  prior = hashlib.sha256(repr((structure_hp, attribute_hp)).encode()).hexdigest()[:16]
  return {"seed": int(config.seed), "tfds_examples": int(config.tfds_examples), "prior_digest": prior}


def tfds_mismatch(data_dir: str, settings: dict, prepared: bool | None = None) -> str | None:
  """Why the examples prepared in ``data_dir`` are not those of ``settings``; ``None`` if they are or none are.

  ``prepared``: whether the TFDS builder of ``data_dir`` is prepared, if the caller knows.
  """
  if prepared is None:
    prepared = prior_builder.builder(data_dir).is_prepared()
  if not prepared:
    return _foreign(data_dir)
  path = os.path.join(data_dir, SETTINGS_FILE)
  try:
    with open(path) as f:
      made = json.load(f)
  except (OSError, ValueError) as e:
    return (f"{data_dir!r} holds prepared graphpfn_prior examples but no readable {SETTINGS_FILE} "
            f"({type(e).__name__}), so what they were sampled with is unknown: choose another data_dir")
  differ = [k for k in settings if made.get(k) != settings[k]]
  if differ:
    return (f"{data_dir!r} holds graphpfn_prior examples prepared with another " + ", ".join(
        f"{k} ({made.get(k)!r}, not {settings[k]!r})" for k in differ) + ": choose another data_dir")
  return None


def _foreign(data_dir: str) -> str | None:
  """Why the unprepared ``data_dir`` is not this experiment's to write (a file, or entries no build makes)."""
  if not os.path.exists(data_dir):
    return None
  if not os.path.isdir(data_dir):
    return f"{data_dir!r} is a file, not a directory: choose a new or empty data_dir"
  other = sorted(e for e in os.listdir(data_dir) if e not in BUILD_ENTRIES)
  if other:
    shown = ", ".join(repr(e) for e in other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
    return (f"{data_dir!r} holds no prepared graphpfn_prior examples but other entries ({shown}), among which the "
            "examples would be written: choose a new or empty data_dir")
  return None


def _data_dir_checks(config):
  """A ``data_dir`` that already holds examples holds this config's (checked before any compute)."""
  if config.tfds_examples and config.data_dir:
    why = tfds_mismatch(os.path.expanduser(config.data_dir), tfds_settings(config))
    if why:
      yield "data_dir", why


def write_tfds(config, ctx: Context, structure_hp, attribute_hp) -> dict:
  """Writes the first ``tfds_examples`` samples through the TFDS builder and reads them back.

  A data dir that is already prepared is reused only if its ``SETTINGS_FILE``
  names this config's prior, seed and count (written before the build, so
  a build killed half-way is redone, never half-trusted).
  """
  if config.tfds_examples == 0:
    return {}
  data_dir = os.path.expanduser(config.data_dir) if config.data_dir else os.path.join(ctx.workdir, "data")
  manual = os.path.join(data_dir, STAGED)
  settings = tfds_settings(config, structure_hp, attribute_hp)
  prepared = prior_builder.builder(data_dir).is_prepared()
  why = tfds_mismatch(data_dir, settings, prepared)
  if why:
    raise errors.DataError(f"'data_dir': {why}")
  fn = _sampler(structure_hp, attribute_hp, ctx.mesh)
  base = jax.random.key(config.seed)
  if not prepared:
    prior_builder.unstage(manual)  # a killed build's shards, maybe of other settings
    for shard, start in enumerate(range(0, config.tfds_examples, config.batch_size)):
      count = min(config.batch_size, config.tfds_examples - start)
      batch = fn(base, start, count, config.batch_size)
      examples = []
      for i in range(count):
        s = stats_lib.host_sample(batch, i)
        examples.append((start + i, s))
      prior_builder.stage(manual, shard, examples)
    metrics.write_json_atomic(os.path.join(data_dir, SETTINGS_FILE), settings)
    prior_builder.prepare(data_dir, manual)
  source = prior_builder.data_source(data_dir)
  first = source[0]
  return {"examples": len(source), "data_dir": os.path.relpath(data_dir, ctx.workdir),
          "first_example": {"num_nodes": int(first["x"].shape[0]), "num_edges": int(first["senders"].shape[0]),
                            "num_features": int(first["x"].shape[1]), "task": int(first["task"])}}


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Samples, probes, writes TFDS examples; returns ``results.json``'s content."""
  start = time.perf_counter()
  structure_hp, attribute_hp = prior_config.hparams_of(config)
  tallies, sample_time = sample_batches(config, ctx, structure_hp, attribute_hp)
  panel = fidelity.two_sample(config, ctx, structure_hp)
  attributes = fidelity.attribute_panel(config, ctx)
  probes = fidelity.probe(config, ctx, structure_hp, attribute_hp)
  tfds_info = write_tfds(config, ctx, structure_hp, attribute_hp)
  drawings = []
  if config.num_drawings:
    fn = _sampler(structure_hp, attribute_hp, ctx.mesh)
    batch = fn(jax.random.key(config.seed), 0, config.num_drawings, config.batch_size)
    drawings = [stats_lib.host_sample(batch, i) for i in range(config.num_drawings)]
  results = report.summarize(config, structure_hp, attribute_hp, tallies, PARAM_FIELDS, probes, tfds_info)
  results["two_sample"] = {k: v for k, v in panel.items() if k != "points"}
  results["attribute_panel"] = attributes
  # Every graph's statistics and hyperparameters, bit for bit (a resumed run must match an uninterrupted one).
  results["tallies_digest"] = hashlib.sha256(tallies.stats.tobytes() + tallies.params.tobytes()).hexdigest()
  results["sampling_s"] = sample_time
  results["wall_time_s"] = time.perf_counter() - start
  report.make_figures(results, tallies, drawings, ctx.writer)
  fidelity_report.degree_figure(panel, ctx.writer)
  return results


EXPERIMENT = Experiment(
    declaration=prior_config.SECTIONS,
    get_config=prior_config.get_config,
    run=run,
    summary=report.format_table,
    markdown=report.markdown_table,
    headline=report.headline_table,
    checks=(_data_dir_checks,),
)
