"""A real S3-compatible server for tests: moto's server mode on loopback.

It speaks HTTP on 127.0.0.1, so in-process code and the setu-server and
setu-agent processes that e2e tests start reach the same buckets.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from moto.server import ThreadedMotoServer

from setu_engine.staged.s3 import S3Settings, s3_client


@dataclass(frozen=True)
class S3Endpoint:
    endpoint_url: str
    region: str = "us-east-1"
    access_key_id: str = "testing"
    secret_access_key: str = "testing"

    @property
    def settings(self) -> S3Settings:
        return S3Settings(
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
        )

    @property
    def env(self) -> dict[str, str]:
        """Environment for a subprocess that uses botocore's default chain."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    async def make_bucket(self, name: str | None = None) -> str:
        """Creates a bucket (a fresh unique name unless given) and returns its name."""
        name = name or f"setu-test-{uuid.uuid4().hex[:16]}"
        async with s3_client(self.settings) as client:
            await client.create_bucket(Bucket=name)
        return name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """One moto S3 server for the session, stopped at its end."""
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Endpoint(endpoint_url=f"http://127.0.0.1:{port}")
    finally:
        server.stop()


@pytest.fixture
async def s3_bucket(s3_endpoint: S3Endpoint) -> AsyncIterator[str]:
    """A fresh bucket for this test alone."""
    yield await s3_endpoint.make_bucket()
