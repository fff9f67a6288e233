"""Experiment ``graphpfn``: pretrain the GraphPFN network on the prior, then predict node labels in context.

Config: ``launch/configs/graphpfn.py``. :func:`run` pretrains
(:mod:`launch.experiments.graphpfn.pretrain`: streamed prior batches in size
buckets, AdamW with warmup and cosine decay, the batch sharded over the
mesh, checkpoints that resume bit-identically, the learning curve), then
scores the final network in context against the per-graph baselines
(:mod:`launch.experiments.graphpfn.evaluate`) and writes the tables and
``curve.png`` (:mod:`launch.experiments.graphpfn.model_report`).

A ``planetoid_dir`` is read and checked before pretraining (a bad file is a
config error naming it), and its graph's ``ind.<name>.*`` files are inputs
of the run: a resume after one changed is refused.
"""

from __future__ import annotations

import time

import ml_collections

from datasets.graphs import planetoid
from launch import mesh as mesh_lib
from launch.configs import graphpfn as gcfg
from launch.experiments.graphpfn import evaluate, pretrain
from launch.experiments.graphpfn import model_report as report
from launch.runtime import Context, Experiment


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Pretrains, evaluates in context; returns ``results.json``'s content."""
  start = time.perf_counter()
  hp = gcfg.hparams_of(config)
  state, facts = pretrain.pretrain(config, ctx, hp)
  train_time = time.perf_counter() - start
  params, borders = state.train.params, state.borders
  results = {
      "steps": hp.train.total_steps, "devices": mesh_lib.describe_devices(), "train_time_s": train_time,
      "param_digest": pretrain.digest(state.train.params), "curve_graphs": hp.run.curve_graphs,
      "curve": pretrain.curve_of(state, facts["curve_steps"]), **facts}
  for key in ("held_out", "shifted"):
    t0 = time.perf_counter()
    results[key] = evaluate.prior_setting(params, borders, hp, config.seed, shifted=key == "shifted")
    results[key]["eval_s"] = time.perf_counter() - t0
  results["karate"] = evaluate.karate(params, borders, hp, config.seed)
  results["planetoid"] = evaluate.planetoid_graph(params, borders, hp, config.seed)
  results["wall_time_s"] = time.perf_counter() - start
  report.make_figures(results, ctx.writer)
  return results


def _planetoid_checks(config):
  """The Planetoid graph of ``planetoid_dir`` reads and fits the model, before any pretraining."""
  if not config.planetoid_dir:
    if config.planetoid_name != gcfg.Run.planetoid_name:
      yield "planetoid_name", (f"{config.planetoid_name!r} is read from planetoid_dir, which is not set "
                               f"(--config.planetoid_dir=DIR, the directory of its ind.{config.planetoid_name}.* files)")
    return
  why = planetoid.name_problem(config.planetoid_name)
  if why:
    yield "planetoid_name", why
    return
  try:
    evaluate.planetoid_task(gcfg.hparams_of(config))
  except ValueError as e:  # planetoid.PlanetoidFormatError included (an unreadable file is one)
    yield "planetoid_dir", str(e)


def _planetoid_files(config) -> list[tuple[str, str]]:
  """The files of ``planetoid_name`` in ``planetoid_dir``: inputs of the run."""
  if not config.planetoid_dir or planetoid.name_problem(config.planetoid_name):
    return []
  return [("planetoid_dir", path) for path in planetoid.paths(config.planetoid_dir, config.planetoid_name)]


EXPERIMENT = Experiment(
    declaration=gcfg.SECTIONS,
    get_config=gcfg.get_config,
    run=run,
    summary=report.format_table,
    markdown=report.markdown_table,
    headline=report.headline_table,
    checks=(_planetoid_checks,),
    inputs=_planetoid_files,
)
