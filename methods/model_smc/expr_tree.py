"""The trees of the expression language: nodes, limits, the refusal, inspection and printing.

:mod:`methods.model_smc.expr` parses text into these trees (through the
whitelist walker of :mod:`methods.model_smc.expr_walk`) and puts them in
canonical form; this module holds what both need: the immutable, hashable
nodes (:class:`Num`, :class:`Sym`, :class:`Call`, :class:`BinOp`), the caps
(:class:`Limits`), :class:`UnsafeExpression` (defined in
:mod:`methods.common.errors`), and :func:`to_text`, which
prints a tree with the fewest parentheses that parse back to it.
"""

from __future__ import annotations

import dataclasses
import keyword
import re
from typing import Optional, Union

from methods.common.errors import UnsafeExpression  # noqa: F401  (re-exported: the refusal of the language)

FUNCTIONS = ("exp", "log", "sqrt", "sin", "cos", "tanh", "abs")
UNARY = ("neg",) + FUNCTIONS
BINARY = ("add", "sub", "mul", "div", "pow")
TIME = "t"
IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")  # a state or parameter name
STATE_NAME_RULE = "letters, digits and _, at most 32 characters; not t, a function name or a Python keyword"


def is_state_name(name) -> bool:
  """Whether ``name`` can name a state: it matches :data:`IDENT` and is not :data:`TIME`, a function or a keyword.

  The one rule of every ModelSMC site that takes state names (the parser, text
  equations, a file's latent states); :data:`STATE_NAME_RULE` says it in words.
  """
  return (isinstance(name, str) and bool(IDENT.match(name)) and not keyword.iskeyword(name) and name != TIME
          and name not in FUNCTIONS)


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
