"""The secrets file: its format, a reader that notices edits, and a writer.

    {"NAME": "value", "workspaces": {"<workspace id>": {"NAME": "value"}}}

A runtime reads the file through `SecretsFile`, which re-reads it when it
changes, so a secret added while the runtime runs serves its next task: no
restart, no signal. `set_secret` is how a person adds one (`setu dev secret
set NAME`): an atomic replace of a 0600 file, which a reader can never see
half-written.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from setu_engine.errors import InvalidSecretsFile

# The logger its lines carried before the engine left setu_agent (unchanged by the move).
log = logging.getLogger("setu_agent.engine.secrets_file")

_SHAPE = 'NAME -> string, with optional "workspaces": {"<workspace id>": {NAME -> string}}'


@dataclass(frozen=True)
class SecretsContent:
    """What a secrets file holds: the top-level (operator's) names and each
    workspace's section."""

    top: Mapping[str, str] = field(default_factory=dict)
    workspaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidSecretsFile(f"cannot read secrets file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidSecretsFile(f"secrets file {path} must be a JSON object of {_SHAPE}")
    return data


def parse(path: Path) -> SecretsContent:
    data = _load(path)
    sections = data.pop("workspaces", {})
    parts = [data, *sections.values()] if isinstance(sections, dict) else [None]
    if not all(
        isinstance(part, dict) and all(isinstance(v, str) for v in part.values()) for part in parts
    ):
        raise InvalidSecretsFile(f"secrets file {path} must map {_SHAPE}")
    return SecretsContent(data, {ws: dict(names) for ws, names in sections.items()})


def _signature(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class SecretsFile:
    """A secrets file, re-read when it changes.

    Each read costs one stat: the file is parsed again only when its inode,
    size or times differ from the last read's. A file that becomes unreadable
    or invalid keeps the last good content and logs one error (per version of
    the file), so a typo while editing never takes every secret away.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature = _signature(path)
        self._content = parse(path)  # invalid at start: the caller refuses to start

    def content(self) -> SecretsContent:
        signature = _signature(self.path)
        if signature != self._signature:
            # Recorded before parsing: a bad version is reported once, and a
            # write racing this read changes the signature again.
            self._signature = signature
            try:
                self._content = parse(self.path)
            except InvalidSecretsFile as exc:
                log.error(
                    "secrets file is invalid; keeping its last good content",
                    extra={"path": str(self.path), "error": str(exc)},
                )
            else:
                log.info("secrets file reloaded", extra={"path": str(self.path)})
        return self._content


def _replace(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Reads the file (an absent one is empty), applies `change`, and swaps
    the result in atomically as a 0600 file."""
    data = _load(path) if path.exists() else {}
    change(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(data, indent=2) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _section(data: dict[str, Any], workspace: str, path: Path) -> dict[str, Any]:
    sections = data.setdefault("workspaces", {})
    section = sections.setdefault(workspace, {}) if isinstance(sections, dict) else None
    if not isinstance(section, dict):
        raise InvalidSecretsFile(f"secrets file {path} must map {_SHAPE}")
    return section


def ensure_file(path: Path) -> None:
    """Creates the file (0600, no secret yet) when it is missing."""

    def shape(data: dict[str, Any]) -> None:
        data.setdefault("workspaces", {})

    if not path.exists():
        _replace(path, shape)


def ensure_section(path: Path, workspace: str) -> None:
    """Adds the workspace's empty section when it is missing, so a person
    editing the file by hand sees where its secrets go."""

    def add(data: dict[str, Any]) -> None:
        _section(data, workspace, path)

    if workspace not in parse(path).workspaces:
        _replace(path, add)


def set_secret(path: Path, workspace: str, name: str, value: str) -> None:
    """Sets NAME in the workspace's section, keeping everything else."""

    def put(data: dict[str, Any]) -> None:
        _section(data, workspace, path)[name] = value

    _replace(path, put)
