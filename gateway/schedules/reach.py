"""Which jobs aim at a chat the gateway cannot reach (``herald doctor``): a target whose
channel is unknown or not enabled, or whose channel failed its own check."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from gateway.schedules.store import JobRecord, JobsTable
from gateway.schema.targets import ChatTargetError, parse_target
from gateway.settings import HeraldSettings
from gateway.state import StateError, open_state


@dataclass(frozen=True, slots=True)
class Unreachable:
    job_id: str
    target: str
    why: str


def unreachable(
    targets: Iterable[tuple[str, str]], enabled: Collection[str], failing: Collection[str]
) -> list[Unreachable]:
    """Of (job id, target) pairs, those aimed at no chat the gateway can reach: the target
    does not parse among the ``enabled`` channels, or its channel is ``failing`` its check."""
    out: list[Unreachable] = []
    for job_id, target in targets:
        try:
            parsed = parse_target(target, dict.fromkeys(enabled, ""))
        except ChatTargetError as exc:
            out.append(Unreachable(job_id, target, str(exc)))
            continue
        if parsed.channel in failing:
            out.append(Unreachable(job_id, target, f"channel {parsed.channel!r} fails its check"))
    return out


async def stored_jobs(settings: HeraldSettings) -> list[JobRecord]:
    """The jobs in the state database (none when it cannot be read yet)."""
    try:
        db = await open_state(settings.state_config(), readonly=True)
    except (StateError, OSError):
        return []
    try:
        return await JobsTable(db).list()
    except StateError:
        return []
    finally:
        await db.close()


async def job_targets(settings: HeraldSettings) -> list[tuple[str, str]]:
    """Every job's (id, target): the file's, then the state database's others."""
    declared = [(job.id, job.to) for job in settings.schedules.jobs]
    seen = {job_id for job_id, _ in declared}
    stored = [(j.job_id, j.to_target) for j in await stored_jobs(settings) if j.job_id not in seen]
    return declared + stored
