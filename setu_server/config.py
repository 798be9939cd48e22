"""Server settings: environment variables (SETU_*), overridden by flags.

Every setting is listed in the README's configuration table.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from setu_engine.kinds import DEFAULT_BATCH_ROWS

DEFAULT_DATA_DIR = Path(".setu")

# Settings where an empty value is a choice (turn it off), not "unset".
_EMPTY_MEANS_OFF = frozenset({"http_listen"})


class SettingsError(SystemExit, ValueError):
    """A setting that cannot work, in the words its user reads (it names the
    SETU_* variable). Raised when Settings are built. A ValueError, and also
    the SystemExit these checks raised before they moved here, so callers
    that caught one still do and an uncaught one still ends the process with
    the message on stderr and exit code 1."""


# The settings each service takes, one section of Settings each. They live
# here, below the services, so reading the configuration imports no service.


@dataclass(frozen=True)
class LeasePolicy:
    """TaskService's leases: how long one lasts, how long LeaseTask and its
    poll wait, and how failed tasks are retried."""

    ttl_seconds: float = 60.0
    wait_cap_seconds: float = 30.0
    # Only a fallback: new work arrives by NOTIFY.
    poll_seconds: float = 10.0
    retry_backoff_seconds: float = 5.0
    max_backoff_seconds: float = 600.0
    # Outages (a database gone for a moment) a task may be handed back for
    # without spending an attempt; past them, an outage is a failure.
    outage_free_retries: int = 5


@dataclass(frozen=True)
class ReaperSettings:
    """The Reaper's loop (setu_server/maintenance/reaper.py): expired leases requeued."""

    interval_seconds: float = 5.0
    # Leases reaped per transaction; a pass repeats until none is left.
    batch: int = 500


@dataclass(frozen=True)
class JanitorSettings:
    """The Janitor's loop (setu_server/maintenance/janitor.py): staged data past its
    retention deleted."""

    interval_seconds: float = 60.0
    retention_seconds: float = 24 * 3600.0
    # Runs looked at per pass, purged or skipped.
    batch: int = 50


@dataclass(frozen=True)
class SchedulerSettings:
    """The Scheduler's loop (setu_server/maintenance/scheduler.py): due pipeline ticks."""

    interval_seconds: float = 1.0
    # Due pipelines fired per pass.
    batch: int = 100


@dataclass(frozen=True)
class FallbackSettings:
    """The listen fallback (setu_server/maintenance/listen_fallback.py): re-checks while
    the LISTEN session does not deliver."""

    interval_seconds: float = 1.0


@dataclass(frozen=True)
class GaugeSettings:
    """The /metrics gauges' refresh (setu_server/maintenance/gauges.py)."""

    interval_seconds: float = 10.0


@dataclass(frozen=True)
class Settings:
    listen: str = field(default="127.0.0.1:50051", metadata={"help": "host:port to serve on"})
    http_listen: str = field(
        default="127.0.0.1:8080",
        metadata={"help": "host:port of the run monitor and /metrics (empty: no HTTP listener)"},
    )
    database_url: str = field(
        default="", metadata={"help": "PostgreSQL URL; empty starts an embedded server"}
    )
    database_pooler: str = field(
        default="auto",
        metadata={
            "help": "what DATABASE_URL goes through: none, session (a session-mode pooler), "
            "transaction (a transaction-mode pooler: no statement cache, one more round trip "
            "per query), or auto (look at startup)"
        },
    )
    listen_database_url: str = field(
        default="",
        metadata={
            "help": "PostgreSQL URL of the LISTEN session (empty: DATABASE_URL); point it "
            "past a transaction-mode pooler, at PostgreSQL itself"
        },
    )
    listen_probe_seconds: float = field(
        default=5.0,
        metadata={
            "help": "how often the LISTEN session is pinged and probed (a notification sent "
            "through the pool must come back)"
        },
    )
    data_dir: Path = field(
        default=DEFAULT_DATA_DIR,
        metadata={"help": "folder for the embedded database and local blobs"},
    )
    blob_url: str = field(
        default="", metadata={"help": "where staged data goes: a folder or s3://bucket"}
    )
    s3_endpoint_url: str = field(default="", metadata={"help": "S3 endpoint, for non-AWS S3"})
    s3_region: str = field(default="us-east-1", metadata={"help": "S3 region of the blob bucket"})
    shared_secrets: str = field(
        default="",
        metadata={
            "help": "comma-separated secret names every workspace's cloud connections "
            "may use (top-level secrets-file entries or SETU_SECRET_*)"
        },
    )
    cloud_reach: str = field(
        default="restricted",
        metadata={
            "help": "restricted: cloud connections reach files only under "
            "LOCAL_FILES_ROOT and only public addresses (plus CLOUD_ALLOW_NETWORKS); "
            "local: all this machine can (one-person setups; `setu dev`'s default)"
        },
    )
    cloud_allow_networks: str = field(
        default="",
        metadata={
            "help": "comma-separated CIDRs that cloud connections may reach although they "
            "are private or local (e.g. 10.20.0.0/16); never Setu's own database"
        },
    )
    local_files_root: str = field(
        default="",
        metadata={
            "help": "holds a folder per workspace, ROOT/<workspace id>/, the only place its "
            "cloud connections may read or write files (default DATA_DIR/files)"
        },
    )
    secrets_file: str = field(
        default="",
        metadata={"help": "JSON file of NAME -> value for cloud connections' secret references"},
    )
    batch_rows: int = field(
        default=DEFAULT_BATCH_ROWS,
        metadata={"help": "rows per batch: the grain of progress and cancel"},
    )
    direct_max_rows: int = field(
        default=50_000,
        metadata={"help": "a fresh cloud run of at most this many rows copies without staging"},
    )
    dry_run_sample_rows: int = field(
        default=1_000,
        metadata={
            "help": "a dry run checks at most this many rows of each stream through its "
            "operator chain and declared column types"
        },
    )
    resumable_load_min_bytes: int = field(
        default=64 * 1024 * 1024,
        metadata={
            "help": "a staged stream of several parts and at least this many bytes loads "
            "part by part, resumably"
        },
    )
    admin_token: str = field(
        default="", metadata={"help": "token for AdminService; empty disables admin calls"}
    )
    page_token_key: str = field(
        default="",
        metadata={
            "help": "secret that signs page tokens; the same on every replica "
            "(empty: a random key per process, so a token works only where it was issued)"
        },
    )
    tls_cert: str = field(default="", metadata={"help": "PEM certificate file; enables TLS"})
    tls_key: str = field(default="", metadata={"help": "PEM private key file"})
    tls_client_ca: str = field(
        default="",
        metadata={
            "help": "PEM of the CA whose client certificates are accepted: every client "
            "(agents, workers, SDK, CLI) must present one (mutual TLS); needs TLS_CERT"
        },
    )
    worker_client_cert: str = field(
        default="",
        metadata={
            "help": "PEM client certificate this server's own cloud workers present "
            "(needed with TLS_CLIENT_CA)"
        },
    )
    worker_client_key: str = field(
        default="", metadata={"help": "PEM private key of WORKER_CLIENT_CERT"}
    )
    grace_seconds: float = field(
        default=10.0, metadata={"help": "how long in-flight calls may finish on shutdown"}
    )
    wait_cap_seconds: float = field(default=60.0, metadata={"help": "WaitJob's long-poll cap"})
    processes: int = field(
        default=0,
        metadata={
            "help": "setu-server processes sharing the gRPC port (SO_REUSEPORT), each with its "
            "own watch hub, LISTEN session and pool of DB_POOL_SIZE (0: one per core; 1: this "
            "process alone)"
        },
    )
    worker_processes: int = field(
        default=1,
        metadata={
            "help": "cloud worker processes this server starts and keeps running (0: none; "
            "run setu-worker elsewhere with the same WORKER_TOKEN)"
        },
    )
    worker_concurrency: int = field(
        default=4, metadata={"help": "cloud tasks each cloud worker process runs at once"}
    )
    worker_idle_connection_seconds: float = field(
        default=60.0,
        metadata={
            "help": "how long a cloud worker keeps a run's database connection open for the "
            "next run of the same connection (0: close each at once)"
        },
    )
    worker_token: str = field(
        default="",
        metadata={
            "help": "the token cloud workers present (16+ characters); empty: a fresh one "
            "for this server's own workers at every start"
        },
    )
    auth_cache_seconds: float = field(
        default=5.0,
        metadata={"help": "how long a checked credential is trusted without a query"},
    )
    watch_recheck_seconds: float = field(
        default=30.0, metadata={"help": "how often watched jobs are re-read as a safety net"}
    )
    db_pool_size: int = field(default=10, metadata={"help": "database connections per server"})
    log_level: str = field(default="info", metadata={"help": "debug, info, warning, error"})
    log_format: str = field(default="json", metadata={"help": "json or text (key=value)"})
    # The sections: each the very settings object its service takes. Users
    # set them through flat names (SETU_LEASE_TTL_SECONDS, --lease-ttl-seconds:
    # SECTIONED below), which stay readable here as properties.
    leasing: LeasePolicy = field(default_factory=LeasePolicy, metadata={"section": True})
    reaper: ReaperSettings = field(default_factory=ReaperSettings, metadata={"section": True})
    janitor: JanitorSettings = field(default_factory=JanitorSettings, metadata={"section": True})
    scheduler: SchedulerSettings = field(
        default_factory=SchedulerSettings, metadata={"section": True}
    )
    fallback: FallbackSettings = field(default_factory=FallbackSettings, metadata={"section": True})
    gauges: GaugeSettings = field(default_factory=GaugeSettings, metadata={"section": True})

    def __post_init__(self) -> None:
        for problem in _problems(self):
            raise SettingsError(problem)

    @property
    def lease_ttl_seconds(self) -> float:
        return self.leasing.ttl_seconds

    @property
    def lease_wait_cap_seconds(self) -> float:
        return self.leasing.wait_cap_seconds

    @property
    def lease_poll_seconds(self) -> float:
        return self.leasing.poll_seconds

    @property
    def task_retry_backoff_seconds(self) -> float:
        return self.leasing.retry_backoff_seconds

    @property
    def outage_free_retries(self) -> int:
        return self.leasing.outage_free_retries

    @property
    def reaper_interval_seconds(self) -> float:
        return self.reaper.interval_seconds

    @property
    def staged_retention_hours(self) -> float:
        return self.janitor.retention_seconds / 3600

    @property
    def janitor_interval_seconds(self) -> float:
        return self.janitor.interval_seconds

    @property
    def scheduler_interval_seconds(self) -> float:
        return self.scheduler.interval_seconds

    @property
    def listen_fallback_seconds(self) -> float:
        return self.fallback.interval_seconds

    @property
    def metrics_refresh_seconds(self) -> float:
        return self.gauges.interval_seconds

    @property
    def process_count(self) -> int:
        """How many server processes serve: PROCESSES, or one per core."""
        return self.processes or os.cpu_count() or 1

    @property
    def embedded_pg_dir(self) -> Path:
        return self.data_dir / "pg"

    @property
    def files_root(self) -> Path:
        return Path(self.local_files_root) if self.local_files_root else self.data_dir / "files"

    @property
    def blob_root(self) -> str:
        return self.blob_url or str(self.data_dir / "blobs")

    @classmethod
    def env_name(cls, name: str) -> str:
        return "SETU_" + name.upper()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """The environment's SETU_* settings, then `overrides` (flat names,
        as the flags spell them; None: not given)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, kind in _flat_names().items():
            raw = env.get(cls.env_name(name))
            if raw is not None and (raw != "" or name in _EMPTY_MEANS_OFF):
                values[name] = _coerce(kind, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls().updated(**values)

    def updated(self, **values: Any) -> Settings:
        """These settings with `values` changed: fields, sections, or the flat
        names users set (`lease_ttl_seconds=5` changes `leasing.ttl_seconds`)."""
        plain = {k: v for k, v in values.items() if k not in SECTIONED}
        sections: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            if name in SECTIONED:
                flat = SECTIONED[name]
                sections.setdefault(flat.section, {})[flat.attr] = (
                    value * flat.scale if flat.scale != 1.0 else value
                )
        for section, changes in sections.items():
            plain[section] = replace(plain.get(section, getattr(self, section)), **changes)
        return replace(self, **plain)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        defaults = cls()
        for name, kind in _flat_names().items():
            help_text = SECTIONED[name].help if name in SECTIONED else _plain_help(name)
            parser.add_argument(
                "--" + name.replace("_", "-"),
                dest=name,
                default=None,
                type=functools.partial(_coerce, kind),
                help=f"{help_text} (env {cls.env_name(name)}, default {getattr(defaults, name)})",
            )

    @classmethod
    def from_args(cls, args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Settings:
        return cls.from_env(env, **{name: getattr(args, name, None) for name in _flat_names()})


@dataclass(frozen=True)
class Sectioned:
    """A setting users set by a flat name whose value lives in a section:
    `section.attr` holds the flat value times `scale`."""

    section: str
    attr: str
    help: str
    scale: float = 1.0


SECTIONED: dict[str, Sectioned] = {
    "lease_wait_cap_seconds": Sectioned("leasing", "wait_cap_seconds", "LeaseTask's long-poll cap"),
    "lease_ttl_seconds": Sectioned(
        "leasing", "ttl_seconds", "how long a task lease lasts without a heartbeat"
    ),
    "lease_poll_seconds": Sectioned(
        "leasing", "poll_seconds", "LeaseTask's fallback poll (work arrives by NOTIFY)"
    ),
    "task_retry_backoff_seconds": Sectioned(
        "leasing",
        "retry_backoff_seconds",
        "first retry delay of a failed task; doubles per attempt",
    ),
    "outage_free_retries": Sectioned(
        "leasing",
        "outage_free_retries",
        "times a task whose database was unreachable for a moment is retried "
        "without spending an attempt",
    ),
    "reaper_interval_seconds": Sectioned(
        "reaper", "interval_seconds", "how often expired leases are requeued"
    ),
    "staged_retention_hours": Sectioned(
        "janitor", "retention_seconds", "how long a run's staged data outlives the run", 3600
    ),
    "janitor_interval_seconds": Sectioned(
        "janitor", "interval_seconds", "how often expired staged data is looked for"
    ),
    "scheduler_interval_seconds": Sectioned(
        "scheduler", "interval_seconds", "how often pipeline schedules are checked for due ticks"
    ),
    "listen_fallback_seconds": Sectioned(
        "fallback",
        "interval_seconds",
        "while notifications do not arrive on the LISTEN session, how often "
        "watched jobs and parked leases are re-checked",
    ),
    "metrics_refresh_seconds": Sectioned(
        "gauges", "interval_seconds", "how often the task and agent gauges of /metrics are re-read"
    ),
}


def _problems(settings: Settings) -> Iterator[str]:
    """What makes these settings unusable, first problem first (in the order
    the server used to meet them while starting)."""
    if settings.admin_token and len(settings.admin_token) < 16:
        yield "SETU_ADMIN_TOKEN must be at least 16 characters"
    if settings.worker_token and len(settings.worker_token) < 16:
        yield "SETU_WORKER_TOKEN must be at least 16 characters"
    if settings.blob_url.startswith("s3://"):
        bucket, _, rest = settings.blob_url[len("s3://") :].partition("/")
        if not bucket or rest.strip("/"):
            yield f"SETU_BLOB_URL wants s3://BUCKET, got {settings.blob_url!r}"
    if settings.processes < 0:
        yield f"SETU_PROCESSES counts server processes (0: one per core), not {settings.processes}"
    if settings.cloud_reach not in ("restricted", "local"):
        yield f"SETU_CLOUD_REACH is restricted or local, not {settings.cloud_reach!r}"
    # TLS settings that could only fail later.
    if settings.tls_cert and not settings.tls_key:
        yield "SETU_TLS_CERT is set but SETU_TLS_KEY is not"
    if settings.tls_client_ca and not settings.tls_cert:
        yield "SETU_TLS_CLIENT_CA needs SETU_TLS_CERT and SETU_TLS_KEY (mutual TLS is TLS)"
    if bool(settings.worker_client_cert) != bool(settings.worker_client_key):
        yield "SETU_WORKER_CLIENT_CERT and SETU_WORKER_CLIENT_KEY go together"
    own_workers = settings.worker_processes > 0 and settings.worker_concurrency > 0
    if settings.tls_client_ca and own_workers and not settings.worker_client_cert:
        # They would be refused at every connection attempt, forever.
        yield (
            "SETU_TLS_CLIENT_CA requires client certificates, so this server's own cloud "
            "workers need SETU_WORKER_CLIENT_CERT and SETU_WORKER_CLIENT_KEY (or "
            "SETU_WORKER_PROCESSES=0, with setu-worker run elsewhere)"
        )


@functools.cache
def _flat_names() -> dict[str, str]:
    """Every name users set (SETU_<NAME>, --<name>) with its type: the plain
    fields, then the sections' settings."""
    names = {f.name: str(f.type) for f in fields(Settings) if not f.metadata.get("section")}
    defaults = Settings()
    for name, flat in SECTIONED.items():
        kinds = {f.name: str(f.type) for f in fields(getattr(defaults, flat.section))}
        names[name] = "float" if flat.scale != 1.0 else kinds[flat.attr]
    return names


def _plain_help(name: str) -> str:
    return str(next(f for f in fields(Settings) if f.name == name).metadata["help"])


def _coerce(type_name: Any, raw: str) -> Any:
    kind = str(type_name)
    if kind == "float":
        return float(raw)
    if kind == "int":
        return int(raw)
    if kind == "Path":
        return Path(raw)
    return raw
