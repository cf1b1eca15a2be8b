"""Compact storage encodings for bulk data (metric points, sample ids)."""
