"""Maths shared by several methods (kept small; each function documented).

* :mod:`methods.common.smc_math`: importance weights, effective sample size,
  systematic resampling and the adaptive-tempering solver of Sequential
  Monte Carlo samplers.
* :mod:`methods.common.hparams`: one declaration per hyperparameter (frozen
  dataclasses whose fields carry their doc, range and choices).
* :mod:`methods.common.bisection`: jittable bracketing by bisection.
"""
