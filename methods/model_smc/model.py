"""The statistical model of a structure: ODE solution, likelihood and priors.

For structure signs ``sigma [S, K]`` over a library of bodies ``b_k`` the ODE
is ``dx_s/dt = sum_k sigma_sk b_k(x, t; theta_sk)``, solved by fixed-step RK4
(``substeps`` steps per observation interval ``dt``; every stage's state
clipped to ``+-state_bound`` and its slope to ``state_bound / step``, so
blow-ups stay finite inside a step). All parameters live in one
unconstrained vector ``phi [D]`` (:class:`Layout`):

* ``log theta_sk`` for every (equation, body) slot -- only the slots of
  bodies present in the structure are *active*; the others have no effect
  and no prior, and drop out of the Laplace determinant;
* ``log sigma_o``, the observation noise of each observed state;
* the initial states (when ``init == "fit"``): ``log x0_s`` for positive
  states (``init_space="log"``; the default with lognormal noise, which
  needs positive states), ``x0_s`` itself for signed states
  (``init_space="real"``; the default with Gaussian noise).

Observation model (the Stan Lotka-Volterra case study's for ``lognormal``):
``log(y_to + c) ~ N(log(z_o(t) + c), sigma_o^2)`` with offset ``c``
(``noise_offset``; 0 for the pelts), the density taken on ``y`` (Jacobian
included) so that it is comparable across noise models; or
``y_to ~ N(z_o(t), sigma_o^2)`` for ``gaussian``. Priors: ``log theta ~
N(loc, scale^2)``, ``log sigma ~ N(loc, scale^2)``, and ``log x0_s ~ N(log
x0_ref_s, init_scale^2)`` (log scale) or ``x0_s ~ N(x0_ref_s, (init_scale *
r)^2)`` with ``r = max(|x0_ref_s|, rms(x0_ref), 1e-3)`` (real scale), where
``x0_ref`` is the first observation (or the given value for latent states).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from envs.ode_systems import rk4_solve  # the project's one RK4 (a pure-JAX function)
from methods.common import hparams
from methods.common import linalg
from methods.model_smc import expr as ex
from methods.model_smc import interpret

NOISE_KINDS = ("lognormal", "gaussian")
INIT_KINDS = ("fit", "fixed")
INIT_SPACES = ("auto", "log", "real")
_LOG_2PI = math.log(2 * math.pi)


F = hparams.field


@dataclasses.dataclass(frozen=True)
class ProblemSpec(hparams.Hyperparameters):
  """Static description of the data and the observation model.

  ``states``, ``observed`` and ``dt`` come from the data; the rest is config
  section ``problem``. Priors are Gaussian on the log scale: ``log theta ~
  N(param_prior_loc, param_prior_scale^2)``, ``log sigma ~ N(noise_prior_loc,
  noise_prior_scale^2)``, ``log x0 ~ N(log x0_ref, init_prior_scale^2)``.
  """

  states: tuple[str, ...] = F(("x",), "State names (equation order).", nonempty=True, config=False)
  observed: tuple[int, ...] = F((0,), "Indices of the observed states (columns of y).", low=0, nonempty=True,
                                config=False)
  dt: float = F(1.0, "Spacing of the (regular) observation times; t = 0 is the first.", low=0, low_open=True,
                config=False)
  substeps: int = F(10, "RK4 steps per observation interval.", low=1)
  noise: str = F("lognormal", "Observation noise model.", choices=NOISE_KINDS)
  noise_offset: float = F(0.0, "c of the lognormal model: log(y + c) ~ N(log(x + c), sigma^2).", low=0)
  init: str = F("fit", "fit: initial states are parameters; fixed: the first row.", choices=INIT_KINDS)
  init_space: str = F("auto", "Scale of fitted initial states: log (positive), real (signed), auto (real for "
                      "gaussian noise, log for lognormal).", choices=INIT_SPACES)
  param_prior_loc: float = F(math.log(0.1), "Prior mean of log theta.")
  param_prior_scale: float = F(2.0, "Prior sd of log theta.", low=0, low_open=True)
  noise_prior_loc: float = F(math.log(0.2), "Prior mean of log sigma.")
  noise_prior_scale: float = F(1.0, "Prior sd of log sigma.", low=0, low_open=True)
  init_prior_scale: float = F(0.5, "Prior sd of log x0 around log x0_ref (real scale: relative to the states' "
                              "magnitude).", low=0, low_open=True)
  state_bound: float = F(1e6, "Every RK4 stage's state is clipped to [-bound, bound] (slopes to bound / step).",
                         low=0, low_open=True)
  log_floor: float = F(1e-6, "Lognormal predictions are floored at this before the log.", low=0, low_open=True,
                       config=False)

  def checks(self):
    if any(o >= len(self.states) for o in self.observed):
      yield "observed", f"{self.observed} must index the states {self.states}"
    if self.init == "fit" and self.init_space == "real" and self.noise == "lognormal":
      yield "init_space", "lognormal observations need positive states: fit x0 on the log scale (init_space='log')"

  @property
  def init_scale(self) -> str:
    """How initial states enter: ``fixed``, ``log`` (``phi = log x0``) or ``real`` (``phi = x0``)."""
    if self.init == "fixed":
      return "fixed"
    if self.init_space == "auto":
      return "log" if self.noise == "lognormal" else "real"
    return self.init_space

  @property
  def param_prior(self) -> tuple[float, float]:
    """``(loc, scale)`` of ``log theta``."""
    return self.param_prior_loc, self.param_prior_scale

  @property
  def noise_prior(self) -> tuple[float, float]:
    """``(loc, scale)`` of ``log sigma``."""
    return self.noise_prior_loc, self.noise_prior_scale


class Data(NamedTuple):
  """The arrays a fit needs (a pytree, so fits can be vmapped over datasets).

  Attributes:
    y: ``[T, O]`` observations of the observed states at ``t = 0, dt, ...``
      (every row the fit may use; which rows are fitted is static); NaN
      marks a missing observation (e.g. no data at the initial time).
    x0_ref: ``[S]`` initial states (``init="fixed"``) or the centres of their
      priors (``init="fit"``).
  """

  y: jax.Array  # [T, O]
  x0_ref: jax.Array  # [S]


class Layout:
  """Where each parameter lives in ``phi [D]`` for a library and problem."""

  def __init__(self, library_params: Sequence[int], spec: ProblemSpec):
    s_count, k_count = len(spec.states), len(library_params)
    self.num_states, self.num_bodies = s_count, k_count
    self.body_params = tuple(int(n) for n in library_params)
    self.slot_index = []  # [K] arrays [S, n_k]
    offset = 0
    per_body = sum(self.body_params)
    for k, n in enumerate(self.body_params):
      start = sum(self.body_params[:k])
      idx = np.array([[s * per_body + start + j for j in range(n)] for s in range(s_count)], np.int32)
      self.slot_index.append(idx.reshape(s_count, n))
    offset = s_count * per_body
    self.num_slot_params = offset
    self.noise_index = np.arange(offset, offset + len(spec.observed), dtype=np.int32)
    offset += len(spec.observed)
    if spec.init == "fit":
      self.init_index = np.arange(offset, offset + s_count, dtype=np.int32)
      offset += s_count
    else:
      self.init_index = np.zeros((0,), np.int32)
    self.dim = offset

  def embed_index(self, smaller: "Layout") -> np.ndarray:
    """``[smaller.dim]`` int: where each coordinate of ``smaller`` lives in this layout.

    ``smaller`` is the layout of the same problem over the first
    ``smaller.num_bodies`` bodies of this layout's library (a library only
    grows by appending), so a fit made before the library grew keeps its
    meaning: its slot, noise and initial-state coordinates move to theirs here.
    """
    if smaller.num_bodies > self.num_bodies or self.body_params[:smaller.num_bodies] != smaller.body_params:
      raise ValueError(f"a layout of {smaller.num_bodies} bodies {smaller.body_params} is not a prefix of this "
                       f"one's {self.body_params}")
    out = np.zeros((smaller.dim,), np.int32)
    for k, idx in enumerate(smaller.slot_index):
      out[idx.reshape(-1)] = self.slot_index[k].reshape(-1)
    out[smaller.noise_index] = self.noise_index
    out[smaller.init_index] = self.init_index
    return out

  def active_mask(self, signs: jax.Array) -> jax.Array:
    """``[D]`` float mask of the parameters that a structure uses."""
    mask = jnp.ones((self.dim,), signs.dtype)
    for k, idx in enumerate(self.slot_index):
      if idx.shape[1]:
        on = (signs[:, k] != 0).astype(signs.dtype)  # [S]
        mask = mask.at[idx.reshape(-1)].set(jnp.repeat(on, idx.shape[1]))
    return mask

  def slot_names(self, states: Sequence[str], keys: Sequence[str]) -> list[str]:
    names = [""] * self.dim
    for k, idx in enumerate(self.slot_index):
      for s in range(idx.shape[0]):
        for j in range(idx.shape[1]):
          names[idx[s, j]] = f"d{states[s]}: {keys[k]} c{j}"
    return names


class StructuredModel:
  """Log-likelihood, prior and simulation for every structure over a library.

  Built once per (library, problem); its functions take the structure as a
  ``[S, K]`` sign array, so one compiled function serves every structure
  (and ``jax.vmap`` batches different structures together).
  """

  def __init__(self, bodies: Sequence[ex.Expr], spec: ProblemSpec):
    self.spec = spec
    self.bodies = tuple(bodies)
    self.layout = Layout([len(ex.params_of(b)) for b in bodies], spec)
    self._fns = [interpret.compile_expr(b, states=spec.states, params=ex.params_of(b)) for b in bodies]
    self._unsafe = [_may_be_non_finite(b) for b in bodies]

  @property
  def dim(self) -> int:
    return self.layout.dim

  def rhs(self, phi: jax.Array, signs: jax.Array) -> Callable:
    """``(x [S], t) -> dx/dt [S]`` of structure ``signs`` at parameters ``phi``.

    Parameters and masks are computed here, once, outside the solver's loop.
    """
    lay = self.layout
    ons, thetas = [], []
    for k in range(len(self._fns)):
      on = signs[:, k] != 0  # [S]
      theta = jnp.exp(phi[lay.slot_index[k]])  # [S, n_k]
      ons.append(on)
      thetas.append(jnp.where(on[:, None], theta, jnp.ones_like(theta)))

    def f(x, t):
      out = jnp.zeros_like(x)
      for k, fn in enumerate(self._fns):
        on = ons[k]
        x_in = x[None, :]
        if self._unsafe[k]:
          # Absent terms that can produce NaN/inf (log, sqrt, division,
          # real powers, exp) are evaluated at a harmless point so that
          # nothing leaks into the gradients through the mask.
          x_in = jnp.where(on[:, None], x_in, jnp.ones_like(x_in))
        else:
          x_in = jnp.broadcast_to(x_in, (on.shape[0], x.shape[0]))
        vals = jax.vmap(lambda xi, th: jnp.asarray(fn(xi, th, t), x.dtype))(x_in, thetas[k])
        out = out + jnp.where(on, signs[:, k] * vals, 0.0)
      return out

    return f

  def initial_state(self, phi: jax.Array, data: Data) -> jax.Array:
    scale = self.spec.init_scale
    if scale == "log":
      return jnp.exp(phi[self.layout.init_index])
    if scale == "real":
      return phi[self.layout.init_index]
    return data.x0_ref

  def init_prior(self, data: Data) -> tuple[jax.Array, jax.Array]:
    """``(loc [S], scale [S])`` of the prior of the fitted initial states (in ``phi``'s scale)."""
    sp = self.spec
    if sp.init_scale == "log":
      return jnp.log(jnp.maximum(data.x0_ref, sp.log_floor)), jnp.full_like(data.x0_ref, sp.init_prior_scale)
    ref = jnp.where(jnp.isfinite(data.x0_ref), data.x0_ref, 0.0)
    rms = jnp.sqrt(jnp.mean(ref * ref))
    return ref, sp.init_prior_scale * jnp.maximum(jnp.maximum(jnp.abs(ref), rms), 1e-3)

  def simulate(self, phi: jax.Array, signs: jax.Array, data: Data, num_points: int) -> jax.Array:
    """``[num_points, S]`` solution from the (fitted or fixed) initial state."""
    sp = self.spec
    return rk4_solve(self.rhs(phi, signs), self.initial_state(phi, data), num_points=num_points,
                     dt=sp.dt, substeps=sp.substeps, bound=sp.state_bound)

  def obs_log_density(self, z: jax.Array, y: jax.Array, log_sigma: jax.Array) -> jax.Array:
    """``[T, O]`` log densities of observations ``y`` given predictions ``z [T, O]``."""
    sp = self.spec
    log_sigma = log_sigma[None, :]
    sigma = jnp.exp(log_sigma)
    # Missing observations (NaN) contribute 0; they are replaced first so
    # that no NaN reaches the gradients.
    seen = jnp.isfinite(y)
    y = jnp.where(seen, y, 1.0)
    if sp.noise == "lognormal":
      mu = jnp.log(jnp.maximum(z + sp.noise_offset, sp.log_floor))
      ly = jnp.log(y + sp.noise_offset)
      r = (ly - mu) / sigma
      dens = -0.5 * r * r - log_sigma - 0.5 * _LOG_2PI - ly
    else:
      r = (y - z) / sigma
      dens = -0.5 * r * r - log_sigma - 0.5 * _LOG_2PI
    return jnp.where(seen, dens, 0.0)

  def log_likelihood(self, phi: jax.Array, signs: jax.Array, data: Data, *, lo: int, hi: int) -> jax.Array:
    """``log p(y[lo:hi] | phi)``: the solution up to row ``hi``, scored on rows ``lo..hi-1``."""
    traj = self.simulate(phi, signs, data, hi)
    z = traj[lo:hi][:, np.asarray(self.spec.observed)]
    dens = self.obs_log_density(z, data.y[lo:hi], phi[self.layout.noise_index])
    return jnp.sum(dens)

  def log_prior(self, phi: jax.Array, signs: jax.Array, data: Data) -> jax.Array:
    """Normalised log prior density of the active parameters."""
    sp, lay = self.spec, self.layout

    def normal(x, loc, scale):
      r = (x - loc) / scale
      return -0.5 * r * r - jnp.log(scale) - 0.5 * _LOG_2PI

    mask = self.layout.active_mask(signs)
    loc, scale = sp.param_prior
    slots = phi[: lay.num_slot_params]
    total = jnp.sum(mask[: lay.num_slot_params] * normal(slots, loc, scale))
    total += jnp.sum(normal(phi[lay.noise_index], *sp.noise_prior))
    if sp.init == "fit":
      total += jnp.sum(normal(phi[lay.init_index], *self.init_prior(data)))
    return total

  def default_phi(self, data: Data) -> jax.Array:
    """``[D]`` prior centres: ``loc`` for slots and noise, ``x0_ref`` (in its scale) for the initial states."""
    sp, lay = self.spec, self.layout
    phi = jnp.full((lay.dim,), sp.param_prior[0], data.y.dtype)
    phi = phi.at[lay.noise_index].set(sp.noise_prior[0])
    if sp.init == "fit":
      phi = phi.at[lay.init_index].set(self.init_prior(data)[0].astype(data.y.dtype))
    return phi

  def linear_bodies(self) -> list[bool]:
    """Whether body ``k`` is ``c0 * g(x, t)`` with ``g`` parameter-free."""
    out = []
    for b in self.bodies:
      factors = _mul_factors(b)
      ps = ex.params_of(b)
      out.append(len(ps) == 1 and sum(f == ex.Sym("param", ps[0]) for f in factors) == 1
                 and sum(bool(ex.params_of(f)) for f in factors) == 1)
    return out

  def gradient_matching_features(self, data: Data, *, num_rows: int) -> Optional[tuple[jax.Array, jax.Array]]:
    """``(deriv [T-2, S], g [T-2, K])``: central differences of the observations and the bodies at them.

    ``g[:, k]`` is body ``k`` with its parameters at 1 (``theta * g`` for a
    linear body), at rows ``1..num_rows-2``; ``None`` when a state is
    unobserved or ``num_rows < 3``.
    """
    sp, lay = self.spec, self.layout
    if sorted(sp.observed) != list(range(len(sp.states))) or num_rows < 3:
      return None
    order = np.argsort(np.asarray(sp.observed))
    ys = data.y[:num_rows][:, order]  # [T, S] in state order
    deriv = (ys[2:] - ys[:-2]) / (2 * sp.dt)  # [T-2, S]
    xs = ys[1:-1]
    ts = (jnp.arange(1, num_rows - 1) * sp.dt).astype(ys.dtype)
    cols = []
    for k, fn in enumerate(self._fns):
      n = lay.body_params[k]
      cols.append(jax.vmap(lambda x, t, fn=fn, n=n: jnp.asarray(fn(x, jnp.ones((n,), ys.dtype), t), ys.dtype))(xs, ts))
    return deriv, jnp.stack(cols, axis=1)

  def gradient_matching_init(self, signs: jax.Array, data: Data, *, num_rows: int,
                             ridge: float = 1e-3) -> jax.Array:
    """``[D]`` start values whose linear coefficients match finite differences.

    For bodies ``theta * g(x, t)`` the coefficients of each equation solve a
    ridge least-squares fit of central differences of the observations (rows
    ``0..num_rows-1``) on the features ``sign * g(y_t, t)`` (gradient
    matching; Varah 1982); coefficients that come out non-positive, and
    every non-linear body, start at the prior centre. Needs every state
    observed; otherwise the prior centres are returned.
    """
    sp, lay = self.spec, self.layout
    phi = self.default_phi(data)
    gm = self.gradient_matching_features(data, num_rows=num_rows)
    if gm is None:
      return phi
    deriv, g_all = gm
    linear = self.linear_bodies()
    n_free = jnp.asarray([n == 0 for n in lay.body_params])
    fixed = (g_all * n_free[None, :]) @ signs.T.astype(g_all.dtype)  # [T-2, S]: parameter-free bodies
    feats = jnp.where(jnp.asarray(linear)[None, :], g_all, 0.0)  # [T-2, K]
    target = deriv - fixed
    lin = jnp.asarray(linear)
    for s in range(len(sp.states)):
      use = (signs[s] != 0) & lin  # [K]
      f = feats * signs[s][None, :] * use[None, :]
      gram = f.T @ f
      diag = jnp.diag(gram)
      reg = ridge * jnp.maximum(diag, 1e-12) + jnp.where(use, 0.0, 1.0)
      coef = linalg.solve(gram + jnp.diag(reg), f.T @ target[:, s])
      ok = use & (coef > 0) & jnp.isfinite(coef)
      loc, scale = sp.param_prior
      for k in range(lay.num_bodies):
        if linear[k]:
          i = lay.slot_index[k][s, 0]
          val = jnp.clip(jnp.log(jnp.where(ok[k], coef[k], 1.0)), loc - 3 * scale, loc + 3 * scale)
          phi = phi.at[i].set(jnp.where(ok[k], val, phi[i]))
    return phi


def _may_be_non_finite(e: ex.Expr) -> bool:
  """Whether a body can be NaN/inf at finite states (so must be masked carefully)."""
  for node in ex.walk(e):
    if isinstance(node, ex.Call) and node.fn in ("log", "sqrt", "exp"):
      return True
    if isinstance(node, ex.BinOp) and node.op == "div":
      return True
    if isinstance(node, ex.BinOp) and node.op == "pow" and not (
        isinstance(node.right, ex.Num) and node.right.value == int(node.right.value) and node.right.value >= 0):
      return True
  return False


def _mul_factors(e: ex.Expr) -> list[ex.Expr]:
  if isinstance(e, ex.BinOp) and e.op == "mul":
    return _mul_factors(e.left) + _mul_factors(e.right)
  return [e]
