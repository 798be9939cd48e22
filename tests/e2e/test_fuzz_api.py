"""Property-based fuzzing of the whole API against a real server: whatever a
caller sends, no call answers INTERNAL or UNKNOWN and the server logs no
error.

Requests are generated from the proto descriptors (every field of every
request message of every RPC of every service the server registers):
strings with NUL, odd unicode and huge lengths; integers at their type's
bounds and around their rules'; nested and repeated messages; Structs with
NaN, infinity, deep nesting, spec- and config-shaped documents with
hostile filters; timestamps out of range; and raw bytes, random or a valid
message with bytes spliced in, sent as they are. Ids are often those of real
objects, so calls get past validation into the handlers.

Hypothesis runs derandomized (the same examples every run) with no example
database. `scripts/fuzz_api.py` runs the same fuzzer with more examples.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
import hypothesis
from google.protobuf import descriptor_pool, field_mask_pb2, message_factory, struct_pb2
from google.protobuf import timestamp_pb2 as ts_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from setu_client._proto.setu.v1 import (
    agents_pb2,
    connections_pb2,
    jobs_pb2,
    options_pb2,
    pipelines_pb2,
)
from setu_engine.operators.chain import OPS
from setu_server.server import SERVICE_NAMES
from tests.e2e import test_rpc_validation
from tests.e2e.test_rpc_validation import Api, ServerLog
from tests.factories import make_connection, make_job, make_pipeline, make_task, make_tenant
from tests.servers import in_process

# Per RPC, in `make test`: a few thousand messages over the whole API.
EXAMPLES = 45
RAW_EXAMPLES = 15
# Long-polls and calls that wait on a runtime are cut short by the client;
# DEADLINE_EXCEEDED is an acceptable answer.
SLOW_METHODS = frozenset({"WatchJob", "TestConnection", "DiscoverStreams", "PreviewStream"})
# They get half the examples: each may take the whole timeout.
SLOW_TIMEOUT = 0.3
TIMEOUT = 10.0
# Statuses that mean the server did not understand what happened.
BAD = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})


@dataclass
class Known:
    """Real objects' ids and tokens, so generated calls reach the handlers."""

    ids: dict[str, list[str]] = field(default_factory=dict)  # by kind: job, connection, ...
    # By request message (a token is bound to its query).
    page_tokens: dict[str, list[str]] = field(default_factory=dict)

    def ids_for(self, field: FieldDescriptor) -> list[str]:
        """Ids of the kind a field names (`source_connection_id`: connections)."""
        name = field.name.removesuffix("_id")
        for kind, ids in self.ids.items():
            if name.endswith(kind):
                return ids
        return [i for ids in self.ids.values() for i in ids]


# -- strategies from descriptors ------------------------------------------------------

NASTY_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "é",
    "\U0001f600",
    "\u202e",
    "\ufeff",
    "' OR 1=1 --",
    "../../../../etc/passwd",
    "%s%n%x",
    "${jndi:x}",
    "x" * 5000,
    "\x00" * 100,
]

FILTER_ATTACKS = [
    "(" * 3000 + "a" + ")" * 3000,
    "not " * 3000 + "a",
    "- " * 3000 + "a = 1",
    " or ".join(["a = 1"] * 3000),
    "a = " + "9" * 5000,
    "a = 1e999999999",
    "a in (" + ",".join(["1"] * 3000) + ")",
    "1 / 0 = 1",
    "a = 'x\x00'",
    '"\x00" = 1',
]
FILTER_WORDS = ["a", "b", "1", "'s'", "(", ")", "and", "or", "not", "=", "<", "+", "-", "in", ","]


# Plausible values, so that a third of the strings get a call past validation.
BENIGN_TEXT = ["alpha", "users", "public.users", "sqlite", "postgres", "file", "id", "x.db", "a"]


def text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(BENIGN_TEXT),
        st.sampled_from(NASTY_TEXT),
        st.text(st.characters(exclude_categories=("Cs",)), max_size=30),
    )


def filters() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(FILTER_ATTACKS),
        st.lists(st.sampled_from(FILTER_WORDS), max_size=12).map(" ".join),
        text(),
    )


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1.0}
    for _ in range(levels):
        value = {"a": value}
    return value


def json_values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([math.nan, math.inf, -math.inf]),
        st.sampled_from([2.0**53, 2.0**63, -(2.0**63), 1e308, 5e-324, -0.0]),
        text(),
    )
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text(), inner, max_size=4),
        max_leaves=12,
    )


def documents(field_name: str = "") -> st.SearchStrategy[dict[str, Any]]:
    """What a Struct holds: anything JSON-ish, very deep, or shaped like a
    pipeline spec or a connection config (mostly, in fields of that name)."""
    any_operator = st.fixed_dictionaries(
        {"op": st.sampled_from([*OPS, "bogus"])},
        optional={
            "where": filters(),
            "columns": st.one_of(
                st.lists(text(), max_size=3), st.dictionaries(text(), text(), max_size=3)
            ),
            "column": text(),
            "value": json_values(),
            "type": st.sampled_from(["text", "bigint", "numeric", "double", "nope", ""]),
            "keep": st.sampled_from([-1.0, 0.0, 4.0, 1e300, math.nan]),
            "char": text(),
            "streams": st.lists(text(), max_size=2),
        },
    )
    # Well-formed but for the filter, so the filter reaches the parser.
    filter_operator = st.fixed_dictionaries({"op": st.just("filter"), "where": filters()})
    operator = st.one_of(filter_operator, any_operator)
    spec = st.fixed_dictionaries({"operators": st.lists(operator, max_size=3)})
    config = st.fixed_dictionaries(
        {"port": st.sampled_from([5432.0, -1.0, 65536.0, 1e20, math.inf, -math.inf, math.nan])},
        optional={
            "path": st.one_of(st.just("fuzz.db"), text()),
            "host": st.sampled_from(["127.0.0.1", "0", "::1", "169.254.169.254", "localhost"]),
            "database": text(),
            "user": text(),
            "password": st.fixed_dictionaries({"$secret": text()}),
            "schema": text(),
        },
    )
    anything = st.one_of(
        st.dictionaries(text(), json_values(), max_size=5),
        st.integers(1, 45).map(_nested),
        spec,
        config,
    )
    shaped = {"spec": spec, "config": config}.get(field_name)
    if shaped is None:
        return anything
    return st.integers(0, 3).flatmap(lambda i: shaped if i else anything)  # 3 in 4 shaped


def _struct(document: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(document)
    return struct


_INT_BOUNDS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _rules(field: FieldDescriptor) -> options_pb2.FieldRules | None:
    options = field.GetOptions()
    if not options.HasExtension(options_pb2.rules):
        return None
    return options.Extensions[options_pb2.rules]


def integers(field: FieldDescriptor, tame: bool) -> st.SearchStrategy[int]:
    low, high = _INT_BOUNDS[field.type]
    rules = _rules(field)
    if tame:
        low = rules.min if rules is not None and rules.HasField("min") else max(low, 0)
        high = rules.max if rules is not None and rules.HasField("max") else min(high, 1000)
        return st.integers(low, high)
    edges = {low, high, 0, 1, -1, 30, 3600}
    for name in ("min", "max"):
        if rules is not None and rules.HasField(name):
            bound = getattr(rules, name)
            edges |= {bound - 1, bound, bound + 1}
    in_range = sorted(e for e in edges if low <= e <= high)
    return st.one_of(st.sampled_from(in_range), st.integers(low, high))


def timestamps(tame: bool) -> st.SearchStrategy[ts_pb2.Timestamp]:
    if tame:
        return st.builds(ts_pb2.Timestamp, seconds=st.integers(0, 4_000_000_000))
    seconds = st.one_of(
        st.sampled_from([0, -62_135_596_801, 253_402_300_800, 2**62, -(2**63), 2**63 - 1]),
        st.integers(-(2**63), 2**63 - 1),
    )
    nanos = st.sampled_from([0, -1, 999_999_999, 10**9, -(2**31), 2**31 - 1])
    return st.builds(ts_pb2.Timestamp, seconds=seconds, nanos=nanos)


def page_tokens(field: FieldDescriptor, known: Known) -> st.SearchStrategy[str]:
    """Real page tokens for this request, and the same with the position
    edited (its query fingerprint kept, its signature too if it has one)."""
    real = known.page_tokens.get(field.containing_type.full_name, [])
    if not real:
        return text()

    def edit(parts: tuple[str, dict[str, Any]]) -> str:
        token, position = parts
        body, dot, signature = token.partition(".")
        document = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        document["p"] = position
        edited = base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")
        return edited + dot + signature

    keys = st.sampled_from(["name", "id", "created_at", "sequence", "x"])
    positions = st.dictionaries(keys, json_values(), max_size=3)
    return st.one_of(st.sampled_from(real), st.tuples(st.sampled_from(real), positions).map(edit))


def _is_id(field: FieldDescriptor) -> bool:
    return field.name.endswith("_id") or field.name in ("lease_token", "id")


def scalars(field: FieldDescriptor, known: Known, tame: bool = False) -> st.SearchStrategy[Any]:
    kind = field.type
    if tame and kind == FieldDescriptor.TYPE_STRING:
        if _is_id(field):
            return st.sampled_from(known.ids_for(field) or ["x"])
        if field.name == "page_token":
            return st.one_of(st.just(""), page_tokens(field, known))
        if field.name == "where":
            return filters()
        if field.name == "provider":
            return st.sampled_from(["sqlite", "postgres", "file"])
        return st.sampled_from(BENIGN_TEXT)
    if tame and kind == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    if kind == FieldDescriptor.TYPE_STRING:
        if _is_id(field) and known.ids_for(field):
            return st.one_of(st.sampled_from(known.ids_for(field)), st.uuids().map(str), text())
        if field.name == "page_token":
            return st.one_of(page_tokens(field, known), text())
        if field.name == "where":
            return filters()
        return text()
    if kind in _INT_BOUNDS:
        return integers(field, tame)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.sampled_from([*numbers, -1, 999, 2**31 - 1])
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.floats(allow_nan=True, allow_infinity=True)
    if kind == FieldDescriptor.TYPE_FLOAT:
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    raise AssertionError(f"no strategy for {field.full_name}")


def requests(descriptor: Descriptor, known: Known) -> st.SearchStrategy[Message]:
    """A request: hostile all over; plausible all over (ids of real objects,
    values within the rules; Structs keep their hostile contents); or
    plausible but for one hostile field, the shape that finds the field a
    handler trusts."""
    fields = [f.name for f in descriptor.fields]
    wild = st.one_of(messages(descriptor, known), messages(descriptor, known, tame=True))
    if not fields:
        return wild

    def one_wild(name: str) -> st.SearchStrategy[Message]:
        hostile = _field_values(descriptor.fields_by_name[name], known, 0, tame=False)
        return st.tuples(messages(descriptor, known, tame=True), hostile).map(
            lambda pair: _overridden(pair[0], name, pair[1])
        )

    return st.one_of(wild, st.sampled_from(fields).flatmap(one_wild))


def _overridden(message: Message, name: str, value: Any) -> Message:
    message.ClearField(name)
    _assign(message, message.DESCRIPTOR.fields_by_name[name], value)
    return message


def _assign(message: Message, target: FieldDescriptor, value: Any) -> None:
    name = target.name
    if target.message_type is not None and target.message_type.GetOptions().map_entry:
        entries = getattr(message, name)
        for key, item in value.items():
            if isinstance(item, Message):
                entries[key].CopyFrom(item)
            else:
                entries[key] = item
    elif target.is_repeated and target.message_type is not None:
        for item in value:
            getattr(message, name).add().CopyFrom(item)
    elif target.is_repeated:
        getattr(message, name).extend(value)
    elif target.message_type is not None:
        getattr(message, name).CopyFrom(value)
    else:
        setattr(message, name, value)


def messages(
    descriptor: Descriptor, known: Known, depth: int = 0, tame: bool = False
) -> st.SearchStrategy[Message]:
    """Messages of a type: fields required by their rules always set, the
    others sometimes; values hostile, or plausible when `tame`."""
    cls = message_factory.GetMessageClass(descriptor)
    if descriptor.full_name == "google.protobuf.Struct":
        return documents().map(_struct)
    if descriptor.full_name == "google.protobuf.Timestamp":
        return timestamps(tame)
    if descriptor.full_name == "google.protobuf.FieldMask":
        return st.lists(text(), max_size=3).map(lambda paths: field_mask_pb2.FieldMask(paths=paths))
    if depth > 3:
        return st.just(cls())
    required = {
        f.name: _field_values(f, known, depth, tame) for f in descriptor.fields if _required(f)
    }
    optional = {
        f.name: _field_values(f, known, depth, tame) for f in descriptor.fields if not _required(f)
    }

    def build(chosen: dict[str, Any]) -> Message:
        message = cls()
        for name, value in chosen.items():
            _assign(message, descriptor.fields_by_name[name], value)
        return message

    return st.fixed_dictionaries(required, optional=optional).map(build)


def _maskable(request: Descriptor) -> list[str]:
    """Field names an update mask of this request may name: those of the
    message it updates."""
    return [
        f.name
        for sibling in request.fields
        if sibling.message_type is not None and sibling.message_type.full_name.startswith("setu.")
        for f in sibling.message_type.fields
    ] or ["name"]


def _required(field: FieldDescriptor) -> bool:
    """Required by the field's rules: always generated (perhaps invalid)."""
    rules = _rules(field)
    return rules is not None and rules.required


def _field_values(
    field: FieldDescriptor, known: Known, depth: int, tame: bool = False
) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key = field.message_type.fields_by_name["key"]
        value = field.message_type.fields_by_name["value"]
        if value.message_type is not None:
            item = messages(value.message_type, known, depth + 1, tame)
        else:
            item = scalars(value, known, tame)
        return st.dictionaries(scalars(key, known, tame), item, max_size=3)
    if field.message_type is not None and field.message_type.full_name == "google.protobuf.Struct":
        one = documents(field.name).map(_struct)
    elif tame and field.message_type is not None and field.message_type.name == "FieldMask":
        one = st.lists(st.sampled_from(_maskable(field.containing_type)), max_size=3).map(
            lambda paths: field_mask_pb2.FieldMask(paths=paths)
        )
    elif field.message_type is not None:
        one = messages(field.message_type, known, depth + 1, tame)
    else:
        one = scalars(field, known, tame)
    if field.is_repeated:
        return st.lists(one, max_size=3)
    return one


def raw_requests(descriptor: Descriptor, known: Known) -> st.SearchStrategy[bytes]:
    """Bytes for a whole request: random, or a valid message cut open and
    bytes spliced in."""

    def splice(parts: tuple[bytes, bytes, int]) -> bytes:
        body, junk, at = parts
        at = at % (len(body) + 1)
        return body[:at] + junk + body[at:]

    valid = messages(descriptor, known).map(lambda m: m.SerializeToString())
    return st.one_of(
        st.binary(max_size=200),
        st.tuples(valid, st.binary(min_size=1, max_size=8), st.integers(0, 10_000)).map(splice),
    )


# -- the run -------------------------------------------------------------------------


@dataclass
class Tally:
    """What came back, per RPC and status, and what should not have."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    method_seconds: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def all_methods() -> Iterator[MethodDescriptor]:
    """Every RPC of every service the server registers; AdminService last,
    as it may deactivate the agent whose token the agent calls use."""
    pool = descriptor_pool.Default()
    services = sorted(SERVICE_NAMES, key=lambda name: name.endswith("AdminService"))
    for name in services:
        yield from pool.FindServiceByName(name).methods


def _settings(examples: int, seed: int | None) -> Callable[[Any], Any]:
    configured = settings(
        max_examples=examples,
        deadline=None,
        derandomize=seed is None,
        database=None,
        phases=[Phase.generate],  # failures are tallied, not raised: nothing to shrink
        suppress_health_check=list(HealthCheck),
    )
    if seed is None:
        return configured
    return lambda test: hypothesis.seed(seed)(configured(test))


async def fuzz(
    api: Api,
    known: Known,
    *,
    examples: int = EXAMPLES,
    raw_examples: int = RAW_EXAMPLES,
    methods: Sequence[MethodDescriptor] | None = None,
    seed: int | None = None,
) -> Tally:
    """Generated messages, then raw bytes, over every RPC. Hypothesis runs in a
    thread; each call runs on this loop, where the server serves. No seed:
    derandomized, the same examples every run."""
    loop = asyncio.get_running_loop()
    tally = Tally()
    started = time.monotonic()

    def send(method: MethodDescriptor, request: Message | bytes) -> None:
        timeout = SLOW_TIMEOUT if method.name in SLOW_METHODS else TIMEOUT
        code, details = asyncio.run_coroutine_threadsafe(
            api.call(method, request, timeout), loop
        ).result()
        tally.counts[(method.full_name, code.name)] += 1
        if code in BAD:
            shown = request if isinstance(request, bytes) else str(request)[:300]
            tally.failures.append(f"{method.full_name}: {code.name} {details!r} for {shown!r}")

    def run(method: MethodDescriptor) -> None:
        slow = method.name in SLOW_METHODS
        run_examples: Callable[[], None] = _settings(examples // 2 if slow else examples, seed)(
            given(requests(method.input_type, known))(lambda m: send(method, m))
        )
        run_examples()
        run_raw: Callable[[], None] = _settings(raw_examples, seed)(
            given(raw_requests(method.input_type, known))(lambda raw: send(method, raw))
        )
        run_raw()

    for method in methods or list(all_methods()):
        method_started = time.monotonic()
        await asyncio.to_thread(run, method)
        tally.method_seconds[method.full_name] = time.monotonic() - method_started
    tally.seconds = time.monotonic() - started
    return tally


async def known_objects(api: Api, pool: asyncpg.Pool) -> Known:
    """A workspace with some of everything: connections (cloud and on the
    agent), pipelines, jobs, a task leased by the agent, page tokens."""
    tenant = api.tenant
    workspace = tenant.workspace_id
    cloud = await make_connection(pool, workspace, config={"path": "fuzz.db"})
    edge = await make_connection(pool, workspace, agent_id=tenant.agent_id)
    pipeline = await make_pipeline(pool, workspace, source=cloud, destination=edge)
    await make_pipeline(pool, workspace)
    job = await make_job(pool, workspace)
    await make_job(pool, workspace)
    task = await make_task(pool, tenant)
    lease = _method("LeaseTask")
    leased = await api.call_for(lease, agents_pb2.LeaseTaskRequest(wait_seconds=0))
    ids = {
        "workspace": [str(workspace)],
        "agent": [str(tenant.agent_id)],
        "connection": [str(cloud.id), str(edge.id)],
        "pipeline": [str(pipeline.id)],
        "job": [str(job.id), str(task.job_id)],
        "task": [str(task.id)],
        "lease_token": [],
    }
    if leased.HasField("task"):
        ids["task"].append(leased.task.id)
        ids["lease_token"].append(leased.task.lease_token)
    tokens: dict[str, list[str]] = {}
    for name, request in (
        ("ListJobs", jobs_pb2.ListJobsRequest(page_size=1)),
        ("ListConnections", connections_pb2.ListConnectionsRequest(page_size=1)),
        ("ListPipelines", pipelines_pb2.ListPipelinesRequest(page_size=1)),
    ):
        answer = await api.call_for(_method(name), request)
        assert answer.next_page_token, name
        tokens[request.DESCRIPTOR.full_name] = [answer.next_page_token]
    return Known(ids=ids, page_tokens=tokens)


def report(tally: Tally) -> str:
    """A table: per RPC, how many calls and what each status counted."""
    by_method: dict[str, Counter[str]] = {}
    for (method, code), n in sorted(tally.counts.items()):
        by_method.setdefault(method, Counter())[code] = n
    lines = [f"{'rpc':<46} {'calls':>6} {'seconds':>7}  statuses"]
    for method, codes in by_method.items():
        shown = ", ".join(f"{code} {n}" for code, n in codes.most_common())
        name = method.removeprefix("setu.v1.")
        took = tally.method_seconds[method]
        lines.append(f"{name:<46} {sum(codes.values()):>6} {took:>7.1f}  {shown}")
    overall = Counter[str]()
    for (_, code), n in tally.counts.items():
        overall[code] += n
    statuses = ", ".join(f"{code} {n}" for code, n in overall.most_common())
    lines.append(f"{len(by_method)} RPCs, {tally.total} calls in {tally.seconds:.1f} s: {statuses}")
    return "\n".join(lines)


def _method(name: str) -> MethodDescriptor:
    return next(m for m in all_methods() if m.name == name)


server_log = test_rpc_validation.server_log  # the fixture, shared

# Short long-polls: a parked WaitJob or LeaseTask answers at once.
FUZZ_SERVER = {"wait_cap_seconds": 0.05, "lease_wait_cap_seconds": 0.05}


async def test_no_input_answers_internal_or_logs_an_error(
    database_url: str, pool: asyncpg.Pool, tmp_path: Any, server_log: ServerLog
) -> None:
    tenant = await make_tenant(pool)
    async with in_process(
        database_url, data_dir=tmp_path, local_files_root=str(tmp_path), **FUZZ_SERVER
    ) as server:
        api = Api(server, tenant)
        try:
            known = await known_objects(api, pool)
            tally = await fuzz(api, known)
        finally:
            await api.close()
    print(report(tally))
    methods = {m.full_name for m in all_methods()}
    assert {name for name, _ in tally.counts} == methods
    assert tally.total >= len(methods) * (EXAMPLES + RAW_EXAMPLES) * 0.7
    assert not tally.failures, "\n".join(tally.failures[:20])
    assert not server_log.errors(), "\n".join(server_log.errors()[:20])
