"""2048 in pure JAX, with the move (afterstate) separated from the random tile (chance).

The game of Gabriele Cirulli (2014), with the rules of the ``pgx`` package
(Koyamada et al., "Pgx: Hardware-accelerated parallel game simulators for
reinforcement learning", NeurIPS 2023 Datasets and Benchmarks), against which
``tests/test_game2048.py`` checks them on random games. A board is ``[16]``
int32 exponents in row-major order (0: empty, ``k``: a tile ``2^k``).

* A move (action 0 left, 1 up, 2 right, 3 down) slides every line towards
  the move's side, merging equal neighbours once each, from that side; the
  reward is the sum of the merged tiles' values (the score increment). The
  result is the *afterstate* (:func:`move`).
* A move is legal if it changes the board (:func:`legal_actions`); the game
  ends when no move is legal (:func:`is_terminal`).
* Then nature moves (the *chance node*): a uniformly chosen empty cell gets a
  2 with probability 0.9 or a 4 with probability 0.1. Chance outcomes are
  numbered ``o = 2 * cell + (tile == 4)``, ``M = 32`` (:func:`chance_probs`,
  :func:`apply_chance`, :func:`sample_chance`).
* A game starts with two random tiles on the empty board (:func:`init`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NUM_ACTIONS = 4
NUM_OUTCOMES = 32
ACTION_NAMES = ("left", "up", "right", "down")
P_FOUR = 0.1


def _line_indices() -> np.ndarray:
  """``[4 actions, 4 lines, 4 cells]`` board indices of each line, read from the move's side."""
  grid = np.arange(16).reshape(4, 4)
  return np.stack([grid, grid.T, grid[:, ::-1], grid.T[:, ::-1]])


LINES = _line_indices()


def _slide_lines(lines: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Slides ``[L, 4]`` lines towards index 0 and merges; returns ``(lines, reward [])``."""
  # Stable compaction of the non-empty tiles to the front.
  order = jnp.argsort(lines == 0, axis=-1, stable=True)
  x = jnp.take_along_axis(lines, order, axis=-1)
  reward = jnp.int32(0)
  cols = [x[:, i] for i in range(4)]
  for i in range(3):
    merge = (cols[i] != 0) & (cols[i] == cols[i + 1])
    cols[i] = jnp.where(merge, cols[i] + 1, cols[i])
    cols[i + 1] = jnp.where(merge, 0, cols[i + 1])
    reward = reward + jnp.sum(jnp.where(merge, jnp.left_shift(1, cols[i]), 0))
  x = jnp.stack(cols, axis=-1)
  order = jnp.argsort(x == 0, axis=-1, stable=True)
  return jnp.take_along_axis(x, order, axis=-1), reward


def move(board: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The afterstate of ``action`` and its reward.

  Args:
    board: ``[16]`` int32 exponents.
    action: scalar int, 0 left, 1 up, 2 right, 3 down.

  Returns:
    ``(afterstate [16] int32, reward [] float32)``; an illegal move returns
    the board unchanged with reward 0.
  """
  idx = jnp.asarray(LINES)[action]  # [4, 4]
  lines, reward = _slide_lines(board[idx])
  return board.at[idx].set(lines), reward.astype(jnp.float32)


def all_moves(board: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(afterstates [4, 16], rewards [4])`` of the four moves."""
  return jax.vmap(lambda a: move(board, a))(jnp.arange(NUM_ACTIONS))


def legal_actions(board: jax.Array) -> jax.Array:
  """``[4]`` bool: the moves that change the board."""
  after, _ = all_moves(board)
  return jnp.any(after != board[None], axis=-1)


def is_terminal(board: jax.Array) -> jax.Array:
  """``[]`` bool: no legal move."""
  return ~jnp.any(legal_actions(board))


def chance_probs(afterstate: jax.Array) -> jax.Array:
  """``[32]`` probabilities of the outcomes ``2 * cell + (tile == 4)`` (all 0 on a full board)."""
  empty = (afterstate == 0).astype(jnp.float32)
  cell = empty / jnp.maximum(jnp.sum(empty), 1.0)
  return jnp.stack([cell * (1.0 - P_FOUR), cell * P_FOUR], axis=-1).reshape(NUM_OUTCOMES)


def chance_logits(afterstate: jax.Array) -> jax.Array:
  """``[32]`` log of :func:`chance_probs` (``-inf`` for impossible outcomes)."""
  return jnp.log(chance_probs(afterstate))


def apply_chance(afterstate: jax.Array, outcome: jax.Array) -> jax.Array:
  """The board after outcome ``outcome`` (tile ``2^(1 + outcome % 2)`` at cell ``outcome // 2``).

  A full board (no empty cell: no possible outcome) is returned unchanged.
  """
  cell, four = outcome // 2, outcome % 2
  full = jnp.all(afterstate != 0)
  return jnp.where(full, afterstate, afterstate.at[cell].set(1 + four))


def sample_chance(key: jax.Array, afterstate: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(outcome [] int32, board [16])``: a random tile in a uniformly chosen empty cell."""
  outcome = jax.random.categorical(key, chance_logits(afterstate)).astype(jnp.int32)
  return outcome, apply_chance(afterstate, outcome)


def step(key: jax.Array, board: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
  """A full move: ``(next board, reward)``; ``key`` samples the new tile (only if the move is legal)."""
  after, reward = move(board, action)
  moved = jnp.any(after != board)
  _, nxt = sample_chance(key, after)
  return jnp.where(moved, nxt, board), reward


def init(key: jax.Array) -> jax.Array:
  """A new game: two random tiles on the empty board."""
  k1, k2 = jax.random.split(key)
  board = jnp.zeros((16,), jnp.int32)
  board = sample_chance(k1, board)[1]
  return sample_chance(k2, board)[1]


def max_tile(board: jax.Array) -> jax.Array:
  """``[]`` int32 value of the largest tile (0 on an empty board)."""
  top = jnp.max(board)
  return jnp.where(top > 0, jnp.left_shift(1, top), 0)
