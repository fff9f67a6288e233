"""GraphPFN experiments: the prior's statistics (``prior``) and their tables and figures (``prior_report``)."""
