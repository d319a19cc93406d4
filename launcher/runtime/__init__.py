"""The server container runtime: supervisord, the control API, profile switches, state files."""
