"""The operator chain of a pipeline spec: the row operators and casts, and
the operators that see the whole stream (dedupe, aggregate)."""
