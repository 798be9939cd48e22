"""Test hooks: named points inside a long call (a long-poll, a maintenance
pass) where a test observes it or forces an interleaving instead of sleeping.

Each point is an async callable of one value and does nothing until a test
sets it. Naming a point its holder does not have is an error, so a misspelt
hook fails the test instead of never firing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


async def _nothing(value: object) -> None:
    return None


class Hooks(Generic[T]):
    def __init__(self, *points: str) -> None:
        object.__setattr__(self, "_points", dict.fromkeys(points, _nothing))

    def _known(self, name: str) -> dict[str, Callable[[T], Awaitable[None]]]:
        points: dict[str, Callable[[T], Awaitable[None]]] = object.__getattribute__(self, "_points")
        if name not in points:
            raise AttributeError(f"no test hook {name!r}; there are {sorted(points)}")
        return points

    def __getattr__(self, name: str) -> Callable[[T], Awaitable[None]]:
        return self._known(name)[name]

    def __setattr__(self, name: str, hook: Callable[[T], Awaitable[None]]) -> None:
        self._known(name)[name] = hook
