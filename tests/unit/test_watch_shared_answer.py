"""A storm's answers are built once per job version: the waiters of one
version get one named snapshot (`Watch.keep_named`) and one answer built
from it (`Answers`), not one each; and the collector stays out of the storm
(`StormCollector`)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from dataclasses import replace

from setu_server.models import Job, JobState
from setu_server.service.watch import (
    GC_HOLD_SECONDS,
    STORM_GC,
    Answers,
    Drain,
    WatchHub,
    _applied,
)
from tests.factories import detached_job, no_jobs


def test_an_answer_is_built_once_for_the_same_snapshot_and_again_for_a_newer_one() -> None:
    answers, job = Answers(), detached_job()
    built: list[int] = []

    def build(j: Job) -> tuple[int]:
        built.append(j.version)
        return (j.version,)

    first = [answers.of(job, build) for _ in range(5)]
    assert built == [1] and all(a is first[0] for a in first)
    newer = replace(job, version=2)
    assert answers.of(newer, build) == (2,) and built == [1, 2]
    # Another kind of answer of the same snapshot is its own.
    assert answers.of(job, lambda j: "other") == "other"
    assert answers.built == 3


def test_answers_hold_only_the_most_recent_snapshots() -> None:
    answers = Answers(size=2)
    jobs = [detached_job() for _ in range(3)]
    for job in jobs:
        answers.of(job, str)
    answers.of(jobs[0], str)  # pushed out by the third: built again
    assert answers.built == 4


async def test_the_waiters_of_one_version_share_one_named_snapshot() -> None:
    hub, job = WatchHub(no_jobs), detached_job()
    with hub.subscribe(job.id) as watch:
        watch.offer(job)
        waiters = [asyncio.create_task(watch.newer_than(1, 60, hub.closing)) for _ in range(4)]
        for _ in range(100):
            await asyncio.sleep(0)
        done = replace(job, version=2, state=JobState.SUCCEEDED)
        watch.offer(done)
        woken = [await w for w in waiters]
        assert all(w is done for w in woken)
        assert watch.named(2) is None
        named = watch.keep_named(replace(done, error_message="named"))
        assert watch.named(2) is named and watch.named(1) is None
        assert hub.named == 1
        # A newer version, or a waiter parking again, lets it go: a parked
        # watch holds one snapshot.
        parked = asyncio.create_task(watch.newer_than(2, 60, hub.closing))
        await asyncio.sleep(0)
        assert watch.named(2) is None
        watch.keep_named(named)
        watch.offer(replace(done, version=3))
        assert watch.named(2) is None and (await parked).version == 3


def test_a_notice_applied_to_a_snapshot_is_what_dataclasses_replace_makes() -> None:
    job = replace(detached_job(), rows_total=9, error_message="")
    snapshot = {
        "phase": "load",
        "cancel_requested": True,
        "error_message": "boom",
        "rows_extracted": 1,
        "rows_loaded": 2,
        "rows_total": 3,
        "rows_filtered": 4,
        "rows_inserted": 5,
        "rows_updated": 6,
        "rows_unchanged": 7,
        "rows_deleted": 8,
        "extract_runtime": "cloud",
        "load_runtime": "cloud",
        "result": {"a": 1},
        "updated_at": "2026-01-02T00:00:00+00:00",
        "started_at": None,
        "finished_at": "2026-01-02T00:00:01+00:00",
    }
    applied = _applied(job, 5, "failed", snapshot)
    fields = {f.name for f in dataclasses.fields(Job)}
    assert set(vars(applied)) == fields  # no field made up, none lost
    expected = replace(
        job,
        **{k: getattr(applied, k) for k in fields if getattr(applied, k) != getattr(job, k)},
    )
    assert applied == expected and applied.version == 5 and applied.state is JobState.FAILED
    assert job.version == 1 and job.error_message == ""  # the held snapshot is untouched


async def test_the_collector_is_off_while_a_storm_drains_and_on_once_it_is_drained() -> None:
    enabled: list[bool] = []
    drained = asyncio.Event()

    def handle(item: int) -> None:
        enabled.append(gc.isenabled())
        if item == 34:
            drained.set()

    drain: Drain[int] = Drain(handle, 10, least=10)
    drain.extend(range(35))
    await drained.wait()
    # On for the first turn (no backlog yet), off for the turns after one
    # that left a backlog, on again once the last turn emptied the queue.
    assert enabled == [True] * 10 + [False] * 25
    assert gc.isenabled() and not STORM_GC.disabled


async def test_the_collector_held_off_no_longer_than_its_bound_nor_turned_on_by_us() -> None:
    loop = asyncio.get_running_loop()
    holder = object()
    STORM_GC.hold(holder, loop.time())
    assert not gc.isenabled()
    STORM_GC.hold(holder, loop.time() + GC_HOLD_SECONDS + 1)
    assert gc.isenabled()
    STORM_GC.release(holder)
    gc.disable()
    try:  # a collector someone else turned off stays off
        STORM_GC.hold(holder, loop.time())
        STORM_GC.release(holder)
        assert not gc.isenabled()
    finally:
        gc.enable()
