"""Tests of the lanes package."""
