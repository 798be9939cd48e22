"""setu-server: the control plane, its CLI (`setu`) and its maintenance loops."""

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

# setu-server's own dependencies are the `server` extra (pyproject.toml); an
# agent's install lacks them. Said here, once, rather than as whichever
# module's ImportError comes first.
SERVER_EXTRA = ("pgserver", "aiohttp", "jinja2", "prometheus_client", "croniter", "grpc_health")


def check_server_extra() -> None:
    """Raises ModuleNotFoundError (an ImportError, as `setu dev` expects of
    a missing module) naming the extra when one of its distributions is not
    installed."""
    import importlib.util

    missing = [name for name in SERVER_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise ModuleNotFoundError(
            f"setu-server needs the server extra, which this install lacks (no "
            f"{', '.join(missing)}): pip install 'setu[server]'"
        )


check_server_extra()
