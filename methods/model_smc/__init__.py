"""ModelSMC: discovering mechanistic ODE models by SMC over model structures."""
