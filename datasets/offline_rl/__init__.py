"""Offline RL datasets: the project's generated D4RL-style datasets and real D4RL.

* :mod:`datasets.offline_rl.builder`: TFDS builder ``offline_rl`` (array_record)
  of generated datasets, with their reference returns.
* :mod:`datasets.offline_rl.d4rl`: D4RL HDF5 files, ``qlearning_dataset``
  semantics, D4RL's normalisation constants, IQL's reward scale.
* :mod:`datasets.offline_rl.tfds_d4rl`: the TFDS catalog's ``d4rl_mujoco_*``
  (RLDS episodes) in the same transition format.
* :mod:`datasets.offline_rl.suite`: D4RL-style composition of episodes into
  random / medium / expert / medium-replay / medium-expert rows.
"""
