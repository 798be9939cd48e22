"""Secret references, resolved only by the runtime that executes a stage.

A connection's config may hold `{"$secret": "NAME"}` wherever a value goes.
The server stores and returns the reference; the runtime that runs the stage
replaces it with the value from its own store: a JSON file of NAME -> value
(`--secrets-file`, re-read when it changes), then the environment variable
`SETU_SECRET_<NAME>`. The prefix keeps a connection from naming any other
variable of the process (the agent's own token, for one).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from setu_engine.errors import ConfigError, InvalidSecretsFile
from setu_engine.support.secrets_file import SecretsContent, SecretsFile

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

    The file is re-read when it changes (`SecretsFile`), so a secret added
    to it serves the next lookup without a restart.
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
        file: SecretsFile | None = None,
    ) -> None:
        self._fixed = SecretsContent(
            dict(values or {}), {ws: dict(names) for ws, names in (workspaces or {}).items()}
        )
        self._environ = os.environ if environ is None else environ
        self._isolated = isolated
        self._shared = shared
        self._scope = scope
        self._file = file

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
            file = SecretsFile(path)
        except InvalidSecretsFile as exc:
            raise SystemExit(str(exc)) from exc
        return cls(environ=environ, isolated=isolated, shared=shared, file=file)

    def for_workspace(self, workspace_id: object) -> SecretStore:
        """This store as one workspace's connections see it."""
        return SecretStore(
            self._fixed.top,
            self._environ,
            self._fixed.workspaces,
            isolated=self._isolated,
            shared=self._shared,
            scope=str(workspace_id),
            file=self._file,
        )

    def lookup(self, name: str) -> str:
        content = self._file.content() if self._file else self._fixed
        scoped = content.workspaces.get(self._scope or "", {})
        if name in scoped:
            return scoped[name]
        if self._isolated and name not in self._shared:
            raise ConfigError(self._not_in_workspace(name))
        if name in content.top:
            return content.top[name]
        value = self._environ.get(ENV_PREFIX + name)
        if value is None:
            where = f"the secrets file {self._file.path}" if self._file else "a secrets file"
            raise ConfigError(
                f"secret {name!r} is not in this runtime's secret store: add it to "
                f"{where} or set {ENV_PREFIX}{name}"
            )
        return value

    def _not_in_workspace(self, name: str) -> str:
        """What to run, exactly: `setu dev` serves its one workspace from a
        file this command writes; any other server's operator edits the file
        (re-read on change, no restart)."""
        section = f"workspaces.{self._scope}" if self._scope else "the workspace's section"
        where = (
            f"in {self._file.path}"
            if self._file
            else "in the server's secrets file (SETU_SECRETS_FILE)"
        )
        return (
            f"secret {name!r} is not in this workspace's cloud secrets: run "
            f"`setu dev secret set {name}` (dev server), or add it under {section} {where}"
        )

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
