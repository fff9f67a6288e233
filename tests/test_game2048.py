"""2048 in pure JAX against pgx's rules on random games, and its chance distribution."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pgx  # a test dependency (setup.cfg [test]); the environment itself imports only JAX
import pytest

from envs import game2048


def _board(rows):
  return jnp.asarray(np.array(rows, np.int32).reshape(16))


@pytest.mark.parametrize("row, action, expected, reward", [
    ([1, 1, 1, 1], 0, [2, 2, 0, 0], 8),  # each tile merges once, from the move's side
    ([1, 1, 1, 0], 0, [2, 1, 0, 0], 4),
    ([0, 1, 0, 1], 0, [2, 0, 0, 0], 4),
    ([2, 1, 1, 0], 0, [2, 2, 0, 0], 4),  # no chain merge of the new 4 with the 4
    ([3, 3, 2, 2], 2, [0, 0, 4, 3], 24),
    ([1, 2, 3, 4], 0, [1, 2, 3, 4], 0),
])
def test_a_line_slides_and_merges(row, action, expected, reward):
  board = _board([row] + [[0] * 4] * 3)
  after, r = game2048.move(board, action)
  np.testing.assert_array_equal(np.asarray(after)[:4], expected)
  assert float(r) == reward
  # The same line as a column, moved up or down.
  col = _board(np.array([row] + [[0] * 4] * 3).T)
  after, r = game2048.move(col, {0: 1, 2: 3}[action])
  np.testing.assert_array_equal(np.asarray(after).reshape(4, 4)[:, 0], expected)
  assert float(r) == reward


def _pgx_games(num_games, steps, seed):
  """Random legal play in pgx: boards before and after each step, actions, rewards, masks, terminals."""
  env = pgx.make("2048")
  keys = jax.random.split(jax.random.key(seed), num_games)
  state = jax.vmap(env.init)(keys)

  def body(state, t):
    k_act, k_step = jax.random.split(jax.random.fold_in(jax.random.key(seed + 1), t))
    logits = jnp.where(state.legal_action_mask, 0.0, -jnp.inf)
    action = jax.random.categorical(k_act, logits, axis=-1)
    nxt = jax.vmap(env.step)(state, action, jax.random.split(k_step, num_games))
    rec = (state._board, state.terminated, action, nxt._board, nxt.rewards[:, 0], nxt.legal_action_mask,
           nxt.terminated)
    return nxt, rec

  _, rec = jax.jit(lambda s: jax.lax.scan(body, s, jnp.arange(steps)))(state)
  before, done_before, action, after, reward, legal, terminated = (np.asarray(x).reshape((-1,) + x.shape[2:])
                                                                    for x in rec)
  live = ~done_before
  return before[live], action[live], after[live], reward[live], legal[live], terminated[live]


@pytest.fixture(scope="module")
def pgx_record():
  return _pgx_games(64, 400, seed=0)


def test_moves_rewards_legality_and_game_over_match_pgx(pgx_record):
  before, action, after, reward, legal, terminated = pgx_record
  assert len(action) > 5000 and terminated.sum() >= 16  # many moves, games played to the end
  ours_after, ours_reward = jax.jit(jax.vmap(game2048.move))(jnp.asarray(before), jnp.asarray(action))
  ours_after = np.asarray(ours_after)
  np.testing.assert_array_equal(np.asarray(ours_reward), reward)
  # pgx's board = our afterstate plus exactly one new 2 or 4 in one of its empty cells.
  diff = after != ours_after
  assert (diff.sum(-1) == 1).all()
  assert (ours_after[diff] == 0).all() and np.isin(after[diff], [1, 2]).all()
  ours_terminal = np.asarray(jax.vmap(game2048.is_terminal)(jnp.asarray(after)))
  np.testing.assert_array_equal(ours_terminal, terminated)
  ours_legal = np.asarray(jax.vmap(game2048.legal_actions)(jnp.asarray(after)))
  np.testing.assert_array_equal(ours_legal[~terminated], legal[~terminated])  # pgx sets all True at the end


def _spawn_test(afterstates, cells, fours):
  """Tile kind 0.9/0.1 and uniform cell among the empty ones, each within 4.5 standard errors."""
  n = len(cells)
  p4 = fours.mean()
  assert abs(p4 - 0.1) < 4.5 * math.sqrt(0.09 / n), p4
  empty = afterstates == 0
  p_cell = empty / empty.sum(-1, keepdims=True)  # [n, 16] chance of each cell
  observed = np.bincount(cells, minlength=16)
  expected = p_cell.sum(0)
  sd = np.sqrt((p_cell * (1 - p_cell)).sum(0))
  assert (np.abs(observed - expected) < 4.5 * sd + 1e-9).all(), (observed, expected)


def test_pgx_tiles_follow_the_chance_distribution(pgx_record):
  before, action, after, _, _, _ = pgx_record
  ours_after = np.asarray(jax.jit(jax.vmap(game2048.move))(jnp.asarray(before), jnp.asarray(action))[0])
  cell = np.argmax(after != ours_after, -1)
  _spawn_test(ours_after, cell, after[np.arange(len(cell)), cell] == 2)


def test_our_chance_step_has_the_same_distribution(pgx_record):
  before, action, _, _, _, _ = pgx_record
  afters = jax.jit(jax.vmap(game2048.move))(jnp.asarray(before), jnp.asarray(action))[0]
  probs = np.asarray(jax.vmap(game2048.chance_probs)(afters))
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(probs[:, 1::2].sum(-1), 0.1, rtol=1e-5)  # a 4 w.p. 0.1
  outcome, boards = jax.jit(jax.vmap(game2048.sample_chance))(jax.random.split(jax.random.key(5), len(afters)), afters)
  outcome, boards, afters = (np.asarray(x) for x in (outcome, boards, afters))
  cell = outcome // 2
  np.testing.assert_array_equal(boards[np.arange(len(cell)), cell], 1 + outcome % 2)
  assert (afters[np.arange(len(cell)), cell] == 0).all()
  _spawn_test(afters, cell, outcome % 2 == 1)


def test_step_init_and_max_tile():
  board = game2048.init(jax.random.key(0))
  assert int((np.asarray(board) > 0).sum()) == 2
  full = _board([[1, 2, 1, 2], [2, 1, 2, 1], [1, 2, 1, 2], [2, 1, 2, 11]])
  assert bool(game2048.is_terminal(full))
  nxt, r = game2048.step(jax.random.key(1), full, jnp.int32(0))  # illegal: nothing happens
  np.testing.assert_array_equal(nxt, full)
  assert float(r) == 0.0 and int(game2048.max_tile(full)) == 2048
