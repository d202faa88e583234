"""Figures: each module a function of the tables to a typed part of the result."""
