"""Benchmarks: this project against a peer implementation, side by side.

Each benchmark module exposes ``run(quick: bool) -> list[dict]``; every row
has ``benchmark``, ``ours`` and ``peer`` (in ``unit``), ``peer_name``,
``ratio`` and ``notes``. The ratio is always oriented so that above 1 favours
this project: ``ours / peer`` for throughputs and scores, ``peer / ours`` for
times. Both sides
run in the same process, one after the other, on the same inputs, so the
ratio is meaningful on a noisy machine even when absolute times are not.
"""
