"""Model structures: signed sums of term bodies, their prior and their text.

A model of states ``x_1..x_S`` is ``dx_s/dt = sum_k sign_sk * b_k(x, t; theta_sk)``
where each term body ``b_k`` comes from a :class:`Library` of expressions (the
"grammar"; e.g. ``a*x``, ``a*x*y``, ``a*x/(b + x)``) and carries its own
positive parameters. A :class:`Structure` records which body appears in which
equation with which sign; identical structures have identical keys
(bodies are in :func:`methods.model_smc.expr.canonical` form), which is how
particles, the evidence cache and the posterior over structures are indexed.

The structure prior (:func:`log_prior`) includes each (equation, body) pair
independently with probability ``p_include`` and a uniform sign, truncated to
at most ``max_terms`` terms per equation; it is normalised over that space
(the constant is exact), and :func:`sample_prior` draws from it exactly.

Arbitrary equations (e.g. from an LLM) enter through :func:`from_equations`:
each equation is split into its top-level signed terms; terms that share a
parameter are merged into one body so that the model's meaning is kept;
new bodies are appended to the library.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from methods.common import hparams
from methods.model_smc import expr as ex

_RESERVED_STATE = re.compile(r"^c\d+$")


class StructureError(ValueError):
  """A structure that cannot be built; the message names the problem."""


class Library:
  """An append-only list of canonical term bodies over fixed states.

  Attributes:
    states: the state names (their order is the order of the equations).
    bodies: canonical bodies; parameters are named ``c0, c1, ...``.
    keys: their printed canonical forms (unique).
    limits: the caps used when parsing.
  """

  def __init__(self, states: Sequence[str], bodies: Iterable[str] = (), *,
               limits: ex.Limits = ex.DEFAULT_LIMITS):
    self.states = tuple(states)
    if len(set(self.states)) != len(self.states) or not self.states:
      raise StructureError(f"states must be distinct and non-empty, got {list(self.states)}")
    for s in self.states:
      if _RESERVED_STATE.match(s):
        raise StructureError(f"state name {s!r} is reserved for canonical parameter names")
    self.limits = limits
    self.bodies: list[ex.Expr] = []
    self.keys: list[str] = []
    self._index: dict[str, int] = {}
    self._op_neighbors: Optional[list[tuple[int, ...]]] = None
    for text in bodies:
      body = ex.parse(text, states=self.states, limits=limits)
      key = ex.canonical_text(body)
      if key in self._index:
        raise StructureError(f"library body {text!r} duplicates {self.bodies[self._index[key]]!r} "
                             f"(canonical form {key!r})")
      self.add(body)

  def __len__(self) -> int:
    return len(self.bodies)

  @property
  def fingerprint(self) -> tuple[str, ...]:
    return tuple(self.keys)

  def n_params(self, k: int) -> int:
    return len(ex.params_of(self.bodies[k]))

  def add(self, body: ex.Expr) -> int:
    """Index of ``body`` (canonicalised), appending it if it is new."""
    canon = ex.canonical(body)
    key = ex.to_text(canon)
    if key not in self._index:
      self._index[key] = len(self.bodies)
      self.bodies.append(canon)
      self.keys.append(key)
      self._op_neighbors = None
    return self._index[key]

  def op_neighbors(self, k: int) -> tuple[int, ...]:
    """Bodies that differ from body ``k`` by exactly one operator."""
    if self._op_neighbors is None:
      n = len(self.bodies)
      self._op_neighbors = [
          tuple(j for j in range(n) if j != i and _op_distance(self.bodies[i], self.bodies[j]) == 1)
          for i in range(n)
      ]
    return self._op_neighbors[k]


def _op_distance(a: ex.Expr, b: ex.Expr) -> float:
  """Number of operator nodes that differ between same-shaped trees, else inf."""
  if isinstance(a, ex.BinOp) and isinstance(b, ex.BinOp):
    return (a.op != b.op) + _op_distance(a.left, b.left) + _op_distance(a.right, b.right)
  if isinstance(a, ex.Call) and isinstance(b, ex.Call):
    if (a.fn == "neg") != (b.fn == "neg"):
      return math.inf
    return (a.fn != b.fn) + _op_distance(a.arg, b.arg)
  return 0 if a == b else math.inf


@dataclasses.dataclass(frozen=True)
class Structure:
  """Which body appears in which equation, with which sign.

  Attributes:
    terms: per equation, the sorted tuple of ``(body index, sign)`` pairs
      (sign in {+1, -1}; each body at most once per equation).
  """

  terms: tuple[tuple[tuple[int, int], ...], ...]

  @classmethod
  def make(cls, terms: Sequence[Iterable[tuple[int, int]]]) -> "Structure":
    out = []
    for eq in terms:
      eq = tuple(sorted((int(k), int(s)) for k, s in eq))
      bodies = [k for k, _ in eq]
      if len(set(bodies)) != len(bodies):
        raise StructureError(f"a body appears twice in one equation: {eq}")
      if any(s not in (-1, 1) for _, s in eq):
        raise StructureError(f"signs must be +1 or -1: {eq}")
      out.append(eq)
    return cls(tuple(out))

  def num_terms(self) -> int:
    return sum(len(eq) for eq in self.terms)

  def signs(self, num_bodies: int) -> np.ndarray:
    """``[S, K]`` float32 matrix of signs (0: body absent)."""
    out = np.zeros((len(self.terms), num_bodies), np.float32)
    for s, eq in enumerate(self.terms):
      for k, sign in eq:
        out[s, k] = sign
    return out

  def num_params(self, library: Library) -> int:
    return sum(library.n_params(k) for eq in self.terms for k, _ in eq)


def key(structure: Structure, library: Library) -> str:
  """Canonical text of a structure, independent of the library's order."""
  eqs = []
  for state, eq in zip(library.states, structure.terms):
    terms = sorted((library.keys[k], s) for k, s in eq)
    body = " ".join(f"{'+' if s > 0 else '-'}[{b}]" for b, s in terms) or "0"
    eqs.append(f"d{state}/dt = {body}")
  return "; ".join(eqs)


_TERM = re.compile(r"([+-])\[([^\]]*)\]")


def from_key(text: str, library: Library) -> Structure:
  """Inverse of :func:`key` (bodies are parsed safely and added to ``library`` if new)."""
  parts = text.split("; ")
  if len(parts) != len(library.states):
    raise StructureError(f"key {text!r} does not have one equation per state {list(library.states)}")
  eqs = []
  for state, part in zip(library.states, parts):
    head, _, rhs = part.partition(" = ")
    if head != f"d{state}/dt":
      raise StructureError(f"key {text!r}: expected the equation of {state!r}, got {head!r}")
    terms = [] if rhs == "0" else _TERM.findall(rhs)
    eqs.append([(library.add(ex.parse(body, states=library.states, limits=library.limits)), 1 if sign == "+" else -1)
                for sign, body in terms])
  return Structure.make(eqs)


def equations(structure: Structure, library: Library, names: str = "p") -> tuple[list[str], list[str]]:
  """Readable equations with globally numbered parameters.

  Returns:
    ``(equations, params)``: one text per state, and the parameter names in
    order (equation, then term in canonical order, then the body's own
    parameters); :func:`param_slots` gives their ``(equation, body, j)``.
  """
  texts, params = [], []
  for eq in structure.terms:
    out = None
    for k, sign in sorted(eq, key=lambda ks: library.keys[ks[0]]):
      body = library.bodies[k]
      local = ex.params_of(body)
      mapping = {p: f"{names}{len(params) + i + 1}" for i, p in enumerate(local)}
      params += [mapping[p] for p in local]
      term = _params_first(ex.rename_params(body, mapping))
      if out is None:
        out = term if sign > 0 else ex.Call("neg", term)
      else:
        out = ex.BinOp("add" if sign > 0 else "sub", out, term)
    texts.append(ex.to_text(out) if out is not None else "0")
  return texts, params


def _params_first(e: ex.Expr) -> ex.Expr:
  """Display form of a product with its parameters in front (``p1*S*I``)."""
  if not (isinstance(e, ex.BinOp) and e.op == "mul"):
    return e
  factors, stack = [], [e]
  while stack:
    f = stack.pop()
    if isinstance(f, ex.BinOp) and f.op == "mul":
      stack += [f.right, f.left]
    else:
      factors.append(f)
  factors.sort(key=lambda f: not (isinstance(f, ex.Sym) and f.kind == "param"))
  out = factors[0]
  for f in factors[1:]:
    out = ex.BinOp("mul", out, f)
  return out


def param_slots(structure: Structure, library: Library) -> list[tuple[int, int, int]]:
  """``(equation, body, j)`` of each parameter named by :func:`equations`, in order."""
  out = []
  for s, eq in enumerate(structure.terms):
    for k, _ in sorted(eq, key=lambda ks: library.keys[ks[0]]):
      out += [(s, k, j) for j in range(library.n_params(k))]
  return out


def from_equations(
    eqs: Mapping[str, str],
    library: Library,
    *,
    max_params: int = 24,
) -> Structure:
  """Builds a structure from one equation text per state (appending new bodies).

  Args:
    eqs: ``{state: right-hand side}`` for every state of the library.
    library: the library (extended in place with new bodies).
    max_params: cap on the model's total number of parameters.

  Raises:
    UnsafeExpression: an equation is refused by the parser (with a reason).
    StructureError: missing/unknown states, repeated terms, too many params.
  """
  if not isinstance(eqs, Mapping):
    raise StructureError(f"equations must be a mapping of state to text, got {type(eqs).__name__}")
  missing = [s for s in library.states if s not in eqs]
  unknown = [s for s in eqs if s not in library.states]
  if missing or unknown:
    raise StructureError(f"equations must cover exactly the states {list(library.states)} "
                         f"(missing {missing}, unknown {unknown})")
  pending = []
  for state in library.states:
    tree = ex.parse(eqs[state], states=library.states, limits=library.limits)
    pending.append((state, _merge_shared(ex.split_terms(tree))))
  total = sum(len(ex.params_of(body)) for _, terms in pending for _, body in terms)
  if total > max_params:
    raise StructureError(f"the model has {total} parameters; at most {max_params} are allowed")
  out = []
  for state, terms in pending:
    eq = {}
    for sign, body in terms:
      body = ex.canonical(body)
      if isinstance(body, ex.Call) and body.fn == "neg":  # e.g. (-g)*y is the term -(g*y)
        sign, body = -sign, body.arg
      k = library.add(body)
      if k in eq:
        raise StructureError(f"equation for {state!r} repeats the term {library.keys[k]!r}")
      eq[k] = sign
    out.append(eq.items())
  return Structure.make(out)


def _merge_shared(terms: list[tuple[int, ex.Expr]]) -> list[tuple[int, ex.Expr]]:
  """Merges terms that share parameters into one body; drops zero terms."""
  terms = [(s, t) for s, t in terms if not (isinstance(t, ex.Num) and t.value == 0.0)]
  groups: list[tuple[set, list]] = []
  for s, t in terms:
    ps = set(ex.params_of(t))
    hit = [g for g in groups if g[0] & ps]
    merged = (ps.union(*[g[0] for g in hit]), [m for g in hit for m in g[1]] + [(s, t)])
    groups = [g for g in groups if not any(g is h for h in hit)] + [merged]
  out = []
  for _, members in groups:
    if len(members) == 1:
      out.append(members[0])
    else:
      body = None
      for s, t in members:
        body = (t if s > 0 else ex.Call("neg", t)) if body is None else ex.BinOp("add" if s > 0 else "sub", body, t)
      out.append((1, body))
  return out


# ----------------------------------------------------------------------------
# The structure prior.


@dataclasses.dataclass(frozen=True)
class PriorConfig(hparams.Hyperparameters):
  """The structure prior ``p(m)`` and the grammar proposal's moves (config section ``prior``).

  Shared by tempered SMC, the reference's evidence-weighted scheme and N = 1
  hill climbing: :func:`log_prior` and :func:`sample_prior` with these
  ``p_include`` and ``max_terms``, and
  :class:`methods.model_smc.grammar.GrammarProposal` with ``max_terms`` and
  ``move_probs``.
  """

  p_include: float = hparams.field(0.25, "Prior probability that a body is in an equation.", low=0, high=1,
                                   low_open=True, high_open=True)
  max_terms: int = hparams.field(3, "Most terms per equation.", low=1)
  move_probs: tuple[float, ...] = hparams.field(
      (0.3, 0.3, 0.2, 0.2), "Probabilities of the grammar's moves: add, remove, replace, operator.", low=0)

  def checks(self):
    if len(self.move_probs) != 4 or sum(self.move_probs) <= 0:
      yield "move_probs", "four non-negative probabilities (add, remove, replace, operator) with a positive sum"

  def log_prior(self, structure: "Structure", num_bodies: int) -> float:
    """:func:`log_prior` of ``structure`` under this prior."""
    return log_prior(structure, num_bodies, p_include=self.p_include, max_terms=self.max_terms)

  def sample(self, rng: np.random.Generator, num_bodies: int, num_states: int) -> "Structure":
    """:func:`sample_prior` under this prior."""
    return sample_prior(rng, num_bodies, num_states, p_include=self.p_include, max_terms=self.max_terms)


@functools.lru_cache(maxsize=256)
def log_prior_normalizer(num_bodies: int, num_states: int, p_include: float, max_terms: int) -> float:
  """``log P(every equation has <= max_terms terms)`` under the untruncated prior."""
  per_eq = sum(math.comb(num_bodies, n) * p_include**n * (1 - p_include) ** (num_bodies - n)
               for n in range(min(max_terms, num_bodies) + 1))
  return num_states * math.log(per_eq)


def log_prior(structure: Structure, num_bodies: int, *, p_include: float, max_terms: int) -> float:
  """Normalised log prior of a structure over the term-library space.

  ``p(m) = prod_s prod_k [p/2]^{1[k in s]} [1 - p]^{1[k not in s]} / C`` with
  ``C`` the probability that no equation exceeds ``max_terms`` terms
  (``-inf`` if one does).
  """
  total = 0.0
  for eq in structure.terms:
    n = len(eq)
    if n > max_terms:
      return -math.inf
    total += n * math.log(p_include / 2) + (num_bodies - n) * math.log1p(-p_include)
  return total - log_prior_normalizer(num_bodies, len(structure.terms), p_include, max_terms)


def sample_prior(rng: np.random.Generator, num_bodies: int, num_states: int, *,
                 p_include: float, max_terms: int) -> Structure:
  """An exact draw from :func:`log_prior` (rejection per equation)."""
  eqs = []
  for _ in range(num_states):
    while True:
      include = rng.random(num_bodies) < p_include
      if include.sum() <= max_terms:
        break
    signs = np.where(rng.random(num_bodies) < 0.5, 1, -1)
    eqs.append([(k, int(signs[k])) for k in np.flatnonzero(include)])
  return Structure.make(eqs)


def enumerate_space(num_bodies: int, num_states: int, max_terms: int) -> list[Structure]:
  """Every structure of the truncated space (for exact checks on small libraries)."""
  per_eq = []
  for mask in range(3**num_bodies):
    eq, m = [], mask
    for k in range(num_bodies):
      m, r = divmod(m, 3)
      if r:
        eq.append((k, 1 if r == 1 else -1))
    if len(eq) <= max_terms:
      per_eq.append(eq)
  out = [[]]
  for _ in range(num_states):
    out = [prev + [eq] for prev in out for eq in per_eq]
  return [Structure.make(eqs) for eqs in out]


def default_bodies(states: Sequence[str]) -> tuple[str, ...]:
  """The default library over ``states``: a constant, each state, each pairwise product, each square.

  Each body carries one positive parameter ``a``; for states ``(x, y)`` this
  is ``a, a*x, a*y, a*x*y, a*x^2, a*y^2`` (the Lotka-Volterra family).
  """
  pairs = [f"a*{s}*{u}" for i, s in enumerate(states) for u in states[i + 1:]]
  return ("a",) + tuple(f"a*{s}" for s in states) + tuple(pairs) + tuple(f"a*{s}^2" for s in states)


def parse_system(equations: Sequence[str], params: Sequence[str]) -> tuple[tuple[str, ...], list, dict]:
  """``("x = rhs", ...)`` and ``("name=value", ...)`` -> ``(states, [tree], {name: value})``.

  The right-hand sides go through the safe parser; every parameter they use
  must have a value, and every value must be used.

  Raises:
    StructureError: a malformed equation or value, a name that cannot be a
      state (:func:`methods.model_smc.expr_tree.is_state_name`), an unknown or
      unused parameter, or a time-dependent right-hand side (with the reason).
  """
  states, rhs = [], []
  for i, text in enumerate(equations):
    lhs, sep, right = str(text).partition("=")
    name = lhs.strip().removesuffix("'")
    if not sep or not name.isidentifier():
      raise StructureError(f"equation {i} {text!r} must read 'state = right-hand side'")
    if not ex.is_state_name(name):  # before any right-hand side is parsed: 'lambda = ...' is named here
      raise StructureError(f"equation {i} {text!r}: invalid state name {name!r} ({ex.STATE_NAME_RULE})")
    states.append(name)
    rhs.append(right)
  values = {}
  for text in params:
    name, sep, value = str(text).partition("=")
    try:
      values[name.strip()] = float(value)
    except ValueError:
      raise StructureError(f"parameter {text!r} must read 'name=number'") from None
    if not sep or not math.isfinite(values[name.strip()]):
      raise StructureError(f"parameter {text!r} must read 'name=number' with a finite number")
  Library(states)  # distinct, non-reserved state names
  trees = []
  for state, text in zip(states, rhs):
    tree = ex.parse(text, states=tuple(states))
    if any(isinstance(n, ex.Sym) and n.kind == "time" for n in ex.walk(tree)):
      raise StructureError(f"the equation of {state!r} uses t; simulated systems are autonomous")
    unknown = [p for p in ex.params_of(tree) if p not in values]
    if unknown:
      raise StructureError(f"the equation of {state!r} uses {unknown} without a value (sim.params 'name=value')")
    trees.append(tree)
  unused = sorted(set(values) - {p for t in trees for p in ex.params_of(t)})
  if unused:
    raise StructureError(f"parameters {unused} are not used by any equation")
  return tuple(states), trees, values
