"""REG and OPG (ICML 2026): in-sample offline RL, with IQL, TD3+BC and BC baselines.

"REG: In-Sample RL via Regularizing the Evaluation Gap" (abstract only public):
policy evaluation as robust optimisation over an ambiguity set of critics, of
which IQL's expectile objective is an approximate dual solution; policy
extraction by an Orthogonal Policy Gradient (OPG).

What is implemented (reconstructions are marked as such and configurable):

* IQL exactly as ikostrikov/implicit_q_learning (:mod:`methods.reg.losses`,
  :func:`methods.reg.agent.update`): expectile V, twin Q with a Polyak target,
  AWR actor with a cosine-decayed learning rate, optional LayerNorm.
* REG's value objective (reconstruction, :func:`losses.reg_q_loss`,
  :func:`losses.worst_case_ratio`): the critic minimises
  ``1/2 E[(Q - y)^2] + alpha Gap(Q, pi_xi)`` with
  ``Gap = E_s[E_{pi_xi} Q - V(s)]`` and ``pi_xi = xi beta`` the maximiser of
  ``E[xi (Q - V)] - lambda R(xi)`` over the ambiguity set. Sets: ``kappa``
  (ratios with ``sup xi <= kappa inf xi``, ``kappa = tau / (1 - tau)``: the
  expectile's dual, IQL's implicit policy class) or ``simplex`` (all ratios)
  with regulariser ``kl`` (EQL/AWR-like), ``chi2`` (IVR/SQL-like) or ``none``.
  ``alpha = 0`` is IQL.
* OPG (reconstruction, :mod:`methods.reg.opg`): ``g = g_bc + eta g_perp`` with
  ``g_perp`` the policy gradient projected orthogonally to the BC gradient on
  the flattened parameters; ablations as switches.
* TD3+BC and BC through the same state and update; online TD3 for the MuJoCo
  behaviour policies.
"""

from methods.reg import losses
from methods.reg import networks
from methods.reg import opg
from methods.reg import rules
from methods.reg.agent import act
from methods.reg.agent import Batch
from methods.reg.agent import CRITIC_OBJECTIVES
from methods.reg.agent import EXTRACTIONS
from methods.reg.agent import Hparams
from methods.reg.agent import init
from methods.reg.agent import make_nets
from methods.reg.agent import sample_batch
from methods.reg.agent import train_chunk
from methods.reg.agent import TrainState
from methods.reg.agent import update
from methods.reg.losses import expectile_loss
from methods.reg.losses import reg_q_loss
from methods.reg.losses import td_target
from methods.reg.losses import worst_case_ratio
from methods.reg.opg import combine as opg_combine
from methods.reg.opg import orthogonal_component
from methods.reg.rules import opg_gradients

# Named algorithms: Hparams fields that define each (the rest come from the config).
ALGORITHMS = {
    "iql": dict(critic="iql", extraction="awr"),
    "reg": dict(critic="reg", extraction="awr"),
    "reg_opg": dict(critic="reg", extraction="opg"),
    "reg_opg_layer": dict(critic="reg", extraction="opg", opg_projection="layer"),
    "reg_opg_conflict": dict(critic="reg", extraction="opg", opg_conflict_only=True),
    "reg_opg_perp": dict(critic="reg", extraction="opg", opg_direction="perp"),
    "reg_opg_noproj": dict(critic="reg", extraction="opg", opg_projection="none"),
    "reg_opg_bc": dict(critic="reg", extraction="opg", opg_direction="bc"),
    "td3bc": dict(critic="td3", extraction="td3bc"),
    "bc": dict(critic="none", extraction="bc"),
}
