"""Benchmarks: each runs Herald and a baseline side by side and prints ratios."""
