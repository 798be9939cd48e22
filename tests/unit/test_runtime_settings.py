"""setu-agent and setu-worker read one settings class (setu_agent/settings.py):
the server writes its workers' environment from it and the worker reads the
same settings back; a name that drifted is read under the shared name and
the old one."""

from __future__ import annotations

from setu_agent.settings import AGENT, WORKER, RuntimeSettings
from setu_server.config import Settings
from setu_server.worker.environment import worker_settings

# Every setting a worker has, each away from its default.
WORKER_SETTINGS = RuntimeSettings(
    server="10.0.0.5:7000",
    token="t" * 20,
    tls=True,
    root_cert="/certs/ca.pem",
    client_cert="/certs/worker.pem",
    client_key="/certs/worker.key",
    concurrency=9,
    secrets_file="/etc/setu/secrets.json",
    shared_secrets="WAREHOUSE,LAKE",
    cloud_reach="local",
    cloud_allow_networks="10.20.0.0/16",
    local_files_root="/srv/files",
    blob_access_key_id="AKIA",
    blob_secret_access_key="secret",
    blob_session_token="session",
    batch_rows=500,
    direct_max_rows=0,
    dry_run_sample_rows=7,
    resumable_load_min_bytes=1024,
    idle_connection_seconds=0.0,
    long_poll_seconds=20.0,
    grace_seconds=2.5,
    exit_with_stdin=True,
    log_level="debug",
    log_format="text",
)


def test_a_worker_reads_back_every_setting_written_for_it() -> None:
    env = WORKER_SETTINGS.to_env(WORKER)
    assert RuntimeSettings.from_env(WORKER, env) == WORKER_SETTINGS


def test_the_servers_workers_read_what_the_server_configured() -> None:
    settings = Settings(listen="0.0.0.0:0", worker_concurrency=7, batch_rows=321, log_format="text")
    read = RuntimeSettings.from_env(WORKER, worker_settings(settings, 5123, "w" * 16))
    assert (read.server, read.token, read.exit_with_stdin) == ("127.0.0.1:5123", "w" * 16, True)
    assert (read.concurrency, read.batch_rows, read.log_format) == (7, 321, "text")
    assert read.tls is False


def test_rows_per_batch_has_one_default_for_the_server_agent_and_worker() -> None:
    agent = RuntimeSettings.from_env(AGENT, {})
    worker = RuntimeSettings.from_env(WORKER, {})
    assert agent.batch_rows == worker.batch_rows == Settings().batch_rows == 100_000


def test_an_agent_reads_the_shared_name_and_its_old_name_first() -> None:
    shared = {"SETU_BATCH_ROWS": "300", "SETU_RESUMABLE_LOAD_MIN_BYTES": "4096"}
    old = {"SETU_AGENT_BATCH_ROWS": "200", "SETU_AGENT_RESUMABLE_LOAD_MIN_BYTES": "2048"}
    from_shared = RuntimeSettings.from_env(AGENT, shared)
    assert (from_shared.batch_rows, from_shared.resumable_load_min_bytes) == (300, 4096)
    from_old = RuntimeSettings.from_env(AGENT, old)
    assert (from_old.batch_rows, from_old.resumable_load_min_bytes) == (200, 2048)
    assert RuntimeSettings.from_env(AGENT, shared | old).batch_rows == 200
    # The old names were the agent's: a worker never read them.
    assert RuntimeSettings.from_env(WORKER, old).batch_rows == 100_000


def test_a_flag_wins_over_the_environment() -> None:
    env = {"SETU_AGENT_BATCH_ROWS": "200", "SETU_WORKER_CONCURRENCY": "3"}
    agent = RuntimeSettings.parser(AGENT, "setu-agent", None, env)
    assert agent.parse_args([]).batch_rows == 200
    assert agent.parse_args(["--batch-rows", "9"]).batch_rows == 9
    worker = RuntimeSettings.parser(WORKER, "setu-worker", None, env)
    parsed = RuntimeSettings.from_args(worker.parse_args(["--log-format", "text"]))
    assert (parsed.concurrency, parsed.log_format) == (3, "text")


def test_a_text_set_empty_stays_empty_and_a_blank_number_keeps_its_default() -> None:
    env = {
        "SETU_LOCAL_FILES_ROOT": "",
        "SETU_WORKER_CONCURRENCY": " ",
        "SETU_WORKER_SUPERVISED": "",
    }
    read = RuntimeSettings.from_env(WORKER, env)
    assert (read.local_files_root, read.concurrency, read.exit_with_stdin) == ("", 4, False)
