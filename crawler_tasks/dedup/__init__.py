"""Deduplication: content fingerprints, simhash near-duplicates, learned URL rules.
(Nothing is imported here: the pure modules must not pull in the Redis-backed ones.)"""
