"""setu-server: the control plane, its CLI (`setu`) and its maintenance loops."""

import os

# grpc's fork handlers print "fork_posix.cc:71] Other threads are currently
# calling into gRPC, skipping fork() handlers" whenever this process forks
# while grpc threads run: the embedded PostgreSQL's pg_ctl, a cloud worker's
# start, the shutdown. Setu forks only to exec another program, never to use
# grpc in the child, so the handlers serve nothing. grpc reads this when it is
# first imported, hence here; a value set by the caller wins.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
