"""A job's trigger — ``cron``, ``every`` or ``at`` — and its fire times.

Fire times come from APScheduler 3's triggers (``CronTrigger.from_crontab``,
``IntervalTrigger``, ``DateTrigger``) with zoneinfo, so daylight-saving changes are theirs:
a cron time that a spring-forward skips fires an hour on that day (02:30 is 03:30), one an
autumn fall-back repeats fires at both instances (01:30 EDT, then 01:30 EST), as
APScheduler has it.

Day-of-week numbers are crontab's (0 or 7 is Sunday, 1 Monday): APScheduler 3 counts from
Monday, so :func:`crontab_weekdays` rewrites the field as day names first.

Times cross this module as epoch seconds (what the state database stores); APScheduler sees
aware datetimes.

What a job may say is bounded here, once, for the config file, the API, the CLI and the
agent's tool alike: an ``every`` of at most :data:`MAX_EVERY_SECONDS`, an ``at`` at most
:data:`MAX_AT_AHEAD_SECONDS` ahead, a cron that fires at all, a time zone that is an IANA
name. Each mistake is a :class:`TriggerError` naming its field, whose message never carries
more than a cut of the value (never a host path: zoneinfo's own errors name its files).

Kept free of the rest of Herald: the config schema validates triggers with it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

if TYPE_CHECKING:
    from apscheduler.triggers.base import BaseTrigger

TriggerKind = Literal["cron", "every", "at"]
TRIGGER_KINDS: Final[tuple[TriggerKind, ...]] = ("cron", "every", "at")

#: How far past a fire time ``after`` looks for the next one before it gives up (a day and
#: more: past any daylight-saving repeat).
_MAX_PROBE: Final = 2 * 86400.0
_DAY_NAMES: Final = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_EVERY: Final = re.compile(r"^([1-9][0-9]{0,8})([smhd])$")
_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DAY: Final = 86400
#: The longest ``every``: a rarer job is a cron (``0 9 1 1 *``) or an ``at``; and every fire
#: time stays far from the end of what a datetime holds (year 9999).
MAX_EVERY_SECONDS: Final = 366 * _DAY
#: How far ahead an ``at`` may be: later is a typo (or a time no calendar of ours can hold).
MAX_AT_AHEAD_SECONDS: Final = 10 * 366 * _DAY
#: Longest texts a trigger's fields take (the longest IANA zone name has 32 characters; a
#: crontab of five fields is far shorter): a value is cut before anything parses it.
MAX_CRON_CHARS: Final = 200
MAX_EVERY_CHARS: Final = 16
MAX_AT_CHARS: Final = 64
MAX_TIMEZONE_CHARS: Final = 64


class TriggerError(ValueError):
    """A trigger that cannot be used; ``field`` is the key it came from."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


def parse_every(text: str) -> int:
    """``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` as seconds, at most
    :data:`MAX_EVERY_SECONDS` (TriggerError otherwise)."""
    match = _EVERY.fullmatch(text.strip()) if len(text) <= MAX_EVERY_CHARS else None
    if match is None:
        raise TriggerError("every", f"{text!r:.40} is not <number><s|m|h|d> (e.g. '15m')")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > MAX_EVERY_SECONDS:
        raise TriggerError(
            "every",
            f"{text!r:.40} is longer than {MAX_EVERY_SECONDS // _DAY}d, the longest every "
            "(a rarer job is a cron or an at)",
        )
    return seconds


def crontab_weekdays(field: str) -> str:
    """Crontab's day-of-week field with its numbers as day names (``1-5`` → ``mon,tue,…``).

    Each item (a number, a range ``a-b``, either with ``/step``, or ``*/step``) becomes the
    list of the days it means; day names and a bare ``*`` are left as written.
    """
    if field == "*" or not re.search(r"[0-9]", field):
        return field
    days: list[int] = []
    for item in field.split(","):
        span, _, step_text = item.partition("/")
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f"bad step in day of week {item!r}")
        if span == "*":
            first, last = 0, 6
        else:
            low, dash, high = span.partition("-")
            if not low.isdigit() or (dash and not high.isdigit()):
                raise ValueError(f"day of week {item!r} mixes numbers and names")
            first, last = int(low), int(high) if dash else int(low)
            if step is not None and not dash:
                last = 7
        if not (0 <= first <= 7 and 0 <= last <= 7) or first > last:
            raise ValueError(f"day of week {item!r} is not within 0-7")
        days += [day % 7 for day in range(first, last + 1, step or 1)]
    return ",".join(_DAY_NAMES[day] for day in sorted(set(days)))


def parse_at(text: str) -> float:
    """An ISO-8601 time with an offset (``2026-12-01T09:00:00+01:00``) as epoch seconds.
    How far ahead it may be is :meth:`Trigger.check`'s (it knows the time now)."""
    try:
        if len(text) > MAX_AT_CHARS:
            raise ValueError("too long")
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise TriggerError("at", f"{text!r:.60} is not an ISO-8601 time") from None
    if when.tzinfo is None:
        raise TriggerError("at", f"{text!r:.60} has no offset (write e.g. '+00:00' or 'Z')")
    try:  # 9999-12-31T23:59:59-14:00 is in the year 10000 in UTC: no datetime holds it
        return when.astimezone(UTC).timestamp()
    except (OverflowError, ValueError):
        raise TriggerError("at", f"{text!r:.60} is out of the range of times") from None


@functools.cache
def _zone_names() -> frozenset[str]:
    # Read once: the names the system's and the tzdata package's databases know.
    return frozenset(available_timezones())


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (TriggerError naming ``timezone`` otherwise). Only a
    name the time zone database lists: a folder (``America``), a path or a long name is
    refused before a file is looked for."""
    unknown = TriggerError(
        "timezone", f"unknown time zone {name!r:.60} (an IANA name, e.g. 'Europe/Berlin')"
    )
    if len(name) > MAX_TIMEZONE_CHARS or name not in _zone_names():
        raise unknown
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # a broken file: its path unsaid
        raise unknown from None


@dataclass(frozen=True, slots=True)
class Trigger:
    """One trigger as a job stores it: its kind, its text as written, its time zone, and
    ``anchor`` (when an ``every`` job was created: its fire times are anchor + k·every)."""

    kind: TriggerKind
    value: str
    timezone: str = "UTC"
    anchor: float = 0.0

    def __str__(self) -> str:
        where = f" ({self.timezone})" if self.kind == "cron" else ""
        return f"{self.kind} {self.value}{where}"

    def to_json(self) -> dict[str, str]:
        out: dict[str, str] = {self.kind: self.value}
        if self.kind == "cron":
            out["timezone"] = self.timezone
        return out

    def check(self, *, min_every_seconds: float, now: float) -> None:
        """Raise :class:`TriggerError` naming the field when the trigger cannot be used: the
        one check of a job's trigger, whoever gives it. A trigger that passes has a first
        fire time from ``now`` (:meth:`first` answers, and not None)."""
        if self.kind == "every":
            seconds = parse_every(self.value)
            if seconds < min_every_seconds:
                raise TriggerError(
                    "every",
                    f"{self.value!r} is shorter than schedules.minEverySeconds "
                    f"({min_every_seconds:g}s)",
                )
        elif self.kind == "at":
            at = parse_at(self.value)
            if at <= now:
                raise TriggerError("at", f"{self.value!r} is in the past")
            if at > now + MAX_AT_AHEAD_SECONDS:
                years = MAX_AT_AHEAD_SECONDS // (366 * _DAY)
                raise TriggerError("at", f"{self.value!r} is more than {years} years ahead")
        try:
            first = self.first(now)
        except (OverflowError, ValueError) as exc:  # a TriggerError (a ValueError) as it is
            if isinstance(exc, TriggerError):
                raise
            raise TriggerError(
                self.kind, f"{self.value!r:.60} has no time Herald can hold"
            ) from None
        if first is None:
            raise TriggerError(self.kind, f"{self.value!r:.60} never fires")

    def first(self, now: float) -> float | None:
        """The first fire time at or after ``now`` (an ``at`` gives its time even if past:
        the misfire rules decide what becomes of it)."""
        fire = self._apscheduler().get_next_fire_time(None, _aware(now))
        return fire.timestamp() if fire is not None else None

    def after(self, previous: float) -> float | None:
        """The fire time after ``previous`` (None: the trigger fires no more)."""
        trigger = self._apscheduler()
        at = _aware(previous)
        fire = trigger.get_next_fire_time(at, at)
        # In an autumn fall-back APScheduler 3 answers a repeated wall time's first instance
        # again (it ignores the fold): ask from later instants until the answer moves on.
        step = 1.0
        while fire is not None and fire.timestamp() <= previous and step <= _MAX_PROBE:
            fire = trigger.get_next_fire_time(None, _aware(previous + step))
            step *= 2
        return fire.timestamp() if fire is not None else None

    def _apscheduler(self) -> BaseTrigger:
        # Imported here: every ``herald`` command loads the config, most without a schedule.
        from apscheduler.triggers.cron import CronTrigger
        from apscheduler.triggers.date import DateTrigger
        from apscheduler.triggers.interval import IntervalTrigger

        tz = zone(self.timezone)
        if self.kind == "cron":
            try:
                if len(self.value) > MAX_CRON_CHARS:
                    raise ValueError(f"longer than {MAX_CRON_CHARS} characters")
                fields = self.value.split()
                if len(fields) != 5:
                    raise ValueError(f"wrong number of fields: {len(fields)}, expected 5")
                return CronTrigger(
                    minute=fields[0],
                    hour=fields[1],
                    day=fields[2],
                    month=fields[3],
                    day_of_week=crontab_weekdays(fields[4]),
                    timezone=tz,
                )
            except ValueError as exc:
                raise TriggerError("cron", f"{self.value!r:.60} is no crontab: {exc}") from None
        if self.kind == "every":
            return IntervalTrigger(
                seconds=parse_every(self.value), start_date=_aware(self.anchor), timezone=tz
            )
        return DateTrigger(run_date=_aware(parse_at(self.value)), timezone=tz)


def _aware(epoch: float) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=epoch)


def trigger_of(
    *, cron: str | None, every: str | None, at: str | None, timezone: str, anchor: float
) -> Trigger:
    """The one trigger among ``cron``, ``every`` and ``at`` (TriggerError for none or two)."""
    given = [(kind, value) for kind, value in zip(TRIGGER_KINDS, (cron, every, at), strict=True)]
    named = [(kind, value) for kind, value in given if value is not None]
    if len(named) != 1:
        which = " and ".join(kind for kind, _ in named) or "none"
        raise TriggerError(
            "trigger", f"a job has exactly one of cron, every and at (this one has {which})"
        )
    kind, value = named[0]
    return Trigger(kind, value, timezone, anchor)
