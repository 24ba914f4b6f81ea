"""Validation errors as issues (gateway/config/_issues.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config._issues import Reporter, describe, schema_issues
from gateway.settings import HeraldSettings


def _errors(data: dict[str, object]) -> ValidationError:
    with pytest.raises(ValidationError) as excinfo:
        HeraldSettings.model_validate(data)
    return excinfo.value


def test_describe_shows_the_value_found_unless_the_key_may_hold_a_secret() -> None:
    exc = _errors({"gateway": {"port": "x" * 80, "auth": {"token": 12345678}}})
    described = {key: message for key, message in (describe(e, e["loc"]) for e in exc.errors())}
    port = described[("gateway", "port")]
    assert port.startswith("Input should be a valid integer")
    assert port.endswith("(got '" + "x" * 56 + "...)")  # long values are cut short
    assert "12345678" not in described[("gateway", "auth", "token")]


def test_issues_name_the_variable_or_flag_that_set_the_key() -> None:
    reporter = Reporter(None, {("gateway",): "the command line"})
    issues = schema_issues(_errors({"gateway": {"port": 0}}), reporter, {}, [])
    assert [str(issue) for issue in issues] == [
        "gateway.port: Input should be greater than or equal to 1 (got 0) (from the command line)"
    ]


def test_keys_already_reported_are_skipped() -> None:
    exc = _errors({"gateway": {"port": "x"}, "agent": {"maxIterations": 0}})
    issues = schema_issues(exc, Reporter(None, {}), {}, [("gateway",)])
    assert [issue.key for issue in issues] == ["agent.maxIterations"]


def test_a_cross_reference_to_a_key_left_unset_names_its_variable() -> None:
    exc = _errors({"gateway": {"host": "0.0.0.0"}})
    unset = {"gateway.auth.token": "HERALD_TOKEN"}
    issues = schema_issues(exc, Reporter(None, {}), unset, [])
    assert [str(issue) for issue in issues] == [
        "gateway.auth.token: required when gateway.host (0.0.0.0) is not a loopback address "
        "(its variable HERALD_TOKEN is not set)"
    ]
