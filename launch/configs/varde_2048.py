r"""2048 played by VarDE's tree search and by ``mctx.stochastic_muzero_policy``: score and largest tile.

Every searcher plays ``num_games`` games at each budget (simulations per
move), with the same simulator (``methods/varde/play2048.py``: the move is the
decision step, the random tile the chance step), the same leaf value (the
score of one random rollout of ``game.rollout_length`` moves), the same search
depth, no Dirichlet noise, and the same starting boards and tile keys (game
``g`` of every searcher starts from the same board; the tile after move ``t``
uses the same key). Games end at game over or after ``game.max_moves`` moves
(then counted as unfinished). ``game.num_simulations`` is replaced by each
value of ``budgets``. Launch from the repository root:

  python -m launch.main --config=launch/configs/varde_2048.py:cpu --workdir=runs/varde_2048
  python -m launch.main --config=launch/configs/varde_2048.py:smoke --workdir=...
  python -m launch.main --config=launch/configs/varde_2048.py:paper --workdir=...   # one GPU

Sizes: ``smoke`` (4 games x 10 moves, seconds); ``cpu`` (64 games cut at 100
moves: the cut leaves most games unfinished, so it compares the opening, not
the endgame; hours on 2 CPU cores, dominated by the 256-simulation searches);
``paper`` (128 whole games of up to 5000 moves at 16, 64 and 256 simulations,
sized for one GPU; not yet run).
"""

import dataclasses

import ml_collections

from launch.configs import common
from methods.common import hparams
from methods.varde import mcts
from methods.varde import play2048

F = hparams.field


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys."""

  searchers: tuple[str, ...] = F(("varde", "mctx_stochastic"), "Searchers (the first is the reference).",
                                 choices=play2048.SEARCHERS, nonempty=True, unique=True)
  budgets: tuple[int, ...] = F((16, 64, 256), "Simulations per move.", low=1, nonempty=True, unique=True)
  num_games: int = F(64, "Games per (searcher, budget), played in one batch.", low=2)


SECTIONS = common.declare(
    "varde_2048",
    ("", Run),
    ("game", play2048.Play2048Hparams),
    ("search", mcts.MCTSHparams),
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>"``."""
  opts = common.parse_arg(arg)
  config = SECTIONS.defaults(opts.preset)
  config.game.max_moves = 100
  if opts.preset == "smoke":
    config.budgets, config.num_games, config.game.max_moves = (4, 8), 4, 10
    config.game.rollout_length = 4
  elif opts.preset == "paper":
    config.num_games, config.game.max_moves = 128, 5000
  return config
