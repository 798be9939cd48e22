"""The task contract on the wire: one module per gRPC edge, each holding both
directions of every message it converts, so a runtime and the server read and
write the same shapes with the same code.

- `common`: the pieces both edges carry (columns, row changes, cursors,
  artifacts, a dry run's plan, stored parts, connection and blob settings,
  write modes).
- `agents`: AgentService (a leased task, the typed results of CompleteTask,
  the extract and load specs, a heartbeat's stored parts).
- `cloud`: CloudRunService (a migrate task's spec).

Reading a message a runtime sent is strict where the server has always been
strict: a column's SQL type must be one Setu knows (MalformedResult), a cursor
and a stored part's path are checked (InvalidArgument), naming the field."""
