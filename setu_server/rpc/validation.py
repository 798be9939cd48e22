"""Request validation driven by the `(setu.v1.rules)` field options.

The rules live in the protos, so the contract is readable there and through
reflection; this walks a request once before its handler runs and answers
INVALID_ARGUMENT naming the first bad field.
"""

from __future__ import annotations

import uuid
from functools import cache

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from setu_client._proto.setu.v1 import options_pb2
from setu_client.errors import InvalidArgument

_Rule = tuple[FieldDescriptor, options_pb2.FieldRules | None]


@cache
def _rules_of(descriptor: Descriptor) -> tuple[_Rule, ...]:
    found: list[_Rule] = []
    for field in descriptor.fields:
        options = field.GetOptions()
        rules = (
            options.Extensions[options_pb2.rules]
            if options.HasExtension(options_pb2.rules)
            else None
        )
        if rules is not None or _setu_message(field):
            found.append((field, rules))
    return tuple(found)


def _setu_message(field: FieldDescriptor) -> Descriptor | None:
    """The field's message type, when it is one of ours (worth descending into)."""
    if field.type != FieldDescriptor.TYPE_MESSAGE or field.message_type is None:
        return None
    return field.message_type if field.message_type.full_name.startswith("setu.") else None


def validate(message: Message, path: str = "") -> None:
    """Raise InvalidArgument for the first field that breaks its rules."""
    for field, rules in _rules_of(message.DESCRIPTOR):
        name = f"{path}{field.name}"
        repeated = field.is_repeated
        value = getattr(message, field.name)
        if rules is not None:
            _check(name, field, rules, value, message, repeated)
        message_type = _setu_message(field)
        if message_type is not None:
            if repeated and not message_type.GetOptions().map_entry:
                for i, item in enumerate(value):
                    validate(item, f"{name}[{i}].")
            elif not repeated and message.HasField(field.name):
                validate(value, f"{name}.")


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
