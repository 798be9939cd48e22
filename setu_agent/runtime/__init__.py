"""The runtime loop shared by setu-agent and the cloud worker: lease,
heartbeat, dispatch by task kind, report."""

from setu_agent.runtime.loop import Runtime
from setu_agent.runtime.task import (
    Handler,
    NonRetryable,
    TaskCancelled,
    TaskContext,
)
from setu_tasks.specs import LeasedTask

__all__ = ["Handler", "LeasedTask", "NonRetryable", "Runtime", "TaskCancelled", "TaskContext"]
