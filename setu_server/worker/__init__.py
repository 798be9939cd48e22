"""The cloud worker: the agents' runtime loop inside setu-server, and the
handlers that only the cloud runs (`migrate`)."""

from setu_server.worker.runtime import LocalTaskSource, cloud_worker

__all__ = ["LocalTaskSource", "cloud_worker"]
