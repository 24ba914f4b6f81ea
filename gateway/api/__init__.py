"""The HTTP API (DESIGN §9)."""
