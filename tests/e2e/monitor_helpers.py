"""Driving the run monitor in tests: over plain HTTP (a signed-in session,
its CSRF token, and a run to look at) and in Debian's Chromium."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from playwright.async_api import Browser, Page, async_playwright

from setu_client import SetuClient
from setu_client._proto.setu.v1 import agents_pb2, agents_pb2_grpc
from setu_client.channel import open_channel

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Monitor:
    """One browser's worth of the monitor: a cookie jar, signed in or not."""

    url: str
    http: aiohttp.ClientSession

    async def sign_in(self, api_key: str) -> aiohttp.ClientResponse:
        return await self.http.post(
            f"{self.url}/signin", data={"api_key": api_key}, allow_redirects=False
        )

    async def page(self, path: str) -> tuple[int, str]:
        async with self.http.get(f"{self.url}{path}", allow_redirects=False) as answer:
            return answer.status, await answer.text()

    async def csrf(self) -> str:
        status, html = await self.page("/runs")
        assert status == 200, html
        found = CSRF.search(html)
        assert found, html
        return found.group(1)

    async def post(self, path: str, form: dict[str, str]) -> tuple[int, str, str]:
        async with self.http.post(f"{self.url}{path}", data=form, allow_redirects=False) as answer:
            return answer.status, answer.headers.get("Location", ""), await answer.text()

    async def stream(self, path: str) -> AsyncIterator[tuple[str, Any]]:
        """A live stream's (event, data) messages, as EventSource reads them."""
        headers = {"Accept": "text/event-stream"}
        async with self.http.get(f"{self.url}{path}", headers=headers) as answer:
            assert answer.status == 200, await answer.text()
            event, data = "", ""
            async for raw in answer.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[len("event: ") :]
                elif line.startswith("data: "):
                    data = line[len("data: ") :]
                elif not line and event:
                    yield event, json.loads(data)
                    event, data = "", ""


@contextlib.asynccontextmanager
async def open_monitor(url: str) -> AsyncIterator[Monitor]:
    # unsafe: the jar keeps cookies of an IP address (the server's 127.0.0.1).
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        yield Monitor(url, http)


@contextlib.asynccontextmanager
async def signed_in(url: str, api_key: str) -> AsyncIterator[Monitor]:
    async with open_monitor(url) as monitor:
        answer = await monitor.sign_in(api_key)
        assert answer.status == 303, await answer.text()
        yield monitor


@dataclass(frozen=True)
class Copy:
    """A cloud → cloud pipeline of `rows` rows, from a sqlite file to another."""

    pipeline_id: str
    source_id: str
    destination_id: str


def _seed(folder: Path, rows: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(folder / "source.db") as db:
        db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY)")
        db.executemany("INSERT INTO items VALUES (?)", [(i,) for i in range(rows)])


async def make_copy(
    client: SetuClient, folder: Path, rows: int = 7, name: str = "copy", **source: Any
) -> Copy:
    _seed(folder, rows)
    config = {"path": str(folder / "source.db")} | source
    made = await client.create_connection(f"{name}-src", "sqlite", config)
    into = await client.create_connection(
        f"{name}-dst", "sqlite", {"path": str(folder / "dst.db"), "create": True}
    )
    pipeline = await client.create_pipeline(name, made.id, into.id, streams=["items"])
    return Copy(pipeline.id, made.id, into.id)


async def check_in(port: int, agent_token: str) -> None:
    """The agent says it is online, then takes no work: runs on it wait."""
    async with open_channel(f"127.0.0.1:{port}", agent_token) as channel:
        await agents_pb2_grpc.AgentServiceStub(channel).CheckIn(
            agents_pb2.CheckInRequest(version="test")
        )


def chromium() -> str:
    found = os.environ.get("SETU_TEST_CHROMIUM") or shutil.which("chromium")
    if not found:
        raise AssertionError("no chromium: run scripts/ensure_test_tools.sh (make test does)")
    return found


@contextlib.asynccontextmanager
async def launched_chromium() -> AsyncIterator[Browser]:
    """The system's Chromium, headless, never a downloaded one (e2e/conftest's `browser`)."""
    async with async_playwright() as playwright:
        # Root in CI needs --no-sandbox.
        launched = await playwright.chromium.launch(
            executable_path=chromium(), headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            await launched.close()


async def browser_sign_in(page: Page, url: str, api_key: str, path: str = "/runs") -> None:
    """Signs the page in as a person does: opens `path`, is sent to sign in, comes back."""
    await page.goto(f"{url}{path}")
    assert "/signin" in page.url
    await page.fill('input[name="api_key"]', api_key)
    await page.click('button[type="submit"]')
    await page.wait_for_url(f"{url}{path}")
