"""What a runtime is told: the task it leased, and about a stage the
connection (config with secret references unresolved), the streams, where the
staged data lives and, for a load, the write mode and the operator chain
(docs/flows.md). The server builds these; runtimes receive them over gRPC."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from setu_engine.kinds import WriteMode
from setu_engine.staged.blob import BlobSettings
from setu_engine.staged.staging import MANIFEST, StoredPart

# In a `migrate` task's payload: it loads what another runtime's extract
# staged (agent → cloud), so starting at load is its first step, not a resume.
HANDED_LOAD_PAYLOAD = "handed_load"


@dataclass(frozen=True)
class LeasedTask:
    id: str
    job_id: str
    kind: str
    attempt: int
    max_attempts: int
    lease_token: str
    payload: dict[str, Any] = field(default_factory=dict)
    # Free retries for outages so far: above 0, the task is in an outage
    # streak (its database went away and may not be back yet).
    free_retries: int = 0


@dataclass(frozen=True)
class ConnectionSpec:
    connection_id: str
    provider: str
    config: dict[str, Any]

    def to_payload(self) -> dict[str, Any]:
        return {"id": self.connection_id, "provider": self.provider, "config": self.config}

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> ConnectionSpec:
        return cls(str(data["id"]), str(data["provider"]), dict(data.get("config") or {}))


@dataclass(frozen=True)
class ExtractSpec:
    job_id: str
    pipeline_id: str
    source: ConnectionSpec
    streams: list[str]
    blob_prefix: str
    blob: BlobSettings
    # For incremental streams (setu_engine/planning/incremental.py): the pipeline spec, the
    # write mode and each stream's saved cursor (qualified name → value).
    spec: dict[str, Any] = field(default_factory=dict)
    write_mode: WriteMode = WriteMode.APPEND
    cursors: dict[str, str] = field(default_factory=dict)
    # Parts an earlier attempt stored, as the run's books hold them.
    stored_parts: list[StoredPart] = field(default_factory=list)


@dataclass(frozen=True)
class LoadSpec:
    job_id: str
    pipeline_id: str
    destination: ConnectionSpec
    write_mode: WriteMode
    spec: dict[str, Any]
    blob_prefix: str
    blob: BlobSettings
    manifest_path: str = MANIFEST
    streams: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MigrateSpec:
    """A run as its migrate task sees it."""

    job_id: str
    workspace_id: str
    pipeline_id: str
    source: ConnectionSpec
    destination: ConnectionSpec
    streams: list[str]
    spec: dict[str, Any]
    write_mode: WriteMode
    # None (fresh), "extract", "load" or "direct".
    phase: str | None
    dry_run: bool
    load_on_agent: bool
    rows_extracted: int
    blob_prefix: str
    blob: BlobSettings
    cancel_requested: bool = False
    ended: bool = False
    # Saved cursor of each incremental stream (qualified name → value).
    cursors: dict[str, str] = field(default_factory=dict)
    # Parts an earlier attempt stored, as the run's books hold them.
    stored_parts: list[StoredPart] = field(default_factory=list)


class SpecSource(Protocol):
    """Where a runtime gets the spec of the extract or load it leased."""

    async def extract_spec(self, task: LeasedTask) -> ExtractSpec: ...

    async def load_spec(self, task: LeasedTask) -> LoadSpec: ...
