"""VarDE: Variance Driven Exploration (Luong et al., ICML 2026) and its baselines.

* Fixed-budget best-arm identification: :func:`varde` and the baselines in
  :data:`ALGORITHMS` share the :class:`BAIAlgorithm` interface and run in one
  loop, :func:`run_bai`; :func:`sweep` evaluates many algorithms over many seeds.
* Monte Carlo tree search in stochastic environments (a reconstruction):
  :mod:`methods.varde.tree_rules` (VarDE's descent with four backups and a
  scale-free temperature; UCT, MENTS, Power-UCT behind :class:`TreePolicy`),
  :mod:`methods.varde.tree_search` (the batched search over any
  :class:`Simulator`: an mctx-style decision step plus a chance step),
  :mod:`methods.varde.mcts` (hyperparameters and the tabular-MDP front end),
  :mod:`methods.varde.mctx_adapter` (mctx's own policies, including
  ``stochastic_muzero_policy``, on the same simulators) and
  :mod:`methods.varde.play2048` (whole games of 2048, one search per move).
* Best-policy identification with a generative model (a reconstruction):
  :mod:`methods.varde.bpi`.
"""

from methods.varde.bai import first_order_variance
from methods.varde.bai import log_scores
from methods.varde.bai import lse_weights
from methods.varde.bai import neyman_shares
from methods.varde.bai import varde
from methods.varde.bai import varde_scores
from methods.varde.baselines import gapev
from methods.varde.baselines import ocba
from methods.varde.baselines import ocba_targets
from methods.varde.baselines import ttts
from methods.varde.baselines import ucbe
from methods.varde.baselines import ugape
from methods.varde.baselines import uniform
from methods.varde.core import ArmStats
from methods.varde.core import BAIAlgorithm
from methods.varde.core import Oracle
from methods.varde.core import Outcome
from methods.varde.core import run_bai
from methods.varde.core import sample_variance
from methods.varde.core import stats_init
from methods.varde.core import stats_update
from methods.varde.elimination import sequential_halving
from methods.varde.elimination import shadavar
from methods.varde.elimination import shvar
from methods.varde.elimination import successive_rejects
from methods.varde.evaluate import SweepStats
from methods.varde.evaluate import run_keys
from methods.varde.evaluate import sweep

from methods.varde.suite import ALGORITHMS
from methods.varde.suite import BaselineHparams
from methods.varde.suite import Entry
from methods.varde.suite import VarDEHparams
from methods.varde.suite import build_suite
from methods.varde import bpi
from methods.varde import mcts
from methods.varde import mctx_adapter
from methods.varde import play2048
from methods.varde import tree_rules
from methods.varde import tree_search
from methods.varde.bpi import BPIHparams
from methods.varde.bpi import run_bpi
from methods.varde.mcts import MCTSHparams
from methods.varde.mcts import search
from methods.varde.mcts import tabular_simulator
from methods.varde.play2048 import GameResult
from methods.varde.play2048 import Play2048Hparams
from methods.varde.tree_rules import TreePolicy
from methods.varde.tree_search import DecisionOutput
from methods.varde.tree_search import Simulator
