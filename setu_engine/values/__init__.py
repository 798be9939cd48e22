"""The engine's values and types: neutral column types, the values Python
cannot hold, SQL type names, text spellings."""
