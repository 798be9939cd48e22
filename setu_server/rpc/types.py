"""Typing helpers for servicers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

if TYPE_CHECKING:
    Ctx: TypeAlias = grpc.aio.ServicerContext[Any, Any]
else:
    Ctx = grpc.aio.ServicerContext
