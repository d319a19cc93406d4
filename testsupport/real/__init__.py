"""Test support for the real-server tier (tests_real/): real SGLang 0.5.23 on the CPU, run from .venv-real.

Never shipped and never on PYTHONPATH outside that tier: the kernel stand-in in kernel_standin/ is put on
the server's PYTHONPATH by realstack.RealStack only.
"""
