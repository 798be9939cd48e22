"""The runtimes' settings: one class for setu-agent and setu-worker.

Each setting has one name, one default and one environment variable, read by
the same code for both runtimes (flags override the environment). A setting
only one runtime has says so (`roles`); a variable whose name differs by
runtime (the token, the concurrency) says it per runtime. Where the two
runtimes' names had drifted apart, the shared name is read and the runtime's
old name keeps working as an alias, read first (docs/operations.md).

setu-server writes its own workers' environment from this class
(`RuntimeSettings(...).to_env(WORKER)`) and the worker reads it back with it
(`RuntimeSettings.from_env(WORKER)`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from setu_agent.cloud.connections import IDLE_SECONDS
from setu_agent.runtime.loop import REPORT_GRACE_SECONDS
from setu_client.long_poll import (
    DEFAULT_LONG_POLL_SECONDS,
    ENV_LONG_POLL_SECONDS,
    configured_seconds,
)
from setu_client.tls import TlsConfig, add_tls_options, tls_defaults, tls_from_options
from setu_engine.kinds import DEFAULT_BATCH_ROWS
from setu_engine.staged.resumable import DEFAULT_MIN_BYTES

Role = Literal["agent", "worker"]
AGENT: Role = "agent"
WORKER: Role = "worker"
BOTH: tuple[Role, ...] = (AGENT, WORKER)

# Read through setu_client.tls (the same rules as every client's --tls), so
# they are listed here only to be written back (to_env) and carried.
_TLS_ENV = {
    "tls": "SETU_TLS",
    "root_cert": "SETU_ROOT_CERT",
    "client_cert": "SETU_CLIENT_CERT",
    "client_key": "SETU_CLIENT_KEY",
}


def _setting(
    default: Any,
    help: str | Mapping[Role, str],
    env: str | Mapping[Role, str],
    *,
    roles: tuple[Role, ...] = BOTH,
    aliases: Mapping[Role, tuple[str, ...]] | None = None,
    flag: bool = True,
    choices: tuple[str, ...] | None = None,
    parse: Callable[[str], Any] | None = None,
) -> Any:
    return field(
        default=default,
        metadata={
            "help": help,
            "env": env,
            "roles": roles,
            "aliases": aliases or {},
            "flag": flag,
            "choices": choices,
            "parse": parse,
        },
    )


@dataclass(frozen=True)
class RuntimeSettings:
    server: str = _setting("127.0.0.1:50051", "setu-server address", "SETU_SERVER")
    token: str = _setting(
        "",
        {AGENT: "this agent's token", WORKER: "the worker token"},
        {AGENT: "SETU_AGENT_TOKEN", WORKER: "SETU_WORKER_TOKEN"},
    )
    # TLS: flags and variables of setu_client.tls (see _TLS_ENV).
    tls: bool = False
    root_cert: str = ""
    client_cert: str = ""
    client_key: str = ""
    concurrency: int = _setting(
        4, "tasks run at once", {AGENT: "SETU_AGENT_CONCURRENCY", WORKER: "SETU_WORKER_CONCURRENCY"}
    )
    secrets_file: str = _setting(
        "",
        {
            AGENT: "JSON file of secret name -> value; else secrets come from the environment",
            WORKER: 'cloud secrets, {"workspaces": {"<id>": {NAME: value}}}',
        },
        "SETU_SECRETS_FILE",
    )
    shared_secrets: str = _setting(
        "",
        "comma-separated names every workspace may use",
        "SETU_SHARED_SECRETS",
        roles=(WORKER,),
    )
    cloud_reach: str = _setting(
        "restricted",
        "restricted, or local for one-person setups",
        "SETU_CLOUD_REACH",
        roles=(WORKER,),
        choices=("restricted", "local"),
    )
    cloud_allow_networks: str = _setting(
        "",
        "CIDRs cloud connections may reach although private",
        "SETU_CLOUD_ALLOW_NETWORKS",
        roles=(WORKER,),
    )
    local_files_root: str = _setting(
        ".setu/files",
        "the folder of the workspaces' cloud files",
        "SETU_LOCAL_FILES_ROOT",
        roles=(WORKER,),
    )
    blob_url: str = _setting(
        "",
        "override the staging location the server names",
        "SETU_BLOB_URL",
        roles=(AGENT,),
    )
    # The endpoint of the agent's own s3:// staging location (BLOB_URL).
    s3_endpoint_url: str = _setting(
        "", "S3 endpoint of --blob-url", "SETU_S3_ENDPOINT_URL", roles=(AGENT,), flag=False
    )
    blob_access_key_id: str = _setting(
        "", "the staging blob's access key", "SETU_BLOB_ACCESS_KEY_ID", roles=(WORKER,)
    )
    blob_secret_access_key: str = _setting(
        "", "the staging blob's secret key", "SETU_BLOB_SECRET_ACCESS_KEY", roles=(WORKER,)
    )
    blob_session_token: str = _setting(
        "", "the staging blob's session token", "SETU_BLOB_SESSION_TOKEN", roles=(WORKER,)
    )
    batch_rows: int = _setting(
        DEFAULT_BATCH_ROWS,
        "rows per batch: the grain of progress and cancel",
        "SETU_BATCH_ROWS",
        aliases={AGENT: ("SETU_AGENT_BATCH_ROWS",)},
    )
    direct_max_rows: int = _setting(
        50_000,
        "a fresh small cloud → cloud run copies directly",
        "SETU_DIRECT_MAX_ROWS",
        roles=(WORKER,),
    )
    dry_run_sample_rows: int = _setting(
        1_000,
        "a dry run checks at most this many rows of each stream through its operator chain",
        "SETU_DRY_RUN_SAMPLE_ROWS",
    )
    resumable_load_min_bytes: int = _setting(
        DEFAULT_MIN_BYTES,
        "a staged stream of several parts and this many bytes loads part by part",
        "SETU_RESUMABLE_LOAD_MIN_BYTES",
        aliases={AGENT: ("SETU_AGENT_RESUMABLE_LOAD_MIN_BYTES",)},
    )
    idle_connection_seconds: float = _setting(
        IDLE_SECONDS,
        "how long a run's connection stays open for the next run of the same connection; "
        "0 closes each at once",
        "SETU_WORKER_IDLE_CONNECTION_SECONDS",
        roles=(WORKER,),
    )
    long_poll_seconds: float = _setting(
        DEFAULT_LONG_POLL_SECONDS,
        "the longest a lease long-poll is held; shortened by itself below what cuts it on "
        "the way, such as a proxy's read timeout",
        ENV_LONG_POLL_SECONDS,
        parse=lambda text: configured_seconds(float(text)),
    )
    grace_seconds: float = _setting(
        30.0, "on SIGTERM, how long running tasks may finish", "SETU_GRACE_SECONDS"
    )
    report_grace_seconds: float = _setting(
        REPORT_GRACE_SECONDS,
        "on SIGTERM, how much longer a result report in flight may take before its task is "
        "left to its lease's expiry",
        "SETU_REPORT_GRACE_SECONDS",
        roles=(AGENT,),
    )
    extra_handlers: str = _setting(
        "", "MODULE:NAME of extra task handlers", "SETU_AGENT_EXTRA_HANDLERS", roles=(AGENT,)
    )
    exit_with_stdin: bool = _setting(
        False,
        "stop when standard input closes (set by setu-server for its own workers)",
        "SETU_WORKER_SUPERVISED",
        roles=(WORKER,),
    )
    log_level: str = _setting("info", "debug, info, warning, error", "SETU_LOG_LEVEL")
    # setu-agent always logs JSON lines.
    log_format: str = _setting(
        "json", "json or text (key=value)", "SETU_LOG_FORMAT", roles=(WORKER,)
    )

    @classmethod
    def from_env(cls, role: Role, env: Mapping[str, str] | None = None) -> RuntimeSettings:
        """The settings `role` reads from `env` (default: this process's)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {
            f.name: _coerce(f, raw) for f, raw in _read(role, env) if raw is not None
        }
        return cls(**values, **tls_defaults(env))

    def to_env(self, role: Role) -> dict[str, str]:
        """The environment from which `from_env(role)` reads these settings
        back: every setting of `role` under its own name ("" for an empty one)."""
        env = {
            _env_name(f, role): _text(getattr(self, f.name))
            for f in fields(self)
            if f.name not in _TLS_ENV and role in f.metadata["roles"]
        }
        env |= {name: _text(getattr(self, key)) for key, name in _TLS_ENV.items()}
        return env

    @classmethod
    def parser(
        cls, role: Role, prog: str, description: str | None, env: Mapping[str, str] | None = None
    ) -> argparse.ArgumentParser:
        """`role`'s command line: a flag per setting, defaulting to `env`."""
        env = os.environ if env is None else env
        p = argparse.ArgumentParser(prog=prog, description=description)
        for f, raw in _read(role, env):
            if f.name == "concurrency":
                # In --help the TLS flags follow the server and the token.
                add_tls_options(p, from_environment=False)
                p.set_defaults(**tls_defaults(env))
            if not f.metadata["flag"]:
                p.set_defaults(**{f.name: f.default if raw is None else _coerce(f, raw)})
                continue
            flag = "--" + f.name.replace("_", "-")
            names = " or ".join(_names(f, role))
            helps = f.metadata["help"]
            text = helps if isinstance(helps, str) else helps[role]
            text = f"{text} (env {names})"
            if f.type == "bool":
                p.add_argument(
                    flag,
                    dest=f.name,
                    action="store_true",
                    default=f.default if raw is None else _coerce(f, raw),
                    help=text,
                )
                continue
            p.add_argument(
                flag,
                dest=f.name,
                # A default from the environment is a string, converted (and
                # refused with a usage error) as a flag's value is.
                default=f.default if raw is None else raw,
                type=_argument_type(f),
                choices=f.metadata["choices"],
                help=text,
            )
        return p

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RuntimeSettings:
        """The settings a `parser(...)` parsed."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})

    def tls_config(self) -> TlsConfig | None:
        """The TlsConfig these settings ask for (None: plaintext); reads the
        files (OSError, or ValueError for a certificate without its key)."""
        return tls_from_options(argparse.Namespace(**{k: getattr(self, k) for k in _TLS_ENV}))


def _read(role: Role, env: Mapping[str, str]) -> Iterator[tuple[Any, str | None]]:
    """Each setting of `role` with its raw value in `env` (None: not set)."""
    for f in fields(RuntimeSettings):
        if f.name in _TLS_ENV or role not in f.metadata["roles"]:
            continue
        raw = None
        for name in _names(f, role):
            value = env.get(name)
            # As the runtimes always read them: a text setting set empty is
            # empty (not its default), a switch set empty is off; a number
            # set blank is not set.
            if value is not None and (f.type in ("str", "bool") or value.strip()):
                raw = value
                break
        yield f, raw


def _env_name(f: Any, role: Role) -> str:
    env = f.metadata["env"]
    return env if isinstance(env, str) else str(env[role])


def _names(f: Any, role: Role) -> list[str]:
    """The variables a setting is read from, in order: a runtime's old alias
    first (it won before the names were shared), then the shared name."""
    return [*f.metadata["aliases"].get(role, ()), _env_name(f, role)]


def _coerce(f: Any, raw: str) -> Any:
    if f.type == "bool":
        return bool(raw)  # set to anything but "": on
    return _argument_type(f)(raw)


def _argument_type(f: Any) -> Callable[[str], Any]:
    parse: Callable[[str], Any] | None = f.metadata["parse"]
    if parse is not None:

        def checked(text: str) -> Any:
            try:
                return parse(text)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None

        return checked
    if f.type == "int":
        return int
    if f.type == "float":
        return float
    return str


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else ""
    return str(value)
