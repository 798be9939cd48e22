"""The filter and expression language: its parser and its compiler to
Python and SQL."""
