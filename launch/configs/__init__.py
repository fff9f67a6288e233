"""Experiment configs: one ``<experiment>.py`` with ``get_config(arg)`` each."""
