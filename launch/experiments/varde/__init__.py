"""VarDE experiments: best-arm identification (``bai``, its tables ``bai_report``),
tree search (``mcts``, its environments ``mcts_envs``) and best-policy
identification (``bpi``, ``bpi_envs``); the last two share a run loop
(``search``) and their tables (``search_report``)."""
