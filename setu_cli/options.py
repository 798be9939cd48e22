"""What `setu` needs to build its parser, and nothing more: the exit codes,
their help, and the server options. `setu --help` (and every parse) imports
this, not session.py, so the parser is built without grpc, protobuf, the
stubs or asyncio; session.py, which runs the parsed command over the SDK, is
imported only once a command runs (`lazy_module`).

session.py names the same constants and `server_options` (imported from
here) for the command modules that reach them through it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from types import ModuleType
from typing import Literal

from setu_client.tls import add_tls_options

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_ERROR = 2
EXIT_CANCELLED = 3
EXIT_STILL_RUNNING = 4
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = """exit codes:
  0  the job succeeded
  1  the job failed (connections test: the test ran and failed)
  2  the command itself failed (bad input, refused call, server unreachable)
  3  the job was cancelled
  4  (jobs wait --timeout) timed out: the job had not ended in time, and carries on
  130  interrupted (Ctrl-C): the job keeps running; `setu jobs cancel ID` stops it"""

# Which credential a command signs its calls with: a tenant's API key (the
# client commands) or the operator's admin token (`setu admin`).
Credential = Literal["api_key", "admin_token"]

_CREDENTIAL_HELP: dict[Credential, tuple[str, str]] = {
    "api_key": ("--api-key", "required (env SETU_API_KEY)"),
    "admin_token": ("--admin-token", "(env SETU_ADMIN_TOKEN)"),
}


def server_options(credential: Credential = "api_key") -> argparse.ArgumentParser:
    """The server options (and, for the client commands, --json), for every
    level of the command line (`setu --json jobs get ID`, `setu jobs get ID
    --json`, `setu admin --server S workspace list`). Their defaults are
    SUPPRESS, so a level that does not see one leaves what another level
    parsed; session.fill_defaults fills in the rest."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("server options")
    hidden = argparse.SUPPRESS
    group.add_argument(
        "--server",
        default=hidden,
        help="host:port of setu-server (env SETU_SERVER; default 127.0.0.1:50051)",
    )
    flag, help = _CREDENTIAL_HELP[credential]
    group.add_argument(flag, default=hidden, help=help)
    add_tls_options(group, from_environment=False)
    if credential == "api_key":
        group.add_argument(
            "--json", action="store_true", default=hidden, help="print one JSON document"
        )
    return common


def lazy_module(name: str) -> ModuleType:
    """The module `name`, imported at its first attribute access. A command
    module names `session.CliError` or `apb.ListAgentsResponse` in its
    handlers only, so building the parser (which refers to the handlers and
    calls none) imports neither session.py nor the SDK's client."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, name
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
    loader.exec_module(module)
    return module
