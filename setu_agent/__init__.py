"""setu-agent (the edge runtime) and setu-worker (cloud/): one runtime loop
over gRPC, and the data-plane engine."""

import os

# grpc's C core writes lines of its own on stderr, and a failed TLS handshake
# is one ("ssl_transport_security.cc:2563] Handshake failed …") at every
# attempt, between the runtime's JSON log lines. The runtime names the cause
# itself (setu_client/diagnose.py); GRPC_VERBOSITY=INFO brings grpc's lines
# back. Read when grpc is first imported, hence here; the caller's value wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
