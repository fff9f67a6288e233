"""Experiment ``varde_2048``: whole games of 2048, VarDE's search against mctx's Stochastic MuZero.

Config and protocol: ``launch/configs/varde_2048.py``; the games:
:func:`methods.varde.play2048.play` (one batched search per move). One unit
is one (budget, searcher): its games are played in one jitted call and the
per-game scores, largest tiles and moves are checkpointed (in the
checkpoint's metadata), so a killed run resumes at the next unit. Games are
paired across searchers (same starting board and tile keys), so the score
difference to the reference searcher (the first) has the standard error of
the per-game differences. The VarDE tree rule is a reconstruction (Luong et
al., "Variance Driven Exploration", ICML 2026, Section 4).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import ml_collections
import numpy as np

from launch import metrics
from launch.configs import varde_2048 as game_config
from launch.experiments.varde import search_report
from launch.runtime import Context, Experiment
from methods.varde import mcts
from methods.varde import play2048

NAMES = {"varde": "VarDE", "mctx_stochastic": "mctx stochastic MuZero", "uct": "UCT", "ments": "MENTS",
         "power_uct": "Power-UCT"}


def play_unit(config, searcher: str, budget: int) -> dict:
  """Per-game ``score``, ``max_tile``, ``moves``, ``finished`` lists and the wall time of one unit."""
  hp = dataclasses.replace(game_config.SECTIONS.build(config, play2048.Play2048Hparams), num_simulations=budget)
  search_hp = game_config.SECTIONS.build(config, mcts.MCTSHparams)
  fn = jax.jit(lambda key: play2048.play(key, num_games=config.num_games, searcher=searcher, hp=hp,
                                         search_hp=search_hp))
  start = time.perf_counter()
  res = jax.tree.map(np.asarray, jax.block_until_ready(fn(jax.random.key(config.seed))))
  return {"score": res.score.tolist(), "max_tile": res.max_tile.tolist(), "moves": res.moves.tolist(),
          "finished": res.finished.tolist(), "seconds": time.perf_counter() - start}


def _mean_se(x) -> list[float]:
  x = np.asarray(x, np.float64)
  return [float(x.mean()), search_report.stderr(x)]


def summarize(config, games: dict) -> dict:
  """Means, standard errors over games and paired differences to the reference searcher."""
  ref = config.searchers[0]
  table = {}
  for budget in config.budgets:
    row = {}
    for s in config.searchers:
      g = games[f"{s}/{budget}"]
      d = np.asarray(g["score"]) - np.asarray(games[f"{ref}/{budget}"]["score"])
      tiles = np.asarray(g["max_tile"])
      row[s] = {"score": _mean_se(g["score"]), "max_tile": _mean_se(tiles), "score_diff": _mean_se(d),
                "tile_at_least": {str(t): float(np.mean(tiles >= t)) for t in (256, 512, 1024, 2048)},
                "moves": float(np.mean(g["moves"])), "finished": float(np.mean(g["finished"])),
                "ms_per_move": 1e3 * g["seconds"] / max(float(np.sum(g["moves"])), 1.0)}
    table[str(budget)] = row
  return {"experiment": "varde_2048", "searchers": list(config.searchers), "budgets": list(config.budgets),
          "num_games": config.num_games, "max_moves": config.game.max_moves, "leaf_value": config.game.leaf_value,
          "rollout_length": config.game.rollout_length, "horizon": config.game.horizon, "table": table}


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Plays every (budget, searcher) unit; returns ``results.json``'s content (with the per-game data)."""
  units = [(b, s) for b in config.budgets for s in config.searchers]
  done, _, meta = ctx.restore_or({"unit": np.zeros((), np.int32)})
  games = dict((meta or {}).get("games", {}))
  progress = metrics.Progress(len(units), unit="units", start=done)
  start = time.perf_counter()
  for u in range(done, len(units)):
    budget, searcher = units[u]
    g = play_unit(config, searcher, budget)
    games[f"{searcher}/{budget}"] = g
    ctx.writer.log(u + 1, **{f"score/{searcher}/{budget}": float(np.mean(g["score"])),
                             f"max_tile/{searcher}/{budget}": float(np.mean(g["max_tile"]))})
    progress.label = f"[varde_2048 {searcher} {budget} sims] "
    progress.update(u + 1)
    ctx.save(u + 1, {"unit": np.asarray(u + 1, np.int32)}, {"games": games}, force=u + 1 == len(units))
  res = summarize(config, games)
  res["games"] = games
  res["wall_time_s"] = time.perf_counter() - start
  return res


def markdown(res: dict) -> str:
  """Score and largest tile per (budget, searcher), the paired score difference, moves and cost."""
  ref = res["searchers"][0]
  cut = f"games cut after {res['max_moves']} moves"
  leaf = (f"random rollout of {res['rollout_length']} moves" if res["leaf_value"] == "rollout"
          else res["leaf_value"])
  out = [f"{res['num_games']} games per row (same boards and tile keys for every searcher; {cut}); leaf value: "
         f"{leaf}; search depth {res['horizon']} moves. Mean (s.e. over games); score difference to "
         f"{NAMES.get(ref, ref)} paired by game, +- 1.96 s.e.\n",
         "| sims/move | searcher | score | largest tile | P(tile >= 512) | difference in score | moves | ended | "
         "ms/move |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
  for budget in (str(b) for b in res["budgets"]):
    for s in res["searchers"]:
      r = res["table"][budget][s]
      diff = "" if s == ref else f"{r['score_diff'][0]:+.0f} +- {1.96 * r['score_diff'][1]:.0f}"
      out.append(f"| {budget} | {NAMES.get(s, s)} | {r['score'][0]:.0f} ({r['score'][1]:.0f}) | "
                 f"{r['max_tile'][0]:.0f} ({r['max_tile'][1]:.0f}) | {r['tile_at_least']['512']:.2f} | {diff} | "
                 f"{r['moves']:.0f} | {100 * r['finished']:.0f}% | {r['ms_per_move']:.1f} |")
  return "\n".join(out) + "\n"


EXPERIMENT = Experiment(
    declaration=game_config.SECTIONS,
    get_config=game_config.get_config,
    run=run,
    summary=markdown,
    markdown=markdown,
)
