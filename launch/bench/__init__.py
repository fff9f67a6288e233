"""Benchmarks: this project against a peer implementation, side by side.

Each benchmark module exposes ``run(quick: bool) -> list[dict]``; every row
has ``benchmark``, ``ours`` and ``peer`` (throughputs in ``unit``, higher is
better), ``peer_name``, ``ratio`` (``ours / peer``) and ``notes``. Both sides
run in the same process, one after the other, on the same inputs, so the
ratio is meaningful on a noisy machine even when absolute times are not.
"""
