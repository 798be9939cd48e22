"""The data-plane engine: providers, the staged format, blob stores and the
operator chain. The cloud worker and every agent run the same engine."""
