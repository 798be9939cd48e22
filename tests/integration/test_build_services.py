"""build_services constructs a server's parts and starts nothing; the
background work (the LISTEN session, the watch hub's re-check, the
maintenance loops) runs from Services.start() (setu_server/services.py)."""

from __future__ import annotations

import asyncio

from setu_client.clock import SystemClock
from setu_server.server import build_services
from setu_server.testing import settings_for_tests


def _running_names() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks() if not task.done()}


async def test_the_parts_are_built_first_and_started_apart(database_url: str) -> None:
    services = await build_services(settings_for_tests(), database_url, SystemClock())
    background = {f"setu-{service.name}" for service in services.maintenance}
    background |= {"setu-listener", "setu-watch-recheck"}
    try:
        assert background.isdisjoint(_running_names())
        await services.start()
        assert background <= _running_names()
    finally:
        await asyncio.gather(*(service.stop() for service in services.maintenance))
        await services.hub.close()
        await services.listener.close()
        await services.fallback.stop()
        await services.blob.close()
        await services.pool.close()
