"""`bench sla`: the highest request rate each cell holds within p99 TTFT and TPOT targets (docs/sla.md)."""
