"""Launchers, configs, mesh/sharding, checkpoints and metric writers."""
