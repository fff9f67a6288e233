"""ModelSMC: discovering mechanistic ODE models by SMC over model structures.

Wahl, Schenk, Farnoud, Macke and Gedon, "A Probabilistic Framework for
LLM-Based Model Discovery" (ICML 2026), rebuilt in JAX with the posterior
over structures ``p(m | x) ∝ p(m) Z(m)`` as the target:

* :mod:`expr` (with :mod:`expr_tree`, :mod:`expr_walk`) / :mod:`interpret`:
  the safe expression language and its interpreter to ``jnp``;
* :mod:`structure` / :mod:`grammar`: structures, their prior
  (:class:`PriorConfig`), the exact-density grammar proposal;
* :mod:`model` / :mod:`fit` / :mod:`evidence`: RK4 likelihood, batched
  fitting, Laplace / BIC / held-out evidence;
* :mod:`evaluator`: the cached, batched evidence of structures;
* :mod:`smc` / :mod:`final` / :mod:`moves` / :mod:`pooled`: tempered SMC
  over structures (:class:`TemperingConfig`, :class:`FinalConfig`), its
  final phase at ``beta = 1``, its Metropolis-Hastings moves and its runs
  (one, or several in lockstep, pooled); :mod:`codec`: the samplers'
  states in checkpoints;
* :mod:`reference`: the reference's evidence-weighted scheme and N = 1
  hill climbing; :mod:`llm`: the LLM proposer;
* :mod:`predictive` / :mod:`sindy` / :mod:`scipy_peer`: held-out scoring,
  the PySINDy baseline and the fit's SciPy peer;
* :mod:`problems`: simulated problems (data, truth) from ``envs.ode_systems``.
"""

from methods.model_smc.evaluator import Evaluator
from methods.model_smc.evidence import EVIDENCE_KINDS
from methods.model_smc.evidence import bic
from methods.model_smc.evidence import laplace
from methods.model_smc.expr import Limits
from methods.model_smc.expr import UnsafeExpression
from methods.model_smc.expr import canonical
from methods.model_smc.expr import parse
from methods.model_smc.expr import to_text
from methods.model_smc.fit import Fit
from methods.model_smc.fit import FitConfig
from methods.model_smc.fit import fit_structure
from methods.model_smc.fit import make_batch_fit
from methods.model_smc.grammar import GrammarProposal
from methods.model_smc.interpret import compile_expr
from methods.model_smc.llm import Completer
from methods.model_smc.llm import LLMError
from methods.model_smc.llm import LLMProposer
from methods.model_smc.model import Data
from methods.model_smc.model import ProblemSpec
from methods.model_smc.model import StructuredModel
from methods.model_smc.reference import HillClimb
from methods.model_smc.reference import ReferenceConfig
from methods.model_smc.reference import hill_climb
from methods.model_smc.reference import run_reference
from methods.model_smc.pooled import run as run_smc
from methods.model_smc.pooled import run_pooled
from methods.model_smc.smc import FinalConfig
from methods.model_smc.smc import SMCState
from methods.model_smc.smc import TemperingConfig
from methods.model_smc.structure import Library
from methods.model_smc.structure import PriorConfig
from methods.model_smc.structure import Structure
from methods.model_smc.structure import from_equations
