"""Test support, never shipped: the SIMULATED SGLang stand-in, the demo and the test stack."""
