"""ModelSMC experiments: the sampler run (``experiment``), the fit-quality panel (``fit_panel``), the
calibration of parameter intervals (``calibration``), and their pieces (``tasks``, ``sampler``, ``exact``,
``scoring``, ``intervals``, ``report``); ``discover`` runs ``experiment`` on the user's arrays."""
