"""Reproducible benchmarks: pg_ttl against what users would do instead, side by side.

``python -m bench`` starts a throwaway PostgreSQL server (pg_ttl.localserver),
builds the data once per workload as template databases, clones a fresh copy
for every contender and repetition, measures, and writes
``bench/results/<date>.json`` plus a PNG plot. See bench/README.md.
"""
