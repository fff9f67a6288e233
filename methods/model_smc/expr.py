"""A small, safe expression language for the right-hand sides of ODE models.

Grammar (a subset of Python's expression syntax, read with ``ast.parse`` in
``eval`` mode and then walked against a whitelist; nothing is ever executed,
evaluated or sympified)::

  expr   := expr ('+' | '-') expr | expr ('*' | '/') expr
          | expr ('^' | '**') exponent | '-' expr | '+' expr
          | fn '(' expr ')' | number | state | parameter | 't'
  fn     := exp | log | sqrt | sin | cos | tanh | abs
  exponent := number with |value| <= max_exponent | parameter

``^`` is power (as in mathematics, not Python's xor: it is read as ``**``,
with the usual precedence, ``a*x^2 = a*(x^2)`` and ``-x^2 = -(x^2)``). Identifiers that are not
state names, ``t`` or a function name are parameters (positive reals, fitted
in log space); dunder names, attribute access, subscripts, calls of anything
else, keywords, lambdas, comprehensions, comparisons, strings, complex or
non-finite numbers are rejected, and so is a constant subexpression that
folds to a division by zero or to a number that is not finite in float32
(``a + 1/0``, ``exp(1000)``): the interpreter would otherwise divide Python
zeros while compiling. Caps on text length, depth, node count,
parameter count, constant size and exponent size bound the work any
expression can cause. Every rejection raises :class:`UnsafeExpression` with a
reason.

Expressions are immutable, hashable trees (:class:`Num`, :class:`Sym`,
:class:`Call`, :class:`BinOp`, defined in :mod:`methods.model_smc.expr_tree`);
:func:`to_text` prints them (``parse(to_text(e)) == e``) and
:func:`canonical` gives the normal form used for de-duplication
(sums and products flattened and sorted, subtraction as addition of a
negation, parameters renamed in order of appearance).
"""

from __future__ import annotations

import ast
import warnings
from typing import Iterable, Optional

from methods.model_smc import expr_walk
from methods.model_smc.expr_tree import BinOp
from methods.model_smc.expr_tree import Call
from methods.model_smc.expr_tree import DEFAULT_LIMITS
from methods.model_smc.expr_tree import Expr
from methods.model_smc.expr_tree import FUNCTIONS  # noqa: F401  (re-exported)
from methods.model_smc.expr_tree import Limits
from methods.model_smc.expr_tree import Num
from methods.model_smc.expr_tree import STATE_NAME_RULE  # noqa: F401  (re-exported)
from methods.model_smc.expr_tree import Sym
from methods.model_smc.expr_tree import UnsafeExpression
from methods.model_smc.expr_tree import depth  # noqa: F401  (re-exported)
from methods.model_smc.expr_tree import is_state_name  # noqa: F401  (re-exported)
from methods.model_smc.expr_tree import params_of
from methods.model_smc.expr_tree import size  # noqa: F401  (re-exported)
from methods.model_smc.expr_tree import to_text
from methods.model_smc.expr_tree import walk  # noqa: F401  (re-exported)


def parse(
    text: str,
    *,
    states: Iterable[str],
    params: Optional[Iterable[str]] = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Expr:
  """Parses ``text`` into an expression tree, or raises :class:`UnsafeExpression`.

  Args:
    text: the expression, e.g. ``"a*x - b*x*y"``.
    states: the model's state variable names.
    params: if given, the only parameter names allowed; otherwise any new
      identifier is a parameter.
    limits: the caps.

  Returns:
    The tree, with negated numbers folded (``-2`` is ``Num(-2.0)``).
  """
  if not isinstance(text, str):
    raise UnsafeExpression(f"expected a string, got {type(text).__name__}")
  if len(text) > limits.max_chars:
    raise UnsafeExpression(f"longer than {limits.max_chars} characters ({len(text)})", text)
  if not text.strip():
    raise UnsafeExpression("empty expression", text)
  if "\x00" in text:
    raise UnsafeExpression("contains a NUL character", text)
  # The walker checks the state names first: a keyword state ('lambda') is named, not a SyntaxError.
  walker = expr_walk.Walker(tuple(states), None if params is None else set(params), limits, text)
  # '^' is power in this language; Python reads it as xor with the wrong
  # precedence, so it is rewritten to '**' before parsing.
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", SyntaxWarning)  # e.g. "invalid decimal literal"
      warnings.simplefilter("ignore", DeprecationWarning)  # e.g. "invalid escape sequence"
      tree = ast.parse(text.strip().replace("^", "**"), mode="eval")
  except (SyntaxError, ValueError, OverflowError) as e:
    raise UnsafeExpression(f"not a valid expression ({type(e).__name__}: {e.args[0] if e.args else e})", text) from None
  except (RecursionError, MemoryError):
    raise UnsafeExpression("nesting too deep for the parser", text) from None
  e = walker.convert(tree.body, 1)
  expr_walk.check_constants(e, walker.fail)
  return e


def rename_params(e: Expr, mapping: dict[str, str]) -> Expr:
  """``e`` with parameter ``p`` renamed ``mapping[p]`` (others unchanged)."""
  if isinstance(e, Sym):
    if e.kind == "param" and e.name in mapping:
      return Sym("param", mapping[e.name])
    return e
  if isinstance(e, Call):
    return Call(e.fn, rename_params(e.arg, mapping))
  if isinstance(e, BinOp):
    return BinOp(e.op, rename_params(e.left, mapping), rename_params(e.right, mapping))
  return e


# ----------------------------------------------------------------------------
# Canonical form.


def split_terms(e: Expr) -> list[tuple[int, Expr]]:
  """Top-level additive terms of ``e`` as ``(sign, term)`` with sign in {+1, -1}."""
  if isinstance(e, BinOp) and e.op in ("add", "sub"):
    right = split_terms(e.right)
    if e.op == "sub":
      right = [(-s, t) for s, t in right]
    return split_terms(e.left) + right
  if isinstance(e, Call) and e.fn == "neg":
    return [(-s, t) for s, t in split_terms(e.arg)]
  if isinstance(e, Num) and e.value < 0:
    return [(-1, Num(-e.value))]
  return [(1, e)]


def _factors(e: Expr) -> list[Expr]:
  if isinstance(e, BinOp) and e.op == "mul":
    return _factors(e.left) + _factors(e.right)
  return [e]


def _shape_key(e: Expr) -> str:
  """Print of ``e`` with every parameter name replaced (order ignores names)."""
  return to_text(rename_params(e, {p: "_" for p in params_of(e)}))


def _normalize(e: Expr) -> Expr:
  """Flattened, sorted sums and products (parameters keep their names)."""
  if isinstance(e, (Num, Sym)):
    return e
  if isinstance(e, BinOp) and e.op in ("add", "sub") or isinstance(e, Call) and e.fn == "neg":
    terms = [(s, _normalize(t)) for s, t in split_terms(e)]
    flat = []
    for s, t in terms:  # a normalised term may itself be a sum (e.g. -(a - b))
      flat += [(s * s2, t2) for s2, t2 in split_terms(t)]
    flat.sort(key=lambda st: (_shape_key(st[1]), -st[0]))
    return _build_sum(flat)
  if isinstance(e, BinOp) and e.op == "mul":
    pending = [_normalize(f) for f in _factors(e)]
    sign = 1
    unsigned = []
    while pending:  # flatten, pulling negations out of products: a*(-x) == -(a*x)
      f = pending.pop(0)
      if isinstance(f, Call) and f.fn == "neg":
        sign = -sign
        pending.insert(0, f.arg)
      elif isinstance(f, BinOp) and f.op == "mul":
        pending[:0] = _factors(f)
      elif isinstance(f, Num) and f.value < 0:
        sign = -sign
        unsigned.append(Num(-f.value))
      else:
        unsigned.append(f)
    unsigned = [f for f in unsigned if not (isinstance(f, Num) and f.value == 1.0)] or [Num(1.0)]
    unsigned.sort(key=_shape_key)
    out = unsigned[0]
    for f in unsigned[1:]:
      out = BinOp("mul", out, f)
    return _negate(out) if sign < 0 else out
  if isinstance(e, BinOp):
    return BinOp(e.op, _normalize(e.left), _normalize(e.right))
  return Call(e.fn, _normalize(e.arg))


def _negate(e: Expr) -> Expr:
  if isinstance(e, Num):
    return Num(-e.value)
  if isinstance(e, Call) and e.fn == "neg":
    return e.arg
  return Call("neg", e)


def _build_sum(terms: list[tuple[int, Expr]]) -> Expr:
  out = None
  for s, t in terms:
    if out is None:
      out = t if s > 0 else _negate(t)
    else:
      out = BinOp("add" if s > 0 else "sub", out, t)
  return out if out is not None else Num(0.0)


def canonical(e: Expr, prefix: str = "c") -> Expr:
  """The normal form of ``e`` used to de-duplicate structures.

  Sums and products are flattened and sorted by their shape, ``a - b`` is a
  signed sum, negations are pulled out of products, factors of 1 dropped, and
  parameters renamed ``c0, c1, ...`` in order of appearance, so expressions
  that differ only in term order, factor order or parameter names share one
  canonical form. (Not a full algebraic simplifier: ``a*(x + y)`` and
  ``a*x + a*y`` stay different structures, as they are different models.)
  """
  normal = _normalize(e)
  return rename_params(normal, {p: f"{prefix}{i}" for i, p in enumerate(params_of(normal))})


def canonical_text(e: Expr) -> str:
  return to_text(canonical(e))
