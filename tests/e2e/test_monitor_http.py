"""The HTTP listener: where it answers, /metrics, and turning it off."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from setu_server.server import Running
from tests.servers import in_process


async def test_metrics_are_served_without_sign_in(server: Running) -> None:
    assert server.http_url.startswith("http://127.0.0.1:")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{server.http_url}/metrics") as answer:
            assert answer.status == 200
            assert answer.headers["Content-Type"].startswith("text/plain")
            list(text_string_to_metric_families(await answer.text()))


async def test_an_empty_address_turns_the_listener_off(database_url: str) -> None:
    async with in_process(database_url, http_listen="") as running:
        assert running.http is None
        assert running.http_url == ""


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:http"])
async def test_a_malformed_address_stops_the_server(database_url: str, address: str) -> None:
    with pytest.raises(SystemExit, match="SETU_HTTP_LISTEN"):
        async with in_process(database_url, http_listen=address):
            pass
