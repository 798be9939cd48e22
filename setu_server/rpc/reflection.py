"""Server reflection, so `grpcurl list` and `grpcurl describe` work.

The upb descriptor pool behind python protobuf does not resolve method names
("setu.v1.JobOrchestrationService.WaitJob") in FindFileContainingSymbol, so
`grpcurl describe <method>` would fail; this pool answers those through the
method's service and passes everything else on.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_health.v1 import health
from grpc_reflection.v1alpha import reflection


class _MethodAwarePool:
    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool

    def FindFileContainingSymbol(self, symbol: str) -> FileDescriptor:
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            service_name, _, method = symbol.rpartition(".")
            try:
                service = self._pool.FindServiceByName(service_name)
            except KeyError:
                raise KeyError(symbol) from None
            if method not in service.methods_by_name:
                raise KeyError(symbol) from None
            return service.file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def enable(server: grpc.aio.Server, service_names: tuple[str, ...]) -> None:
    reflection.enable_server_reflection(
        (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME),
        server,
        pool=_MethodAwarePool(descriptor_pool.Default()),
    )
