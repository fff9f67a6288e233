"""REG / OPG offline RL experiments: the run (``experiment``), its datasets (``data``) and tables (``report``)."""
