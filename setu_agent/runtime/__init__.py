"""The runtime loop shared by setu-agent and the cloud worker: lease,
heartbeat, dispatch by task kind, report."""

from setu_agent.runtime.loop import Runtime
from setu_agent.runtime.task import (
    Handler,
    LeasedTask,
    NonRetryable,
    TaskCancelled,
    TaskContext,
)

__all__ = ["Handler", "LeasedTask", "NonRetryable", "Runtime", "TaskCancelled", "TaskContext"]
