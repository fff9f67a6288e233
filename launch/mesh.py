"""Device mesh and sharding of the leading (seed / particle / batch) axis.

One mesh axis, ``data``, spans the devices of every process. Experiments lay
out their embarrassingly parallel axis along it (the modern form of
``pmap``): inputs are global ``jax.Array``s sharded with
``NamedSharding(mesh, P("data"))``, ``jax.jit`` partitions the computation and
reductions come back replicated. Axis types are ``Auto`` (``jax.make_mesh``
defaults to Explicit axes from JAX 0.10).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
import numpy as np

DATA = "data"


def make_mesh(num_devices: int = -1) -> Mesh:
  """A 1-D ``data`` mesh over ``num_devices`` devices (-1: all of them)."""
  devices = jax.devices()
  n = len(devices) if num_devices == -1 else num_devices
  if not 1 <= n <= len(devices):
    raise ValueError(f"mesh.data={num_devices}: {len(devices)} devices are available")
  if n != len(devices) and jax.process_count() > 1:
    raise ValueError("a multi-process mesh must use all devices (mesh.data=-1)")
  return jax.make_mesh((n,), (DATA,), axis_types=(AxisType.Auto,), devices=devices[:n])


def describe_devices() -> str:
  """E.g. ``"2 CPU devices"`` or ``"1 GPU device (NVIDIA H200)"``, for logs and benchmark notes."""
  devices = jax.devices()
  kinds = sorted({d.device_kind for d in devices})
  backend = jax.default_backend().upper()
  plural = "s" if len(devices) > 1 else ""
  detail = "" if backend == "CPU" else f" ({', '.join(kinds)})"
  return f"{len(devices)} {backend} device{plural}{detail}"


def data_sharding(mesh: Mesh) -> NamedSharding:
  """Leading axis split over ``data``; other axes replicated."""
  return NamedSharding(mesh, P(DATA))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def padded_size(n: int, mesh: Mesh) -> int:
  """``n`` rounded up to a multiple of the mesh size."""
  m = mesh.devices.size
  return -(-n // m) * m


def global_array(shape: tuple[int, ...], sharding: NamedSharding, fn: Callable[[Any], np.ndarray]) -> jax.Array:
  """A global array whose slice at ``index`` is ``fn(index)``.

  Every process calls this with the same ``fn`` and materialises only its
  own shards (works on one process and on many).
  """
  return jax.make_array_from_callback(shape, sharding, fn)


def to_host(tree: Any) -> Any:
  """NumPy copy of a pytree of (possibly multi-process) arrays.

  Replicated arrays are read from a local shard; sharded ones are gathered
  across processes.
  """

  def get(x):
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
      return np.asarray(x)
    if x.is_fully_replicated:
      return np.asarray(x.addressable_data(0))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))

  return jax.tree.map(get, tree)
