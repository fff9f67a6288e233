"""Dense linear algebra that stays safe inside many CPU devices' programs.

jaxlib's CPU LAPACK kernels (``eigh``, ``solve``, ``cholesky``, ...) split a
batch of matrices into chunks on XLA's intra-op thread pool and block until
the chunks are done, whenever the batch holds more than about 2e5 floating
point operations of work. XLA's CPU runtime runs a program's later
operations on the pool thread that finished the earlier ones, so with
several devices in one process (``jax_num_cpu_devices`` or a sharded batch)
every pool thread can end up inside such a kernel, each waiting for chunks
that no free thread is left to run: the program stops with idle cores. A
kernel given one matrix runs it on the calling thread.

:func:`one_matrix_per_call` wraps a function of matrices so that, on the CPU
backend, ``jax.vmap`` of it becomes a loop over the batch (``lax.map``) in
which each kernel call sees one matrix; on GPU and TPU it is the function
itself (batched solvers are the fast path there). Results are those of the
batched call up to float rounding. Forward-mode derivatives (``jax.jvp``)
pass through the wrapper; reverse mode does not (``custom_vmap``), so it
serves computations that are not differentiated, such as a fit's Newton
steps and its evidence.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def one_matrix_per_call(fn: Callable) -> Callable:
  """``fn`` (arrays -> pytree of arrays) whose ``vmap`` is a sequential map on CPU."""

  @jax.custom_batching.custom_vmap
  def mapped(*args):
    return fn(*args)

  @mapped.def_vmap
  def _rule(axis_size, in_batched, *args):
    args = tuple(x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)) for x, b in zip(args, in_batched))
    out = jax.lax.map(lambda a: mapped(*a), args)
    return out, jax.tree.map(lambda _: True, out)

  def call(*args):
    return (mapped if jax.default_backend() == "cpu" else fn)(*args)

  return call


eigh = one_matrix_per_call(jnp.linalg.eigh)
eigvalsh = one_matrix_per_call(jnp.linalg.eigvalsh)
solve = one_matrix_per_call(jnp.linalg.solve)
