"""Secret references, resolved only by the runtime that executes a stage.

A connection's config may hold `{"$secret": "NAME"}` wherever a value goes.
The server stores and returns the reference; the runtime that runs the stage
replaces it with the value from its own store: a JSON file of NAME -> value
(`--secrets-file`), then the environment variable `SETU_SECRET_<NAME>`. The
prefix keeps a connection from naming any other variable of the process
(the agent's own token, for one).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from setu_agent.engine.providers.base import ConfigError

SECRET_KEY = "$secret"
ENV_PREFIX = "SETU_SECRET_"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {SECRET_KEY}


def check_reference(value: Any, field: str) -> None:
    """Raises ConfigError when a reference is malformed."""
    name = value.get(SECRET_KEY)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f'{field}: a secret reference is {{"$secret": "NAME"}} with NAME made of '
            f"letters, digits and underscores"
        )


def references(config: Any, path: str = "config") -> list[tuple[str, str]]:
    """(field path, secret name) of every reference in a config."""
    found: list[tuple[str, str]] = []
    if is_reference(config):
        check_reference(config, path)
        found.append((path, config[SECRET_KEY]))
    elif isinstance(config, dict):
        for key, value in config.items():
            found.extend(references(value, f"{path}.{key}"))
    elif isinstance(config, list):
        for index, value in enumerate(config):
            found.extend(references(value, f"{path}[{index}]"))
    return found


class SecretStore:
    """NAME -> value, from a JSON file and the environment.

    An agent's store serves its one workspace: every name in it. The cloud
    worker serves many workspaces, so its store is `isolated`: a connection
    sees only its workspace's section of the file, `{"workspaces":
    {"<workspace id>": {"NAME": "value"}}}`, plus the names the operator
    shares on purpose (`shared`: top-level file entries or SETU_SECRET_*
    variables). A tenant can thus never have the cloud send another
    tenant's password to a host of its choosing.
    """

    def __init__(
        self,
        values: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        workspaces: Mapping[str, Mapping[str, str]] | None = None,
        *,
        isolated: bool = False,
        shared: frozenset[str] = frozenset(),
        scope: str | None = None,
    ) -> None:
        self._values = dict(values or {})
        self._environ = os.environ if environ is None else environ
        self._workspaces = {ws: dict(names) for ws, names in (workspaces or {}).items()}
        self._isolated = isolated
        self._shared = shared
        self._scope = scope

    @classmethod
    def from_file(
        cls,
        path: Path | None,
        environ: Mapping[str, str] | None = None,
        *,
        isolated: bool = False,
        shared: frozenset[str] = frozenset(),
    ) -> SecretStore:
        if path is None:
            return cls(environ=environ, isolated=isolated, shared=shared)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"cannot read secrets file {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise SystemExit(f"secrets file {path} must be a JSON object of NAME -> string")
        sections = data.pop("workspaces", {})
        flat = [data, *sections.values()] if isinstance(sections, dict) else [None]
        if not all(
            isinstance(part, dict) and all(isinstance(v, str) for v in part.values())
            for part in flat
        ):
            raise SystemExit(
                f"secrets file {path} must map NAME -> string, with optional "
                f'"workspaces": {{"<workspace id>": {{NAME -> string}}}}'
            )
        return cls(data, environ, sections, isolated=isolated, shared=shared)

    def for_workspace(self, workspace_id: object) -> SecretStore:
        """This store as one workspace's connections see it."""
        return SecretStore(
            self._values,
            self._environ,
            self._workspaces,
            isolated=self._isolated,
            shared=self._shared,
            scope=str(workspace_id),
        )

    def lookup(self, name: str) -> str:
        scoped = self._workspaces.get(self._scope or "", {})
        if name in scoped:
            return scoped[name]
        if self._isolated and name not in self._shared:
            where = f"workspaces.{self._scope}" if self._scope else "a workspace section"
            raise ConfigError(
                f"secret {name!r} is not among this workspace's cloud secrets: the operator "
                f"adds it under {where} in the server's secrets file"
            )
        if name in self._values:
            return self._values[name]
        value = self._environ.get(ENV_PREFIX + name)
        if value is None:
            raise ConfigError(
                f"secret {name!r} is not in this runtime's secret store: add it to the "
                f"secrets file or set {ENV_PREFIX}{name}"
            )
        return value

    def resolve(self, config: Any, seen: set[str] | None = None) -> Any:
        """A copy of config with every reference replaced by its value; each
        value used is added to `seen`, so the caller can keep it out of
        anything it reports."""
        if is_reference(config):
            check_reference(config, "config")
            value = self.lookup(config[SECRET_KEY])
            if seen is not None:
                seen.add(value)
            return value
        if isinstance(config, dict):
            return {key: self.resolve(value, seen) for key, value in config.items()}
        if isinstance(config, list):
            return [self.resolve(value, seen) for value in config]
        return config
