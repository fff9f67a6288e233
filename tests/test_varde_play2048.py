"""2048 played by the searches: legal moves only, the same starting boards, game results."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import game2048
from methods.varde import mcts
from methods.varde import play2048

HP = play2048.Play2048Hparams(num_simulations=8, horizon=4, rollout_length=4, max_moves=5)


def _boards():
  """Random mid-game boards and one where only ``down`` (3) is legal."""
  keys = jax.random.split(jax.random.key(0), 5)
  boards = jax.vmap(lambda k: jax.random.choice(k, jnp.arange(6), (16,), p=jnp.array([4, 3, 2, 1, 1, 1]) / 12))(keys)
  only_down = jnp.array([1, 2, 3, 4] + [0] * 12, jnp.int32)
  return jnp.concatenate([boards.astype(jnp.int32), only_down[None]])


@pytest.mark.parametrize("searcher", ["varde", "mctx_stochastic"])
def test_searches_choose_legal_moves(searcher):
  boards = _boards()
  legal = np.asarray(jax.vmap(game2048.legal_actions)(boards))
  assert legal[-1].tolist() == [False, False, False, True] and legal.any(-1).all()
  moves = jax.jit(lambda b, k: play2048.choose_moves(searcher, b, k, hp=HP, search_hp=mcts.MCTSHparams()))(
      boards, jax.random.key(1))
  moves = np.asarray(moves)
  chex.assert_shape(moves, (len(legal),))
  assert legal[np.arange(len(moves)), moves].all(), (moves, legal)


def test_games_start_alike_and_report_scores_and_tiles():
  res = {s: jax.jit(lambda k, s=s: play2048.play(k, num_games=3, searcher=s, hp=HP))(jax.random.key(2))
         for s in ("varde", "uct")}
  for r in res.values():
    chex.assert_shape([r.score, r.max_tile, r.moves, r.finished], [(3,)] * 4)
    np.testing.assert_array_equal(r.moves, 5)  # no game ends within 5 moves of the start
    assert (np.asarray(r.score) >= 0).all() and (np.asarray(r.max_tile) >= 4).all()
    assert (np.asarray(r.score) % 4 == 0).all()  # sums of merged tiles
  start = jax.vmap(game2048.init)(jax.random.split(jax.random.fold_in(jax.random.key(2), 0), 3))
  assert int(jnp.sum(start > 0)) == 6  # the boards both searchers started from


def test_rollout_value_is_zero_at_game_over_and_a_score_otherwise():
  full = jnp.array([1, 2, 1, 2, 2, 1, 2, 1, 1, 2, 1, 2, 2, 1, 2, 1], jnp.int32)
  assert float(play2048.rollout_value(jax.random.key(0), full, 8)) == 0.0
  start = game2048.init(jax.random.key(3))
  values = jax.vmap(lambda k: play2048.rollout_value(k, start, 30))(jax.random.split(jax.random.key(4), 64))
  assert float(values.mean()) > 0 and (np.asarray(values) % 4 == 0).all()
