"""CloudRunService's messages (cloud.proto), both directions: the spec of a
`migrate` task and the phases of its run. The pieces it shares with the agent
edge (connections, blob settings, artifacts, stored parts, row changes,
cursors) are in setu_tasks/codec/common.py."""

from __future__ import annotations

from setu_client import struct_to_dict
from setu_client._proto.setu.v1 import cloud_pb2, common_pb2
from setu_tasks.codec.common import (
    WRITE_MODE_NUMBERS,
    WRITE_MODES,
    blob_message,
    blob_of,
    connection_message,
    connection_of,
    stored_part_message,
    stored_part_of,
)
from setu_tasks.specs import MigrateSpec

# A run's phase on the wire, and back (unset: a fresh run).
PHASES = {
    common_pb2.PHASE_UNSPECIFIED: None,
    common_pb2.PHASE_EXTRACT: "extract",
    common_pb2.PHASE_LOAD: "load",
    common_pb2.PHASE_DIRECT: "direct",
}
PHASE_MESSAGES = {name: number for number, name in PHASES.items() if name}


def migrate_spec_message(spec: MigrateSpec) -> cloud_pb2.MigrateSpec:
    message = cloud_pb2.MigrateSpec(
        job_id=spec.job_id,
        workspace_id=spec.workspace_id,
        pipeline_id=spec.pipeline_id,
        source=connection_message(spec.source),
        destination=connection_message(spec.destination),
        streams=spec.streams,
        write_mode=WRITE_MODE_NUMBERS[spec.write_mode],
        phase=PHASE_MESSAGES[spec.phase] if spec.phase else common_pb2.PHASE_UNSPECIFIED,
        dry_run=spec.dry_run,
        load_on_agent=spec.load_on_agent,
        rows_extracted=spec.rows_extracted,
        blob_prefix=spec.blob_prefix,
        blob=blob_message(spec.blob),
        cancel_requested=spec.cancel_requested,
        ended=spec.ended,
        cursors=spec.cursors,
        stored_parts=[stored_part_message(p) for p in spec.stored_parts],
    )
    message.spec.update(spec.spec)
    return message


def migrate_spec_of(message: cloud_pb2.MigrateSpec) -> MigrateSpec:
    return MigrateSpec(
        job_id=message.job_id,
        workspace_id=message.workspace_id,
        pipeline_id=message.pipeline_id,
        source=connection_of(message.source),
        destination=connection_of(message.destination),
        streams=list(message.streams),
        spec=struct_to_dict(message.spec),  # whole numbers as ints (mask keep: 4)
        write_mode=WRITE_MODES[message.write_mode],
        phase=PHASES.get(message.phase),
        dry_run=message.dry_run,
        load_on_agent=message.load_on_agent,
        rows_extracted=message.rows_extracted,
        blob_prefix=message.blob_prefix,
        blob=blob_of(message.blob),
        cancel_requested=message.cancel_requested,
        ended=message.ended,
        cursors=dict(message.cursors),
        stored_parts=[stored_part_of(p) for p in message.stored_parts],
    )
