"""Providers by name."""
