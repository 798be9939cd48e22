"""Moving a stream from a source to a destination (transfer) and saying
what a load would do without doing it (dry run)."""
