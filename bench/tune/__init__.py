"""`bench tune`'s own parts: the candidate space, the order and budget, the decision rule, the journal
and the rendered winner profile. Pure functions; the CLI that drives them is not built yet (docs/tune.md)."""
