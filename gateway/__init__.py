"""Herald."""
