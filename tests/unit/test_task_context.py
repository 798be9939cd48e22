"""What a runtime reports about a task: never a secret the task resolved;
preview values as JSON."""

from __future__ import annotations

import base64
import json
import math
from decimal import Decimal
from urllib.parse import quote, quote_plus

import pytest

from setu_agent.handlers import jsonable
from setu_agent.runtime.task import PROGRESS_FIELDS, TaskContext
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_engine.support.secrets import SecretStore
from setu_tasks.specs import LeasedTask


def context() -> TaskContext:
    return TaskContext(LeasedTask("t", "j", "test", 1, 3, "lease"))


def test_resolved_secrets_are_blanked_out_of_messages_and_results() -> None:
    ctx = context()
    store = SecretStore({"HOST": "db.internal.example", "PW": "hunter2!"}, environ={})
    config = store.resolve(
        {"host": {"$secret": "HOST"}, "password": {"$secret": "PW"}, "port": 5432}, ctx.redact
    )
    assert config["host"] == "db.internal.example"
    message = "cannot connect to db.internal.example:5432 with hunter2!"
    assert ctx.redacted(message) == "cannot connect to ***:5432 with ***"


def test_escaped_and_encoded_forms_of_a_secret_are_blanked_too() -> None:
    ctx = context()
    secret = 'p@ss w/"rd"\\é'
    ctx.redact.add(secret)
    quoted = [
        json.dumps({"password": secret}),
        json.dumps({"password": secret}, ensure_ascii=False),
        "postgresql://u:" + quote(secret, safe="") + "@host/db",
        "form: pw=" + quote_plus(secret),
        "basic " + base64.b64encode(secret.encode()).decode(),
        "token " + base64.urlsafe_b64encode(secret.encode()).decode().rstrip("="),
    ]
    for text in quoted:
        assert "***" in ctx.redacted(text), text


def test_very_short_values_are_not_blanked_everywhere() -> None:
    ctx = context()
    ctx.redact.add("on")
    assert ctx.redacted("connection refused") == "connection refused"


def test_preview_values_are_json() -> None:
    assert jsonable(Decimal("1.50")) == "1.50"
    assert jsonable(math.nan) == "NaN"  # the spelling docs/data-types.md gives
    assert jsonable(-math.inf) == "-Infinity"
    assert jsonable(2.5) == 2.5
    assert jsonable(b"\x00\x01") == "AAE="


def test_a_misspelt_progress_field_fails_where_it_is_reported() -> None:
    ctx = context()
    with pytest.raises(TypeError, match="no progress field"):
        ctx.report(rows_reed=10)
    assert ctx.progress == {}
    ctx.report(rows_read=10, stream="items")
    assert ctx.progress == {"rows_read": 10, "stream": "items"}


def test_progress_fields_are_the_heartbeats() -> None:
    assert set(pb.TaskProgress.DESCRIPTOR.fields_by_name) == PROGRESS_FIELDS
