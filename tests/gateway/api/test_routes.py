"""The route table against the middlewares and the validation it drives."""

from __future__ import annotations

from gateway.api.paths import is_public
from gateway.api.routes import ROUTES


def test_public_routes_are_the_ones_the_auth_middleware_lets_through() -> None:
    for route in ROUTES:
        assert route.public == is_public(route.path), route.path


def test_operation_ids_and_routes_are_unique() -> None:
    assert len({route.operation_id for route in ROUTES}) == len(ROUTES)
    assert len({(route.method, route.path) for route in ROUTES}) == len(ROUTES)
