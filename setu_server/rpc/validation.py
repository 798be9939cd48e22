"""Request validation: the `(setu.v1.rules)` field options, and the limits
every request obeys whatever its type.

The rules live in the protos, so the contract is readable there and through
reflection; the limits are declared here, once (docs/errors.md lists them).
This walks a request once before its handler runs, every field at every
depth (nested messages, repeated fields, maps, Struct keys and values), and
answers INVALID_ARGUMENT naming the first bad field. Whatever passes can be
stored in PostgreSQL and read back: no NUL character, no NaN, no timestamp
outside years 1..9999.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterator, Mapping
from enum import Enum
from functools import cache
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from setu_client._proto.setu.v1 import options_pb2
from setu_client.errors import InvalidArgument
from setu_engine.filters.expr import MAX_FILTER_DEPTH, MAX_IN_ITEMS, MAX_NUMBER_LENGTH

# -- limits ---------------------------------------------------------------------
# Below the protobuf decoder's own nesting limit (100 messages, about 33 levels
# of a Struct inside a request), so a deep Struct is refused with its field
# named rather than as an undecodable request.
MAX_STRUCT_DEPTH = 20
MAX_STRUCT_VALUES = 10_000  # values at every depth of one Struct, keys included
MAX_REPEATED_ITEMS = 10_000  # items of one repeated or map field

# Every declared limit, by the name docs/errors.md gives it.
LIMITS: Mapping[str, int] = {
    "Struct depth": MAX_STRUCT_DEPTH,
    "Struct values": MAX_STRUCT_VALUES,
    "repeated items": MAX_REPEATED_ITEMS,
    "filter depth": MAX_FILTER_DEPTH,
    "filter list items": MAX_IN_ITEMS,
    "filter number length": MAX_NUMBER_LENGTH,
}

# google.protobuf.Timestamp's own range: 0001-01-01T00:00:00Z to
# 9999-12-31T23:59:59.999999999Z; Python's datetime and PostgreSQL take it all.
MIN_TIMESTAMP_SECONDS = -62_135_596_800
MAX_TIMESTAMP_SECONDS = 253_402_300_799


class _Kind(Enum):
    SCALAR = "scalar"
    STRING = "string"
    STRUCT = "struct"
    TIMESTAMP = "timestamp"
    MAP = "map"
    MESSAGE = "message"


_Field = tuple[FieldDescriptor, options_pb2.FieldRules | None, _Kind]


@cache
def _fields_of(descriptor: Descriptor) -> tuple[_Field, ...]:
    """The fields worth a look: with rules, holding text, repeated, or messages."""
    found: list[_Field] = []
    for field in descriptor.fields:
        options = field.GetOptions()
        rules = (
            options.Extensions[options_pb2.rules]
            if options.HasExtension(options_pb2.rules)
            else None
        )
        kind = _kind(field)
        if rules is not None or kind is not _Kind.SCALAR or field.is_repeated:
            found.append((field, rules, kind))
    return tuple(found)


def _kind(field: FieldDescriptor) -> _Kind:
    if field.type == FieldDescriptor.TYPE_STRING:
        return _Kind.STRING
    if field.type != FieldDescriptor.TYPE_MESSAGE or field.message_type is None:
        return _Kind.SCALAR
    message_type = field.message_type
    if message_type.GetOptions().map_entry:
        return _Kind.MAP
    if message_type.full_name == struct_pb2.Struct.DESCRIPTOR.full_name:
        return _Kind.STRUCT
    if message_type.full_name == timestamp_pb2.Timestamp.DESCRIPTOR.full_name:
        return _Kind.TIMESTAMP
    return _Kind.MESSAGE


def validate(message: Message, path: str = "") -> None:
    """Raise InvalidArgument for the first field that breaks its rules or a limit."""
    for field, rules, kind in _fields_of(message.DESCRIPTOR):
        name = f"{path}{field.name}"
        value = getattr(message, field.name)
        repeated = field.is_repeated
        if rules is not None:
            _check(name, field, rules, value, message, repeated)
        if repeated and len(value) > MAX_REPEATED_ITEMS:
            raise InvalidArgument(f"{name}: at most {MAX_REPEATED_ITEMS} items, got {len(value)}")
        if kind is _Kind.SCALAR:
            continue
        if kind is _Kind.MAP:
            _check_map(name, field, value)
        elif repeated:
            for i, item in enumerate(value):
                _check_value(f"{name}[{i}]", kind, item)
        elif kind is _Kind.STRING or message.HasField(field.name):
            _check_value(name, kind, value)


def _check_value(name: str, kind: _Kind, value: Any) -> None:
    if kind is _Kind.STRING:
        _check_text(name, value)
    elif kind is _Kind.STRUCT:
        check_struct(value, name)
    elif kind is _Kind.TIMESTAMP:
        _check_timestamp(name, value)
    elif kind is _Kind.MESSAGE:
        validate(value, f"{name}.")


def _check_map(name: str, field: FieldDescriptor, entries: Any) -> None:
    entry = field.message_type
    assert entry is not None, "a map field's type is its entry message"
    key_field = entry.fields_by_name["key"]
    value_kind = _kind(entry.fields_by_name["value"])
    for key in entries:
        label = f"{name}[{_shorten(str(key))!r}]"
        if key_field.type == FieldDescriptor.TYPE_STRING:
            _check_text(f"{name} key", key)
        if value_kind is not _Kind.SCALAR:
            _check_value(label, value_kind, entries[key])


def _check_text(name: str, value: str) -> None:
    # PostgreSQL's text and jsonb cannot hold U+0000; it would fail at the
    # database as an unexpected error instead of here as a bad request.
    if "\x00" in value:
        raise InvalidArgument(f"{name}: must not contain a NUL character (\\x00)")


def _check_timestamp(name: str, stamp: timestamp_pb2.Timestamp) -> None:
    if not MIN_TIMESTAMP_SECONDS <= stamp.seconds <= MAX_TIMESTAMP_SECONDS:
        raise InvalidArgument(f"{name}: must be within years 1 to 9999")
    if not 0 <= stamp.nanos <= 999_999_999:
        raise InvalidArgument(f"{name}: nanos must be within 0 to 999999999")


def check_struct(struct: struct_pb2.Struct, name: str) -> None:
    """A Struct that JSON (and jsonb) can hold, within the declared limits."""
    for count, (path, depth, value) in enumerate(_struct_items(struct, name), 1):
        if count > MAX_STRUCT_VALUES:
            raise InvalidArgument(f"{name}: at most {MAX_STRUCT_VALUES} values")
        if depth > MAX_STRUCT_DEPTH:
            raise InvalidArgument(f"{name}: nested deeper than {MAX_STRUCT_DEPTH} levels")
        if isinstance(value, str):
            _check_text(path, value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise InvalidArgument(f"{path}: must be a finite number, got {value}")


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_$-]{1,60}")


def _struct_items(struct: struct_pb2.Struct, name: str) -> Iterator[tuple[str, int, object]]:
    """(path, depth, key or scalar) for every key and value, depth first,
    without recursion: the depth is checked before it can hurt."""
    stack: list[tuple[str, int, struct_pb2.Value | struct_pb2.Struct]] = [(name, 1, struct)]
    while stack:
        path, depth, item = stack.pop()
        if isinstance(item, struct_pb2.Struct):
            for key, value in item.fields.items():
                label = f"{path}.{key}" if _PLAIN_KEY.fullmatch(key) else f"{path}[{key[:60]!r}]"
                yield f"{path} key {key[:60]!r}", depth, key
                stack.append((label, depth, value))
            continue
        which = item.WhichOneof("kind")
        if which == "struct_value":
            yield path, depth + 1, None
            stack.append((path, depth + 1, item.struct_value))
        elif which == "list_value":
            yield path, depth + 1, None
            stack.extend(
                (f"{path}[{i}]", depth + 1, v) for i, v in enumerate(item.list_value.values)
            )
        elif which == "string_value":
            yield path, depth, item.string_value
        elif which == "number_value":
            yield path, depth, item.number_value
        else:
            yield path, depth, None


def _check(
    name: str,
    field: FieldDescriptor,
    rules: options_pb2.FieldRules,
    value: object,
    message: Message,
    repeated: bool,
) -> None:
    if rules.required and not _is_set(field, value, message, repeated):
        raise InvalidArgument(f"{name}: required")
    if isinstance(value, str) and value:
        if rules.uuid and not _is_uuid(value):
            raise InvalidArgument(f"{name}: must be a UUID, got {_shorten(value)!r}")
        if rules.max_length and len(value) > rules.max_length:
            raise InvalidArgument(f"{name}: at most {rules.max_length} characters")
    if isinstance(value, int) and not isinstance(value, bool):
        if field.has_presence and not message.HasField(field.name):
            return  # an `optional` number left out: its default applies, unchecked
        if rules.HasField("min") and value < rules.min:
            raise InvalidArgument(f"{name}: must be at least {rules.min}, got {value}")
        if rules.HasField("max") and value > rules.max:
            raise InvalidArgument(f"{name}: must be at most {rules.max}, got {value}")


def _is_set(field: FieldDescriptor, value: object, message: Message, repeated: bool) -> bool:
    if repeated:
        return len(value) > 0  # type: ignore[arg-type]
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message.HasField(field.name)
    if isinstance(value, str):
        return bool(value.strip())
    return bool(value)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    # uuid.UUID also takes braces and URNs; ids on the wire are the plain form.
    return len(value) == 36


def _shorten(value: str, limit: int = 60) -> str:
    return value if len(value) <= limit else value[:limit] + "…"
