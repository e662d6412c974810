"""General utilities every package may use: atomic files, worker threads, result caches, provenance, tables."""
