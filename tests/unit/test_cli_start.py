"""What `setu` imports to start: `--help` builds the whole parser without the
SDK's client (grpc, protobuf, the stubs, asyncio) and without the server
stack; a client's command (`setu jobs get`) imports the SDK's client and
still no server stack. Each check runs `setu` in a fresh interpreter and
reads its sys.modules; the figures are scripts/bench_flights.py's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from setu_cli import options, session

# Never imported by a client's command: the server, its database driver,
# the data-plane engine.
SERVER_STACK = ("setu_server", "asyncpg", "setu_engine", "setu_agent", "setu_tasks")
# Not imported to build the parser: what only calling a server needs.
# (setu_cli.session sits in sys.modules unexecuted, options.lazy_module's.)
CLIENT_STACK = ("grpc", "google.protobuf", "asyncio", "tenacity", "setu_client._client")


def loaded_by(code: str, env: dict[str, str] | None = None) -> tuple[set[str], str]:
    """The modules a fresh interpreter holds after `code`, and its stderr."""
    probe = textwrap.dedent(code) + textwrap.dedent(
        """
        import json, sys
        print(json.dumps(sorted(sys.modules)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    )
    return set(json.loads(done.stdout.splitlines()[-1])), done.stderr


def setu(*argv: str) -> str:
    """`setu ARGV…` run in-process by the probe, its SystemExit swallowed."""
    return f"""
        import contextlib, io, sys
        from setu_cli.main import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main({list(argv)!r})
        """


def under(modules: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in roots))


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("jobs", "--help"), ("run", "--help"), ("admin", "--help")],
)
def test_help_builds_the_parser_without_the_client_or_the_server(argv: tuple[str, ...]) -> None:
    modules, _ = loaded_by(setu(*argv))
    assert "setu_cli.main" in modules  # the probe did run the command line
    assert under(modules, SERVER_STACK) == []
    assert under(modules, CLIENT_STACK) == []


def test_a_client_command_imports_the_sdk_and_no_server_stack() -> None:
    # No API key: the command runs as far as its session (the SDK's client
    # imported, the key checked) and stops there, without dialling anyone.
    env = {"PATH": "/usr/bin:/bin", "SETU_API_KEY": ""}
    modules, stderr = loaded_by(setu("jobs", "get", "0" * 8), env=env)
    assert "an API key is required" in stderr
    assert {"setu_cli.session", "setu_client._client", "grpc"} <= modules
    assert under(modules, SERVER_STACK) == []


def test_import_setu_client_loads_its_names_on_first_use() -> None:
    modules, _ = loaded_by(
        """
        import setu_client
        from setu_client.tls import add_tls_options
        """
    )
    assert under(modules, ("grpc", "google.protobuf", "setu_client._client")) == []
    modules, _ = loaded_by("from setu_client import SetuClient")
    assert {"setu_client._client", "grpc"} <= modules


def test_the_lazy_names_are_the_modules_own() -> None:
    import setu_client
    import setu_client._client
    import setu_client.errors

    assert setu_client.SetuClient is setu_client._client.SetuClient
    assert setu_client.SetuError is setu_client.errors.SetuError
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = setu_client.no_such_name  # type: ignore[attr-defined]
    assert set(setu_client.__all__) <= set(dir(setu_client))
    assert sorted(setu_client._EXPORTS) == sorted(setu_client.__all__)


def test_the_session_names_the_parsers_own_options() -> None:
    # One definition: what session.py names is options.py's.
    for name in (
        "EXIT_SUCCEEDED",
        "EXIT_FAILED",
        "EXIT_ERROR",
        "EXIT_CANCELLED",
        "EXIT_STILL_RUNNING",
        "EXIT_INTERRUPTED",
        "EXIT_CODES_HELP",
        "server_options",
    ):
        assert getattr(options, name) is getattr(session, name), name


def test_a_lazy_module_loads_at_its_first_attribute_and_is_the_module_itself() -> None:
    # A handler's `cli_session.CliError` is the class run_command catches.
    before, _ = loaded_by(
        """
        from setu_cli.options import lazy_module
        lazy = lazy_module("setu_cli.session")
        """
    )
    assert "setu_client._client" not in before
    after, _ = loaded_by(
        """
        from setu_cli.options import lazy_module
        lazy = lazy_module("setu_cli.session")
        error = lazy.CliError
        import setu_cli.session
        from setu_cli import session
        assert error is setu_cli.session.CliError and session is setu_cli.session
        """
    )
    assert "setu_client._client" in after
