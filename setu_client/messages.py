"""The wire messages the SDK returns for connections and pipelines.

Jobs come back as the SDK's own values (`setu_client.Job` and friends);
connections and pipelines come back as these generated messages. Import them
from here: `setu_client._proto` is generated code whose layout may change.
Struct fields (`Connection.config`, `Pipeline.spec`) carry numbers as
doubles; `setu_client.struct_to_dict` turns them into plain values with
whole numbers as ints.
"""

from setu_client._proto.setu.v1.common_pb2 import CatalogStream, Column, StreamCursor
from setu_client._proto.setu.v1.connections_pb2 import (
    Connection,
    DiscoverStreamsResponse,
    PreviewStreamResponse,
    TestConnectionResponse,
)
from setu_client._proto.setu.v1.pipelines_pb2 import Pipeline, PipelineState, StreamState

__all__ = [
    "CatalogStream",
    "Column",
    "Connection",
    "DiscoverStreamsResponse",
    "Pipeline",
    "PipelineState",
    "PreviewStreamResponse",
    "StreamCursor",
    "StreamState",
    "TestConnectionResponse",
]
