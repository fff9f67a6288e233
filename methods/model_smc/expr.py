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
:class:`Call`, :class:`BinOp`); :func:`to_text` prints them (``parse(to_text(e))
== e``) and :func:`canonical` gives the normal form used for de-duplication
(sums and products flattened and sorted, subtraction as addition of a
negation, parameters renamed in order of appearance).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import warnings
from typing import Iterable, Optional, Union

FUNCTIONS = ("exp", "log", "sqrt", "sin", "cos", "tanh", "abs")
UNARY = ("neg",) + FUNCTIONS
BINARY = ("add", "sub", "mul", "div", "pow")
TIME = "t"
_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
class UnsafeExpression(ValueError):
  """An expression that the language refuses; ``reason`` says why."""

  def __init__(self, reason: str, text: Optional[str] = None):
    self.reason = reason
    self.text = text
    shown = "" if text is None else f" in {text[:80]!r}{'...' if len(text) > 80 else ''}"
    super().__init__(f"rejected expression{shown}: {reason}")


@dataclasses.dataclass(frozen=True)
class Limits:
  """Caps that bound what an expression may cost.

  Attributes:
    max_chars: longest accepted text (checked before parsing).
    max_depth: deepest tree (a leaf has depth 1).
    max_nodes: most tree nodes.
    max_params: most distinct parameters.
    max_const: largest absolute value of a numeric constant.
    max_exponent: largest absolute value of a numeric exponent.
  """

  max_chars: int = 1000
  max_depth: int = 12
  max_nodes: int = 64
  max_params: int = 12
  max_const: float = 1e6
  max_exponent: float = 8.0


DEFAULT_LIMITS = Limits()


@dataclasses.dataclass(frozen=True)
class Num:
  value: float


@dataclasses.dataclass(frozen=True)
class Sym:
  """A state variable (``kind="state"``), parameter (``"param"``) or ``t`` (``"time"``)."""

  kind: str
  name: str


@dataclasses.dataclass(frozen=True)
class Call:
  """A unary operation: ``neg`` or one of :data:`FUNCTIONS`."""

  fn: str
  arg: "Expr"


@dataclasses.dataclass(frozen=True)
class BinOp:
  op: str
  left: "Expr"
  right: "Expr"


Expr = Union[Num, Sym, Call, BinOp]


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
  # The walker builds this module's nodes, so it is imported here (not at the top).
  from methods.model_smc import expr_walk  # pylint: disable=g-import-not-at-top

  walker = expr_walk.Walker(tuple(states), None if params is None else set(params), limits, text)
  e = walker.convert(tree.body, 1)
  expr_walk.check_constants(e, walker.fail)
  return e


# ----------------------------------------------------------------------------
# Inspection and printing.


def children(e: Expr) -> tuple[Expr, ...]:
  if isinstance(e, Call):
    return (e.arg,)
  if isinstance(e, BinOp):
    return (e.left, e.right)
  return ()


def walk(e: Expr):
  """Pre-order iterator over the nodes of ``e``."""
  stack = [e]
  while stack:
    node = stack.pop()
    yield node
    stack.extend(reversed(children(node)))


def depth(e: Expr) -> int:
  return 1 + max((depth(c) for c in children(e)), default=0)


def size(e: Expr) -> int:
  return sum(1 for _ in walk(e))


def params_of(e: Expr) -> tuple[str, ...]:
  """Parameter names in order of first appearance (pre-order)."""
  return tuple(dict.fromkeys(node.name for node in walk(e) if isinstance(node, Sym) and node.kind == "param"))


_PREC = {"add": 1, "sub": 1, "mul": 2, "div": 2, "neg": 3, "pow": 4}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "^"}


def _prec(e: Expr) -> int:
  if isinstance(e, BinOp):
    return _PREC[e.op]
  if isinstance(e, Call) and e.fn == "neg":
    return _PREC["neg"]
  if isinstance(e, Num) and e.value < 0:
    return _PREC["neg"]
  return 5


def _fmt_num(v: float) -> str:
  if v == int(v) and abs(v) < 1e15:
    return str(int(v))
  return repr(v)


def to_text(e: Expr) -> str:
  """Prints ``e`` with the fewest parentheses that parse back to the same tree."""
  if isinstance(e, Num):
    return _fmt_num(e.value)
  if isinstance(e, Sym):
    return e.name
  if isinstance(e, Call):
    if e.fn == "neg":
      inner = to_text(e.arg)
      return f"-({inner})" if _prec(e.arg) <= _PREC["neg"] else f"-{inner}"
    return f"{e.fn}({to_text(e.arg)})"
  p = _PREC[e.op]
  left, right = to_text(e.left), to_text(e.right)
  if e.op == "pow":
    if _prec(e.left) <= p:
      left = f"({left})"
    if isinstance(e.right, Num) and e.right.value < 0:
      right = f"({right})"
  else:
    if _prec(e.left) < p:
      left = f"({left})"
    if _prec(e.right) <= p:
      right = f"({right})"
  return f"{left}{_SYMBOL[e.op]}{right}" if e.op in ("mul", "div", "pow") else f"{left} {_SYMBOL[e.op]} {right}"


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
