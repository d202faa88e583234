"""A toy embedding service whose batch and stages live in its main module (embedsrv/server.py)."""
