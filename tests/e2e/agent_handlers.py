"""Task handlers that real setu-agent processes load in tests
(SETU_AGENT_EXTRA_HANDLERS=tests.e2e.agent_handlers:HANDLERS).

The `test` kind's behaviour is chosen by the task payload's "mode":
- "hold": on attempt 1, hold the task (heartbeating) until the process dies
  or the runtime stops; later attempts succeed;
- "fail": raise on every attempt;
- "until_cancelled": work in batches until the job asks to cancel;
- anything else: succeed at once.
"""

from __future__ import annotations

import asyncio

from setu_agent.runtime import TaskContext
from setu_tasks.results import TestResult


async def test_kind(ctx: TaskContext) -> TestResult:
    mode = ctx.task.payload.get("mode", "ok")
    if mode == "hold" and ctx.task.attempt == 1:
        await asyncio.Event().wait()
    if mode == "fail":
        raise RuntimeError(f"boom on attempt {ctx.task.attempt}")
    if mode == "until_cancelled":
        batches = 0
        while True:
            ctx.check_cancelled()
            batches += 1
            ctx.report(rows_read=batches * 1000)
            await asyncio.wait_for(ctx.cancel_requested.wait(), timeout=3600)
    return TestResult(ok=True, message=f"done on attempt {ctx.task.attempt}")


HANDLERS = {"test": test_kind}
