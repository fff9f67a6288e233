"""The whitelist walker behind :func:`methods.model_smc.expr.parse`, and constant folding.

:class:`Walker` converts a Python AST (from ``ast.parse`` in ``eval`` mode) into
the expression nodes of :mod:`methods.model_smc.expr_tree`, refusing every node
type off the whitelist; :func:`check_constants` refuses constant
subexpressions that fold to a division by zero or to a number that is not
finite in float32 -- the interpreter evaluates constant arithmetic on Python
floats while compiling, where ``1/0`` would raise instead of being a model.
"""

from __future__ import annotations

import ast
import keyword
import math
from typing import Callable, Optional

from methods.model_smc import expr_tree as ex

_IDENT = ex.IDENT
_F32_MAX = float.fromhex("0x1.fffffep+127")
_FOLD_UNARY = {
    "neg": lambda a: -a, "exp": math.exp, "log": math.log, "sqrt": math.sqrt,
    "sin": math.sin, "cos": math.cos, "tanh": math.tanh, "abs": abs,
}
_FOLD_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "pow": math.pow,
}

_AST_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}
_REFUSED = {
    ast.Attribute: "attribute access",
    ast.Subscript: "subscripts",
    ast.Lambda: "lambda expressions",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions",
    ast.Compare: "comparisons",
    ast.BoolOp: "boolean operators",
    ast.IfExp: "conditional expressions",
    ast.NamedExpr: "assignment expressions",
    ast.Starred: "starred arguments",
    ast.JoinedStr: "f-strings",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.List: "lists",
    ast.Tuple: "tuples",
    ast.Set: "sets",
    ast.Dict: "dicts",
    ast.Slice: "slices",
}


class Walker:
  """Converts a Python AST into an :data:`methods.model_smc.expr_tree.Expr`, refusing anything off the whitelist."""

  def __init__(self, states, params, limits, text):
    self.states, self.params, self.limits, self.text = states, params, limits, text
    self.nodes = 0
    self.seen_params: set[str] = set()
    for s in states:
      if not ex.is_state_name(s):
        raise ex.UnsafeExpression(f"invalid state name {s!r} ({ex.STATE_NAME_RULE})")

  def fail(self, reason):
    raise ex.UnsafeExpression(reason, self.text)

  def count(self, depth):
    self.nodes += 1
    if self.nodes > self.limits.max_nodes:
      self.fail(f"more than {self.limits.max_nodes} nodes")
    if depth > self.limits.max_depth:
      self.fail(f"nested deeper than {self.limits.max_depth} levels")

  def convert(self, node, depth) -> ex.Expr:
    self.count(depth)
    if isinstance(node, ast.BinOp):
      op = _AST_BINOPS.get(type(node.op))
      if op is None:
        self.fail(f"operator {type(node.op).__name__} is not allowed (allowed: + - * / ^ **)")
      left = self.convert(node.left, depth + 1)
      if op == "pow":
        right = self.exponent(node.right, depth + 1)
      else:
        right = self.convert(node.right, depth + 1)
      return ex.BinOp(op, left, right)
    if isinstance(node, ast.UnaryOp):
      if isinstance(node.op, ast.UAdd):
        return self.convert(node.operand, depth + 1)
      if not isinstance(node.op, ast.USub):
        self.fail(f"unary operator {type(node.op).__name__} is not allowed (allowed: -, +)")
      inner = self.convert(node.operand, depth + 1)
      if isinstance(inner, ex.Num):
        return ex.Num(-inner.value)
      if isinstance(inner, ex.Call) and inner.fn == "neg":
        return inner.arg
      return ex.Call("neg", inner)
    if isinstance(node, ast.Call):
      if not isinstance(node.func, ast.Name):
        self.fail("only the functions " + ", ".join(ex.FUNCTIONS) + " may be called "
                  f"(got a call of {type(node.func).__name__})")
      name = node.func.id
      if name.startswith("__") or name not in ex.FUNCTIONS:
        self.fail(f"call of {name!r} is not allowed; functions: {', '.join(ex.FUNCTIONS)}")
      if node.keywords or len(node.args) != 1 or isinstance(node.args[0], ast.Starred):
        self.fail(f"{name}() takes exactly one positional argument")
      return ex.Call(name, self.convert(node.args[0], depth + 1))
    if isinstance(node, ast.Name):
      return self.name(node.id)
    if isinstance(node, ast.Constant):
      return ex.Num(self.number(node.value))
    what = _REFUSED.get(type(node), f"{type(node).__name__} nodes")
    self.fail(f"{what} are not allowed")
    raise AssertionError  # unreachable

  def number(self, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      self.fail(f"constant {type(value).__name__} is not allowed (numbers only)")
    if isinstance(value, int) and abs(value) > self.limits.max_const:
      self.fail(f"constant larger than {self.limits.max_const:g} in magnitude")
    value = float(value)
    if not math.isfinite(value):
      self.fail("non-finite constant")
    if abs(value) > self.limits.max_const:
      self.fail(f"constant larger than {self.limits.max_const:g} in magnitude")
    return value

  def name(self, name: str) -> ex.Sym:
    if name.startswith("__") or name.endswith("__"):
      self.fail(f"dunder name {name!r} is not allowed")
    if name == ex.TIME:
      return ex.Sym("time", ex.TIME)
    if name in self.states:
      return ex.Sym("state", name)
    if name in ex.FUNCTIONS:
      self.fail(f"function {name!r} used as a value")
    if not _IDENT.match(name) or keyword.iskeyword(name):
      self.fail(f"invalid parameter name {name!r} (letters, digits, _; at most 32 characters)")
    if self.params is not None and name not in self.params:
      self.fail(f"unknown name {name!r}; states: {list(self.states)}, parameters: {sorted(self.params)}")
    self.seen_params.add(name)
    if len(self.seen_params) > self.limits.max_params:
      self.fail(f"more than {self.limits.max_params} parameters")
    return ex.Sym("param", name)

  def exponent(self, node, depth) -> ex.Expr:
    """Exponents are bounded numbers or single parameters (no towers)."""
    self.count(depth)
    sign = 1.0
    inner = node
    if isinstance(inner, ast.UnaryOp) and isinstance(inner.op, (ast.USub, ast.UAdd)):
      sign = -1.0 if isinstance(inner.op, ast.USub) else 1.0
      inner = inner.operand
    if isinstance(inner, ast.Constant):
      value = sign * self.number(inner.value)
      if abs(value) > self.limits.max_exponent:
        self.fail(f"exponent {value:g} is larger than {self.limits.max_exponent:g} in magnitude")
      return ex.Num(value)
    if isinstance(inner, ast.Name) and sign > 0:
      sym = self.name(inner.id)
      if sym.kind == "param":
        return sym
    self.fail(f"an exponent must be a number with |value| <= {self.limits.max_exponent:g} or a parameter")
    raise AssertionError  # unreachable


def check_constants(e: ex.Expr, fail: Callable[[str], None]) -> Optional[float]:
  """Value of ``e`` if it is constant (else ``None``); calls ``fail`` on a bad constant.

  A division whose denominator folds to zero is refused even when its
  numerator is not constant (``a*x/(2 - 2)``); so is any constant
  subexpression that is undefined (``log(0)``, ``sqrt(-1)``) or whose value
  is not finite in float32 (``exp(1000)``).
  """
  if isinstance(e, ex.Num):
    return e.value
  if isinstance(e, ex.Sym):
    return None
  if isinstance(e, ex.Call):
    args = (check_constants(e.arg, fail),)
    fn = _FOLD_UNARY[e.fn]
  else:
    args = (check_constants(e.left, fail), check_constants(e.right, fail))
    if e.op == "div" and args[1] == 0.0:
      fail(f"{ex.to_text(e)!r} folds to a division by zero")
    fn = _FOLD_BINARY[e.op]
  if any(a is None for a in args):
    return None
  try:
    value = float(fn(*args))
  except (ArithmeticError, ValueError):  # ZeroDivisionError, OverflowError, math domain errors
    value = math.nan
  if not math.isfinite(value) or abs(value) > _F32_MAX:
    fail(f"the constant {ex.to_text(e)!r} is not finite in float32")
  return value
