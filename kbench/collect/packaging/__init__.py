"""Packaging: a raw folder -> the canonical dataset tables and its data card."""
