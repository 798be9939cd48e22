"""`setu`, the command line, over the SDK: a client's commands (connections,
pipelines, runs, jobs …) and an operator's (`setu admin`).

The package uses only `setu_client`, save `setu dev`, whose code is the
server package's (setu_server/dev.py), imported only when it runs. The
console script is `setu_cli.main:main`; `python -m setu_cli` runs a
client's commands alone.
"""

import os

# grpc's fork handlers print "fork_posix.cc:71] Other threads are currently
# calling into gRPC, skipping fork() handlers" whenever this process forks
# while grpc threads run: the embedded PostgreSQL's pg_ctl, a cloud worker's
# start, the shutdown. Setu forks only to exec another program, never to use
# grpc in the child, so the handlers serve nothing. grpc reads this when it is
# first imported, hence here; a value set by the caller wins.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

# grpc's C core writes lines of its own on stderr, and a failed TLS handshake
# is one ("ssl_transport_security.cc:2563] Handshake failed …") at every
# attempt: they broke the CLI's one-line errors and the JSON log lines. Setu
# names the cause itself (setu_client/diagnose.py); GRPC_VERBOSITY=INFO
# brings grpc's lines back. Read when grpc is first imported, hence here.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
