"""Latent flow matching: the run (``experiment``), its training (``training``), sampling and evaluation
(``evaluation``) and tables and figures (``report``)."""
