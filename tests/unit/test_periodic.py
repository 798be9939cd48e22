"""PeriodicService: the loop every maintenance service shares. It repeats
run_once, tells its hooks what each pass did, and outlives a failing pass."""

from __future__ import annotations

import asyncio

import pytest

from setu_server.maintenance.periodic import PeriodicService


class Counting(PeriodicService[int]):
    name = "counting"

    def __init__(self, fail_on: set[int]) -> None:
        super().__init__(interval_seconds=0.0)
        self.passes = 0
        self._fail_on = fail_on

    async def run_once(self) -> int:
        self.passes += 1
        if self.passes in self._fail_on:
            raise RuntimeError(f"pass {self.passes} broke")
        return self.passes


async def test_the_loop_reports_each_pass_survives_a_failure_and_stops() -> None:
    service = Counting(fail_on={2})
    seen: list[int] = []
    failures: list[str] = []
    third = asyncio.Event()

    async def ran(result: int) -> None:
        seen.append(result)
        if result == 3:
            third.set()

    async def failed(error: BaseException) -> None:
        failures.append(str(error))

    service.hooks.ran = ran
    service.failures.failed = failed
    service.start()
    service.start()
    loops = [t for t in asyncio.all_tasks() if t.get_name() == "setu-counting"]
    assert len(loops) == 1, "a second start is no second loop"
    await asyncio.wait_for(third.wait(), timeout=10)
    await asyncio.wait_for(service.stop(), timeout=10)

    assert seen[:2] == [1, 3] and failures == ["pass 2 broke"]
    assert [t for t in asyncio.all_tasks() if t.get_name() == "setu-counting"] == []
    await service.stop()  # stopping twice is harmless


def test_a_misspelt_hook_fails_loudly() -> None:
    service = Counting(fail_on=set())
    with pytest.raises(AttributeError, match="no test hook 'rann'"):
        service.hooks.rann = service.hooks.ran
