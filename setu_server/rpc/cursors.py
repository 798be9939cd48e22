"""StreamCursor messages (common.proto) to and from setu_engine/planning/incremental.py's
CursorMark, checked as a servicer checks any field."""

from __future__ import annotations

from setu_client._proto.setu.v1 import common_pb2
from setu_client.errors import InvalidArgument
from setu_engine.planning.incremental import MARK_TYPES, CursorMark

MAX_TEXT = 1000


def cursor_of(message: common_pb2.StreamCursor, name: str = "cursor") -> CursorMark:
    for field in ("column", "value"):
        text = getattr(message, field)
        if not text or len(text) > MAX_TEXT:
            raise InvalidArgument(f"{name}.{field}: required, at most {MAX_TEXT} characters")
    if message.type not in MARK_TYPES:
        raise InvalidArgument(
            f"{name}.type: one of {', '.join(sorted(MARK_TYPES))}, not {message.type[:60]!r}"
        )
    return CursorMark(message.column, message.type, message.value)


def cursor_message(mark: CursorMark) -> common_pb2.StreamCursor:
    return common_pb2.StreamCursor(column=mark.column, type=mark.type, value=mark.value)
