"""Pure-JAX environments and simulators."""
