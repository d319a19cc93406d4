"""All-reduce microbenchmark: nccl-tests-style latency and bus bandwidth per backend, per profile.

One harness (`harness.py`, run once per rank by `worker.py`) times every backend the same way; a
backend only supplies init / allreduce / teardown (`backends.py`, `experimental.py`, both named in
`registry.py`).
"""
