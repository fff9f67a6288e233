"""The interpreter: expression trees to (jittable) array functions.

:func:`compile_expr` walks a validated tree once and returns a closure made of
array operations only (``jnp`` by default, or NumPy for the reference
baselines): the text of a model is never executed. Calling the closure inside
``jax.jit`` traces plain ``jnp`` code that XLA compiles; ``jax.vmap`` batches
it over particles, restarts or parameter samples.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from methods.model_smc import expr as ex

# (x [S], theta [P], t []) -> value []
ExprFn = Callable[[Any, Any, Any], Any]


def _unary(xp) -> dict[str, Callable]:
  return {
      "neg": lambda a: -a,
      "exp": xp.exp,
      "log": xp.log,
      "sqrt": xp.sqrt,
      "sin": xp.sin,
      "cos": xp.cos,
      "tanh": xp.tanh,
      "abs": xp.abs,
  }


def _int_pow(xp, base, n: int):
  if xp is jnp:
    return jax.lax.integer_pow(base, n)
  return np.power(base, n)


def compile_expr(
    e: ex.Expr,
    *,
    states: Sequence[str],
    params: Sequence[str],
    xp: Any = jnp,
) -> ExprFn:
  """Array function ``f(x, theta, t)`` computing ``e``.

  Args:
    e: a tree from :func:`methods.model_smc.expr.parse`.
    states: state names; ``x[i]`` is ``states[i]``.
    params: parameter names; ``theta[j]`` is ``params[j]`` (the values, not
      their logarithms).
    xp: the array module (``jax.numpy`` or ``numpy``).

  Returns:
    ``f(x [S], theta [P], t []) -> []``; works elementwise on leading batch
    axes only through ``jax.vmap``.

  Raises:
    KeyError: ``e`` uses a name that is not in ``states``/``params``.
  """
  state_index = {s: i for i, s in enumerate(states)}
  param_index = {p: i for i, p in enumerate(params)}
  unary = _unary(xp)

  def build(node: ex.Expr) -> ExprFn:
    if isinstance(node, ex.Num):
      value = node.value
      return lambda x, th, t: value
    if isinstance(node, ex.Sym):
      if node.kind == "time":
        return lambda x, th, t: t
      if node.kind == "state":
        i = state_index[node.name]
        return lambda x, th, t: x[i]
      j = param_index[node.name]
      return lambda x, th, t: th[j]
    if isinstance(node, ex.Call):
      fn, arg = unary[node.fn], build(node.arg)
      return lambda x, th, t: fn(arg(x, th, t))
    left, right = build(node.left), build(node.right)
    if node.op == "add":
      return lambda x, th, t: left(x, th, t) + right(x, th, t)
    if node.op == "sub":
      return lambda x, th, t: left(x, th, t) - right(x, th, t)
    if node.op == "mul":
      return lambda x, th, t: left(x, th, t) * right(x, th, t)
    if node.op == "div":
      return lambda x, th, t: left(x, th, t) / right(x, th, t)
    if node.op == "pow":
      if isinstance(node.right, ex.Num) and node.right.value == int(node.right.value):
        n = int(node.right.value)
        return lambda x, th, t: _int_pow(xp, left(x, th, t), n)
      return lambda x, th, t: xp.power(left(x, th, t), right(x, th, t))
    raise ValueError(f"unknown operator {node.op!r}")

  return build(e)
