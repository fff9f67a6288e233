r"""``make bench`` row: 2048 played by VarDE's search and by ``mctx.stochastic_muzero_policy``.

The score and largest tile over whole games at three budgets are the
experiment ``varde_2048`` (``launch/configs/varde_2048.py``); this row gives
the cost side by side. Both searchers get the same simulator
(``methods/varde/play2048.py``), the same leaf value, the same simulations per
move, no Dirichlet noise, and the same starting boards and tile keys
(:func:`methods.varde.play2048.play`). :func:`summary` gives the mean score
and largest tile with standard errors over games, the fraction of games that
ended within ``max_moves``, and the wall time per game and per move. Both
searchers play in alternating rounds (``timing.timed_together``), each its
best warm call; each compiles in a first call of one move (the move bound is
traced), not in one more whole game.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from launch import mesh as mesh_lib
from launch.bench import timing
from methods.varde import mcts
from methods.varde import play2048


def play_fn(searcher: str, num_games: int, hp: play2048.Play2048Hparams, search_hp: mcts.MCTSHparams):
  """Jitted ``(key, max_moves) -> GameResult`` (``max_moves`` traced: one compilation for every length)."""

  def fn(key, max_moves):
    h = dataclasses.replace(hp, max_moves=1)  # the static field is unused below: the bound is traced
    return play2048.play(key, num_games=num_games, searcher=searcher, hp=h, search_hp=search_hp,
                         max_moves=max_moves)

  return jax.jit(fn)


def play_call(searcher, sims, games, max_moves, hp, search_hp, seed=0):
  """``(fn, args, warm-up args)``: ``fn(*args)`` plays ``games`` games of at most ``max_moves`` moves at ``sims``
  simulations; ``fn(*warm-up args)`` the same games cut at one move (the same program, to compile it)."""
  fn = play_fn(searcher, games, dataclasses.replace(hp, num_simulations=sims), search_hp)
  key = jax.random.key(seed)
  return fn, (key, max_moves), (key, 1)


def summary(searcher, sims, max_moves, t: timing.Timed) -> dict:
  """``dict`` of score, largest tile, finished games and seconds per game / per move of one timed :func:`play_call`."""
  res = jax.tree.map(np.asarray, t.output)
  games, moves, wall = len(res.score), float(res.moves.sum()), t.warm
  se = lambda x: float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")  # noqa: E731
  return {
      "searcher": searcher, "simulations": sims, "games": games, "max_moves": max_moves,
      "score": float(res.score.mean()), "score_se": se(res.score),
      "max_tile": float(res.max_tile.mean()), "max_tile_se": se(res.max_tile.astype(np.float64)),
      "max_tiles": np.bincount(np.log2(np.maximum(res.max_tile, 1)).astype(int), minlength=13).tolist(),
      "finished": float(res.finished.mean()), "moves_per_game": moves / games,
      "seconds": wall, "seconds_per_game": wall / games, "ms_per_move": 1e3 * wall / max(moves, 1.0),
      "compile_seconds": t.compile_seconds, "timed_calls": t.calls,
  }


def run(quick: bool) -> list[dict]:
  """``make bench`` row: VarDE against Stochastic MuZero on 2048, simulations per second and score."""
  games, sims, max_moves = (4, 16, 20) if quick else (16, 64, 100)
  hp = play2048.Play2048Hparams()
  rows = []
  searchers = ("varde", "mctx_stochastic")
  fns, args, warmup = zip(*(play_call(s, sims, games, max_moves, hp, mcts.MCTSHparams()) for s in searchers))
  timed = timing.timed_together(list(zip(fns, args)), repeats=2, warmup=warmup)
  ours, theirs = (summary(s, sims, max_moves, t) for s, t in zip(searchers, timed))
  rate = lambda m: m["moves_per_game"] * m["games"] * sims / m["seconds"]  # noqa: E731
  rows.append({
      "benchmark": f"2048, VarDE vs Stochastic MuZero ({games} games x {max_moves} moves, {sims} sims/move, "
                   f"rollout leaf value of {hp.rollout_length} moves)",
      "ours": rate(ours), "peer": rate(theirs), "unit": "sims/s",
      "peer_name": "mctx.stochastic_muzero_policy (same simulator and value)",
      "ratio": rate(ours) / rate(theirs),
      "notes": (f"{mesh_lib.describe_devices()}; compile excluded; both timed in alternating rounds, each its best "
                f"of {ours['timed_calls']} calls; score after {max_moves} moves "
                f"{ours['score']:.0f} ± {ours['score_se']:.0f} (VarDE) vs {theirs['score']:.0f} ± "
                f"{theirs['score_se']:.0f} (mctx)"),
  })
  return rows
