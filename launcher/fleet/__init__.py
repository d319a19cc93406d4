"""Several hosts behind sglang-router: the fleet file, the router, status and the rolling switch."""
