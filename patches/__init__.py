"""Patches against the pinned SGLang wheel; `patches.apply` applies, verifies and records them."""
