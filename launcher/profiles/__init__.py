"""Profile compilation: profile files -> validated Plan -> rendered state files."""
