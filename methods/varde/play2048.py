"""Playing 2048 with a tree search: VarDE, UCT or mctx's Stochastic MuZero, one search per move.

2048 (``envs/game2048.py``) is a stochastic game no one here designed: every
move is followed by a random tile, a chance node with up to 32 outcomes.
:func:`simulator` makes it a :class:`~methods.varde.tree_search.Simulator`
(the move is the decision step, the tile the chance step, undiscounted score
increments as rewards); :func:`play` plays ``G`` games at once (``vmap`` over
games inside the search, ``lax.scan`` over moves, one search per move) and
returns each game's score and largest tile.

**Leaf value** (``leaf_value``): ``"rollout"`` is the score of one random
rollout of at most ``rollout_length`` moves (uniform over the legal moves,
the tiles sampled from the game's rules; it stops at game over), a value in
score units that is high where the board survives and merges; ``"zero"``
plans on the rewards inside the tree only. Both sides of a comparison use
the same value: ``"mctx_stochastic"`` calls the same ``value_fn``
(:func:`methods.varde.mctx_adapter.stochastic_muzero_search`).

Common random numbers: game ``g`` starts from the same board for every
searcher, and the tile after move ``t`` is drawn with the same key (the games
diverge once the searchers' moves differ).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from envs import game2048
from methods.common import hparams
from methods.varde import mcts
from methods.varde import mctx_adapter
from methods.varde import tree_search

LEAF_VALUES = ("rollout", "zero")
SEARCHERS = mcts.POLICIES + ("mctx_stochastic",)


@dataclasses.dataclass(frozen=True)
class Play2048Hparams(hparams.Hyperparameters):
  """How the searches play 2048 (the tree policies' own hyperparameters are :class:`~methods.varde.mcts.MCTSHparams`)."""

  num_simulations: int = hparams.field(64, "Simulations per move.", low=1)
  horizon: int = hparams.field(8, "Search depth in moves below the root.", low=1)
  leaf_value: str = hparams.field("rollout", "Value of a new node: a random rollout's score or zero.",
                                  choices=LEAF_VALUES)
  rollout_length: int = hparams.field(16, "Moves of a leaf rollout (it stops earlier at game over).", low=1)
  max_moves: int = hparams.field(2000, "Moves after which a game is cut (reported as unfinished).", low=1)


class GameResult(NamedTuple):
  """Result of ``G`` games.

  Attributes:
    score: ``[G]`` float32 final scores (sum of merged tiles).
    max_tile: ``[G]`` int32 largest tile.
    moves: ``[G]`` int32 moves played.
    finished: ``[G]`` bool games that ended (no legal move) within ``max_moves``.
  """

  score: jax.Array
  max_tile: jax.Array
  moves: jax.Array
  finished: jax.Array


def rollout_value(key: jax.Array, board: jax.Array, length: int) -> jax.Array:
  """``[]`` score of ``length`` uniformly random legal moves from ``board`` (stops at game over)."""

  def body(t, carry):
    b, total, alive = carry
    k_move, k_tile = jax.random.split(jax.random.fold_in(key, t))
    afters, rewards = game2048.all_moves(b)
    legal = jnp.any(afters != b[None], axis=-1)
    alive = alive & jnp.any(legal)
    a = jax.random.categorical(k_move, jnp.where(legal, 0.0, -jnp.inf))
    a = jnp.where(alive, a, 0)
    _, nxt = game2048.sample_chance(k_tile, afters[a])
    return jnp.where(alive, nxt, b), total + jnp.where(alive, rewards[a], 0.0), alive

  _, total, _ = jax.lax.fori_loop(0, length, body, (board, jnp.float32(0.0), jnp.asarray(True)))
  return total


def simulator(*, leaf_value: str = "rollout", rollout_length: int = 16) -> tree_search.Simulator:
  """2048 as a simulator: ``params`` unused (``None``), embeddings ``[16]`` boards, afterstates boards.

  Args:
    leaf_value: ``"rollout"`` or ``"zero"`` (module docstring).
    rollout_length: moves of a rollout.
  """
  if leaf_value not in LEAF_VALUES:
    raise ValueError(f"leaf_value={leaf_value!r}; allowed: {LEAF_VALUES}")

  def decision_fn(params, key, action, board):
    del params, key
    after, reward = game2048.move(board, action)
    return tree_search.DecisionOutput(reward, jnp.float32(1.0)), after

  def value_fn(params, key, board, steps_left):
    del params, steps_left
    if leaf_value == "zero":
      return jnp.float32(0.0)
    return rollout_value(key, board, rollout_length)

  logits_fn = lambda params, after: game2048.chance_logits(after)  # noqa: E731
  apply_fn = lambda params, outcome, after: game2048.apply_chance(after, outcome)  # noqa: E731
  return tree_search.Simulator(
      decision_fn=decision_fn,
      chance_fn=tree_search.chance_from_logits(logits_fn, apply_fn),
      value_fn=value_fn,
      terminal_fn=lambda params, board: game2048.is_terminal(board),
      legal_fn=lambda params, board: game2048.legal_actions(board),
      num_actions=game2048.NUM_ACTIONS,
      num_outcomes=game2048.NUM_OUTCOMES,
      chance_logits_fn=logits_fn,
      chance_apply_fn=apply_fn,
  )


def choose_moves(searcher: str, boards: jax.Array, key: jax.Array, *, hp: Play2048Hparams,
                 search_hp: mcts.MCTSHparams) -> jax.Array:
  """``[G]`` moves of ``searcher`` (one of :data:`SEARCHERS`) from ``boards [G, 16]``."""
  sim = simulator(leaf_value=hp.leaf_value, rollout_length=hp.rollout_length)
  if searcher == "mctx_stochastic":
    return mctx_adapter.stochastic_muzero_search(sim, None, boards, key, num_simulations=hp.num_simulations,
                                                 horizon=hp.horizon, batched_params=False)[0]
  policy = mcts.make_policy(searcher, search_hp)
  return tree_search.search(sim, None, boards, key, policy=policy, num_simulations=hp.num_simulations,
                            horizon=hp.horizon, batched_params=False).action


def play(key: jax.Array, *, num_games: int, searcher: str, hp: Play2048Hparams,
         search_hp: mcts.MCTSHparams | None = None, max_moves: jax.Array | None = None) -> GameResult:
  """Plays ``num_games`` games of 2048 with ``searcher`` choosing every move.

  Pure and jit-able (bind the keyword arguments with ``functools.partial``):
  the games advance together, one batched search per move, in a
  ``lax.while_loop`` that stops after ``hp.max_moves`` moves or when every
  game has ended; finished games stay put.

  Args:
    key: randomness of the initial boards (``fold_in(key, 0)``), the tiles
      (``fold_in(key, 1)``, then per move) and the searches (``fold_in(key, 2)``).
    num_games: static ``G``.
    searcher: one of :data:`SEARCHERS` (``"mctx_stochastic"``:
      ``mctx.stochastic_muzero_policy`` with the same simulator, leaf value
      and budget, no Dirichlet noise).
    hp: budget, depth, leaf value and game length.
    search_hp: the tree policies' hyperparameters (default :class:`~methods.varde.mcts.MCTSHparams`).
    max_moves: a traced bound that replaces ``hp.max_moves`` (one compilation for every game length).

  Returns:
    Scores, largest tiles, moves played and whether each game ended.
  """
  if searcher not in SEARCHERS:
    raise ValueError(f"searcher={searcher!r}; allowed: {SEARCHERS}")
  search_hp = search_hp or mcts.MCTSHparams()
  limit = hp.max_moves if max_moves is None else max_moves
  k_init, k_tiles, k_search = (jax.random.fold_in(key, i) for i in range(3))
  boards = jax.vmap(game2048.init)(jax.random.split(k_init, num_games))
  zeros = jnp.zeros((num_games,), jnp.int32)

  def cond(carry):
    t, _, _, _, done = carry
    return (t < limit) & ~jnp.all(done)

  def body(carry):
    t, boards, score, moves, done = carry
    action = choose_moves(searcher, boards, jax.random.fold_in(k_search, t), hp=hp, search_hp=search_hp)
    tile_keys = jax.random.split(jax.random.fold_in(k_tiles, t), num_games)
    nxt, reward = jax.vmap(game2048.step)(tile_keys, boards, action)
    boards = jnp.where(done[:, None], boards, nxt)
    score = score + jnp.where(done, 0.0, reward)
    moves = moves + (~done).astype(jnp.int32)
    return t + 1, boards, score, moves, done | jax.vmap(game2048.is_terminal)(boards)

  done = jax.vmap(game2048.is_terminal)(boards)
  init = (jnp.int32(0), boards, jnp.zeros((num_games,), jnp.float32), zeros, done)
  _, boards, score, moves, done = jax.lax.while_loop(cond, body, init)
  return GameResult(score, jax.vmap(game2048.max_tile)(boards), moves, done)
