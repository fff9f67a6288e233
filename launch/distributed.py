"""Process set-up: CPU device count and multi-host initialisation.

Must run before the first JAX computation. A multi-process run is requested
with ``--coordinator_address=host:port --num_processes=N --process_id=i``
(flags of ``launch.main``) or the environment variables
``COORDINATOR_ADDRESS``, ``NUM_PROCESSES`` and ``PROCESS_ID``; each process
then calls ``jax.distributed.initialize`` and the mesh spans the devices of
all processes. On CPU, collectives use gloo, so two processes on 127.0.0.1
exercise the same code paths as a TPU pod slice or a multi-node GPU job.
"""

from __future__ import annotations

import os
from typing import Optional

from absl import logging
import jax


def set_cpu_devices(cpu_devices: Optional[int]) -> None:
  """Exposes ``cpu_devices`` CPU devices (``None`` or 0: JAX's default); a no-op when already set.

  Raises:
    RuntimeError: JAX's backends started, with another device count, before this call.
  """
  if not cpu_devices or jax.config.jax_num_cpu_devices == int(cpu_devices):
    return
  try:
    jax.config.update("jax_num_cpu_devices", int(cpu_devices))
  except RuntimeError as e:
    raise RuntimeError(f"cannot expose {cpu_devices} CPU devices: JAX's backends started before the device "
                       f"count was set (an import ran a JAX computation): {e}") from e


def setup(
    *,
    coordinator_address: Optional[str] = None,
    num_processes: Optional[int] = None,
    process_id: Optional[int] = None,
    cpu_devices: Optional[int] = None,
    timeout_s: int = 300,
) -> None:
  """Configures devices and joins the process group when asked to.

  Args:
    coordinator_address: ``host:port`` of process 0; env ``COORDINATOR_ADDRESS``.
    num_processes: number of processes; env ``NUM_PROCESSES``.
    process_id: this process's index; env ``PROCESS_ID``.
    cpu_devices: number of CPU devices to expose (simulated devices on one
      host; useful to use every core, and for tests). ``None`` or 0 leaves
      JAX's default.
    timeout_s: how long ``initialize`` waits for every process to join.
  """
  set_cpu_devices(cpu_devices)
  coordinator_address = coordinator_address or os.environ.get("COORDINATOR_ADDRESS") or None
  if num_processes is None and "NUM_PROCESSES" in os.environ:
    num_processes = int(os.environ["NUM_PROCESSES"])
  if process_id is None and "PROCESS_ID" in os.environ:
    process_id = int(os.environ["PROCESS_ID"])
  if coordinator_address is None and (num_processes or 1) <= 1:
    return
  if coordinator_address is None or num_processes is None or process_id is None:
    raise ValueError(
        "a multi-process run needs coordinator_address, num_processes and process_id "
        f"(got {coordinator_address!r}, {num_processes!r}, {process_id!r})"
    )
  if not 0 <= process_id < num_processes:
    raise ValueError(f"process_id={process_id} must be in [0, {num_processes})")
  jax.distributed.initialize(
      coordinator_address=coordinator_address,
      num_processes=num_processes,
      process_id=process_id,
      initialization_timeout=timeout_s,
  )
  logging.info(
      "process %d/%d joined; %d local / %d global devices",
      jax.process_index(), jax.process_count(), jax.local_device_count(), jax.device_count(),
  )
