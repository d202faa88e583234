"""Ordinary Python for clef-prof inject's tests (server.py)."""
