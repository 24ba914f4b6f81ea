"""The web chat's job frames at the channel: what a page is told when the gateway gives no
jobs, cannot answer yet, or refuses a cancel; the gateway's rule itself is tested on a real
gateway (``tests/gateway/schedules/test_webchat.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from channels.errors import JobRefusedError, JobsUnavailableError
from channels.webchat import ChatJob
from tests.channels.webchat.conftest import WAIT, MakeWebchat, Webchat

ALICE, BOB = "alice-1", "bob-2"


class Jobs:
    """Each client's jobs in memory; ``down`` makes every call fail as a starting gateway's."""

    def __init__(self, jobs: dict[str, list[ChatJob]]) -> None:
        self.jobs = jobs
        self.down = False

    async def list(self, client_id: str) -> Sequence[ChatJob]:
        if self.down:
            raise JobsUnavailableError("not yet")
        return self.jobs.get(client_id, [])

    async def cancel(self, client_id: str, job_id: str) -> None:
        if self.down:
            raise JobsUnavailableError("not yet")
        mine = self.jobs.get(client_id, [])
        if not any(job.job_id == job_id for job in mine):
            raise JobRefusedError("job_not_found", f"this chat has no job {job_id!r}")
        self.jobs[client_id] = [job for job in mine if job.job_id != job_id]


def job(job_id: str) -> ChatJob:
    return ChatJob(job_id, None, f"task {job_id}", {"every": "1h"}, 100.0, False, False)


async def test_without_jobs_a_page_is_told_its_chat_has_none(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    await page.send({"type": "jobs"})
    assert await page.next() == {"type": "jobs", "jobs": []}
    await page.send({"type": "unschedule", "jobId": "tea"})
    refused = await page.next()
    assert (refused["code"], refused["jobId"]) == ("job_not_found", "tea")


async def test_jobs_before_hello_are_refused(webchat: Webchat) -> None:
    ws = await webchat.connect()
    await ws.send_json({"type": "jobs"})
    assert (await ws.receive_json(timeout=WAIT))["code"] == "hello_first"


async def test_a_cancel_shows_every_page_of_the_client_its_new_list(
    make_webchat: MakeWebchat,
) -> None:
    jobs = Jobs({ALICE: [job("tea"), job("coffee")], BOB: [job("water")]})
    chat = await make_webchat(jobs=jobs)
    page, tab, other = await chat.page(ALICE), await chat.page(ALICE), await chat.page(BOB)
    await page.send({"type": "unschedule", "jobId": "water"})
    refused = await page.next()
    assert (refused["type"], refused["code"], refused["jobId"]) == (
        "error",
        "job_not_found",
        "water",
    )
    await page.send({"type": "unschedule", "jobId": "tea"})
    for each in (page, tab):
        listed = await each.next()
        assert [j["jobId"] for j in listed["jobs"]] == ["coffee"]
    await other.send({"type": "jobs"})
    assert [j["jobId"] for j in (await other.next())["jobs"]] == ["water"]  # nothing else came


async def test_a_gateway_that_cannot_answer_yet_says_so_and_the_socket_stays(
    make_webchat: MakeWebchat,
) -> None:
    jobs = Jobs({ALICE: [job("tea")]})
    jobs.down = True
    chat = await make_webchat(jobs=jobs)
    page = await chat.page(ALICE)
    await page.send({"type": "jobs"})
    assert (await page.next())["code"] == "jobs_unavailable"
    jobs.down = False
    await page.send({"type": "jobs"})
    assert [j["jobId"] for j in (await page.next())["jobs"]] == ["tea"]
