"""The cloud runtime (setu-worker): the agents' runtime loop, run apart from
the server for the `cloud` queue, with the rules that keep tenants'
connections off the control plane (policy.py) and the `migrate` task that
moves a whole run (migrate.py), whose books it keeps through the server
(book.py)."""
