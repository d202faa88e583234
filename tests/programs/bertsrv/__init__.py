"""A small embedding service around a real transformers BertModel (third-party code, no NVTX)."""
