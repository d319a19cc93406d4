"""Bench: end-to-end profile x speculation matrix, all-reduce microbench, trace analysis, cost model."""
