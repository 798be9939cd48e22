"""What a run will do before it moves a row: the window each stream's read
covers (incremental) and what a load changes in its destination."""
