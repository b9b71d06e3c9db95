"""Neutral values and helpers every layer uses: errors, provenance, paths, units, statistics, step traces."""
