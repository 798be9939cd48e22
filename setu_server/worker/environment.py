"""The environment setu-server gives its own cloud workers, written from the
workers' own settings class (setu_agent/settings.py), which they read back."""

from __future__ import annotations

import os
from pathlib import Path

from setu_agent.settings import WORKER, RuntimeSettings
from setu_server.config import Settings
from setu_server.worker.supervisor import shared_secret_variables, worker_environment


def worker_settings(settings: Settings, port: int, token: str) -> dict[str, str]:
    """The whole environment of this server's own cloud workers: what they
    need to lease the cloud's tasks, and no credential of the control plane
    but the staging blob's (the server's own AWS_* keys, when it has them).
    Written from the worker's settings class, which reads it back."""
    host = settings.listen.rpartition(":")[0].strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    server = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    secrets_file = str(Path(settings.secrets_file).resolve()) if settings.secrets_file else ""
    runtime = RuntimeSettings(
        server=server,
        token=token,
        exit_with_stdin=True,
        concurrency=settings.worker_concurrency,
        idle_connection_seconds=settings.worker_idle_connection_seconds,
        tls=bool(settings.tls_cert),
        root_cert=_resolved(settings.tls_cert),
        # For a server that requires client certificates (SETU_TLS_CLIENT_CA).
        client_cert=_resolved(settings.worker_client_cert),
        client_key=_resolved(settings.worker_client_key),
        secrets_file=secrets_file,
        shared_secrets=settings.shared_secrets,
        cloud_reach=settings.cloud_reach,
        cloud_allow_networks=settings.cloud_allow_networks,
        local_files_root=str(settings.files_root.resolve()),
        batch_rows=settings.batch_rows,
        direct_max_rows=settings.direct_max_rows,
        dry_run_sample_rows=settings.dry_run_sample_rows,
        resumable_load_min_bytes=settings.resumable_load_min_bytes,
        grace_seconds=settings.grace_seconds,
        log_level=settings.log_level,
        log_format=settings.log_format,
        blob_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", ""),
        blob_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        blob_session_token=os.environ.get("AWS_SESSION_TOKEN", ""),
    )
    return worker_environment(
        runtime.to_env(WORKER) | shared_secret_variables(settings.shared_secrets, os.environ),
        os.environ,
    )


def _resolved(path: str) -> str:
    return str(Path(path).resolve()) if path else ""
