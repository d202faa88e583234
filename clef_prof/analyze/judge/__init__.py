"""Judging: validation warnings and findings over the typed result."""
