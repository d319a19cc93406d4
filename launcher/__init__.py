"""Launcher: profiles -> plans -> rendered files -> supervised SGLang runtime."""

__version__ = "0.1.0"
