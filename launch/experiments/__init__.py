"""Experiment implementations (``run(config, ctx)``), one module per experiment."""
