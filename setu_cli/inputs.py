"""What a command reads: documents from a file, and objects named by name or id."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import setu_client as sdk
from setu_cli.options import lazy_module

if TYPE_CHECKING:
    from setu_cli import session as cli_session
    from setu_client import SetuClient
    from setu_client.messages import Connection, Pipeline
else:
    # Imported when a command runs, not to build the parser.
    cli_session = lazy_module("setu_cli.session")

T = TypeVar("T")


# ---------------------------------------------------------------- input


def read_documents(source: str) -> list[dict[str, Any]]:
    """The objects in a YAML or JSON file (by extension, else by content;
    "-" is stdin): one object or a list of them."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        raise cli_session.CliError(f"{source}: {exc.strerror or exc}") from exc
    import yaml  # here, not at the top: `setu run --wait` never reads YAML

    suffix = "" if source == "-" else Path(source).suffix.lower()
    is_json = suffix == ".json" or (suffix not in (".yaml", ".yml") and text.lstrip()[:1] in "{[")
    try:
        loaded = json.loads(text) if is_json else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        what = "JSON" if is_json else "YAML"
        raise cli_session.CliError(f"{source}: not valid {what}: {exc}") from exc
    items = loaded if isinstance(loaded, list) else [loaded]
    if not items or not all(isinstance(i, dict) for i in items):
        raise cli_session.CliError(f"{source}: expected an object or a list of objects")
    return items


def check_fields(
    item: dict[str, Any], what: str, required: Sequence[str], optional: Sequence[str]
) -> None:
    unknown = sorted(set(item) - set(required) - set(optional))
    if unknown:
        raise cli_session.CliError(
            f"{what}: unknown field(s) {', '.join(unknown)}; "
            f"it takes {', '.join([*required, *optional])}"
        )
    missing = [k for k in required if not item.get(k)]
    if missing:
        raise cli_session.CliError(f"{what}: missing {', '.join(missing)}")


# ---------------------------------------------------------------- names


def is_uuid(text: str) -> bool:
    """`text` spells a UUID (an object named by its id, not its name)."""
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


async def _by_name_or_id(
    ref: str, kind: str, get: Callable[[str], Awaitable[T]], every: AsyncIterator[Any]
) -> T:
    if is_uuid(ref):
        return await get(ref)
    async for found in every:
        if found.name == ref:
            return found  # type: ignore[no-any-return]
    raise sdk.NotFound(f"no {kind} named {ref!r}")


async def connection_ref(client: SetuClient, ref: str) -> Connection:
    return await _by_name_or_id(ref, "connection", client.get_connection, client.list_connections())


async def pipeline_ref(client: SetuClient, ref: str) -> Pipeline:
    return await _by_name_or_id(ref, "pipeline", client.get_pipeline, client.list_pipelines())


async def connection_names(client: SetuClient) -> dict[str, str]:
    return {c.id: c.name async for c in client.list_connections()}
