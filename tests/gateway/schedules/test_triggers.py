"""Fire times of ``cron`` (in several time zones, across DST changes), ``every`` and ``at``."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from gateway.schema.triggers import (
    Trigger,
    TriggerError,
    crontab_weekdays,
    parse_every,
    trigger_of,
)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


def local(epoch: float, zone: str) -> str:
    return datetime.fromtimestamp(epoch, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def fires(trigger: Trigger, start: float, count: int) -> list[float]:
    first = trigger.first(start)
    assert first is not None
    out = [first]
    while len(out) < count:
        following = trigger.after(out[-1])
        assert following is not None
        out.append(following)
    return out


def test_cron_keeps_its_wall_time_across_the_spring_change_in_berlin() -> None:
    # 2026-03-29: 02:00 CET becomes 03:00 CEST.
    trigger = Trigger("cron", "0 9 * * *", "Europe/Berlin")
    times = fires(trigger, utc(2026, 3, 27, 12), 3)
    assert [local(t, "Europe/Berlin") for t in times] == [
        "2026-03-28 09:00 CET",
        "2026-03-29 09:00 CEST",
        "2026-03-30 09:00 CEST",
    ]
    # The same wall time is an hour less of UTC after the change.
    assert times[1] - times[0] == 23 * 3600


def test_a_time_the_spring_change_skips_fires_an_hour_on_that_day() -> None:
    trigger = Trigger("cron", "30 2 * * *", "Europe/Berlin")
    times = fires(trigger, utc(2026, 3, 28, 12), 2)
    assert [local(t, "Europe/Berlin") for t in times] == [
        "2026-03-29 03:30 CEST",
        "2026-03-30 02:30 CEST",
    ]


def test_a_time_the_autumn_change_repeats_fires_at_both_instances_in_new_york() -> None:
    # 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 happens twice (APScheduler's rule), and
    # the next fire time always moves on.
    trigger = Trigger("cron", "30 1 * * *", "America/New_York")
    times = fires(trigger, utc(2026, 10, 31, 12), 3)
    assert [local(t, "America/New_York") for t in times] == [
        "2026-11-01 01:30 EDT",
        "2026-11-01 01:30 EST",
        "2026-11-02 01:30 EST",
    ]


def test_every_half_hour_moves_on_through_the_repeated_hour() -> None:
    trigger = Trigger("cron", "*/30 * * * *", "America/New_York")
    times = fires(trigger, utc(2026, 11, 1, 5, 15), 4)  # 01:15 EDT
    assert [local(t, "America/New_York") for t in times] == [
        "2026-11-01 01:30 EDT",
        "2026-11-01 01:00 EST",
        "2026-11-01 01:30 EST",
        "2026-11-01 02:00 EST",
    ]


@pytest.mark.parametrize(
    ("field", "days"),
    [
        ("1-5", "mon,tue,wed,thu,fri"),
        ("0", "sun"),
        ("7", "sun"),
        ("5-7", "sun,fri,sat"),
        ("*/2", "sun,tue,thu,sat"),
        ("1,3", "mon,wed"),
        ("mon-fri", "mon-fri"),
        ("*", "*"),
    ],
)
def test_crontab_weekday_numbers_count_from_sunday(field: str, days: str) -> None:
    assert crontab_weekdays(field) == days


def test_weekday_cron_in_tokyo_skips_the_weekend() -> None:
    trigger = Trigger("cron", "0 9 * * 1-5", "Asia/Tokyo")
    times = fires(trigger, utc(2026, 11, 27, 0, 30), 2)  # Friday 09:30 in Tokyo
    assert [local(t, "Asia/Tokyo") for t in times] == [
        "2026-11-30 09:00 JST",
        "2026-12-01 09:00 JST",
    ]


def test_every_counts_from_its_anchor() -> None:
    trigger = Trigger("every", "15m", anchor=utc(2026, 1, 1))
    assert trigger.first(utc(2026, 1, 1, 0, 20)) == utc(2026, 1, 1, 0, 30)
    assert trigger.after(utc(2026, 1, 1, 0, 30)) == utc(2026, 1, 1, 0, 45)
    assert [parse_every(t) for t in ("90s", "15m", "2h", "1d")] == [90, 900, 7200, 86400]


def test_at_fires_once() -> None:
    trigger = Trigger("at", "2026-12-01T09:00:00+01:00")
    assert trigger.first(utc(2026, 1, 1)) == utc(2026, 12, 1, 8)
    assert trigger.after(utc(2026, 12, 1, 8)) is None


@pytest.mark.parametrize(
    ("trigger", "field", "words"),
    [
        (Trigger("cron", "0 25 * * *"), "cron", "is no crontab"),
        (Trigger("cron", "0 9 * *"), "cron", "is no crontab"),
        (Trigger("every", "10s"), "every", "shorter than schedules.minEverySeconds"),
        (Trigger("every", "soon"), "every", "is not <number>"),
        (Trigger("at", "2020-01-01T00:00:00Z"), "at", "is in the past"),
        (Trigger("at", "2030-01-01T00:00:00"), "at", "has no offset"),
        (Trigger("cron", "0 9 * * *", "Mars/Olympus"), "timezone", "unknown time zone"),
    ],
)
def test_unusable_triggers_name_their_field(trigger: Trigger, field: str, words: str) -> None:
    with pytest.raises(TriggerError) as excinfo:
        trigger.check(min_every_seconds=60, now=utc(2026, 6, 1))
    assert excinfo.value.field == field
    assert words in str(excinfo.value)


def test_a_job_has_exactly_one_trigger() -> None:
    for given in ({}, {"cron": "0 9 * * *", "every": "1h"}):
        with pytest.raises(TriggerError, match="exactly one of cron, every and at"):
            trigger_of(
                cron=given.get("cron"),
                every=given.get("every"),
                at=None,
                timezone="UTC",
                anchor=0,
            )


NOW = utc(2026, 3, 1)


@pytest.mark.parametrize(
    ("trigger", "allowed"),
    [
        (Trigger("every", "366d"), True),
        (Trigger("every", "367d"), False),
        (Trigger("every", "8784h"), True),  # 366 days in hours
        (Trigger("every", "8785h"), False),
        (Trigger("at", "2036-03-08T00:00:00Z"), True),  # ten years of 366 days ahead
        (Trigger("at", "2036-03-08T00:00:01Z"), False),
        (Trigger("cron", "0 0 29 2 *"), True),  # every leap year
        (Trigger("cron", "0 0 31 6 *"), False),
    ],
)
def test_the_bounds_of_a_trigger(trigger: Trigger, allowed: bool) -> None:
    if allowed:
        trigger.check(min_every_seconds=60, now=NOW)
        assert trigger.first(NOW) is not None
    else:
        with pytest.raises(TriggerError) as refused:
            trigger.check(min_every_seconds=60, now=NOW)
        assert refused.value.field == trigger.kind


@pytest.mark.parametrize(
    "name", ["America", "America/", "Europe/Nowhere", "/etc/localtime", "../etc", "x" * 300, ""]
)
def test_a_time_zone_is_an_iana_name_and_its_error_names_no_file(name: str) -> None:
    with pytest.raises(TriggerError) as refused:
        Trigger("cron", "0 9 * * *", name).check(min_every_seconds=60, now=NOW)
    assert refused.value.field == "timezone"
    assert "/zoneinfo" not in str(refused.value)
    assert "Errno" not in str(refused.value)
