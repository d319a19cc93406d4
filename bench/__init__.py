"""Bench: end-to-end profile x speculation matrix, all-reduce microbench, trace analysis, cost model."""

__version__ = "0.1.0"
