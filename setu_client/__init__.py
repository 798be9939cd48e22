"""Setu's Python SDK."""

from setu_client.client import RetryPolicy, SetuClient
from setu_client.errors import ClientClosed, JobNotFound, JobNotStarted, SetuError

__all__ = ["ClientClosed", "JobNotFound", "JobNotStarted", "RetryPolicy", "SetuClient", "SetuError"]
