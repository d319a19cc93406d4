"""`bench run`: every (profile, spec) end to end through the control API, into a results bundle.

`cli` (flags -> `RunArgs` -> `RunSettings`) -> `matrix` (the run loop) -> `cell` (one result and
its gate) and `repeat` (one measured repeat); `selection` decides the cells from the server's lists.
"""
