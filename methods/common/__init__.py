"""Maths shared by several methods (kept small; each function documented).

* :mod:`methods.common.smc_math`: importance weights, effective sample size,
  systematic resampling and the adaptive-tempering solver of Sequential
  Monte Carlo samplers.
"""
