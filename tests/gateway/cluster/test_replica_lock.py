"""Several replicas on one state directory: each holds the lock of its own replica id, so
other ids start and a second process with the same id is refused (exit 75)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway import instance
from gateway.commands.run import replica_lock_name
from gateway.constants import EXIT_TEMPFAIL
from gateway.settings import HeraldSettings
from tests.gateway.daemon_process import daemon_config, free_port, herald


def cluster_config(tmp_path: Path, name: str, pg_url: str, replica_id: str) -> tuple[Path, int]:
    """A config of its own for replica ``replica_id``, on the shared state directory."""
    folder = tmp_path / name
    folder.mkdir()
    port = free_port()
    path = daemon_config(folder, port)
    data = json.loads(path.read_text())
    data["gateway"]["stateDir"] = str(tmp_path / "state")
    data["cluster"] = {"databaseUrl": pg_url, "replicaId": replica_id}
    path.write_text(json.dumps(data))
    return path, port


@pytest.mark.postgres
async def test_two_replicas_share_a_state_directory_and_a_duplicate_id_is_refused(
    tmp_path: Path, pg_url: str
) -> None:
    one, one_port = cluster_config(tmp_path, "one", pg_url, "r1")
    two, two_port = cluster_config(tmp_path, "two", pg_url, "r2")
    again, _ = cluster_config(tmp_path, "again", pg_url, "r1")
    async with (
        herald("run", "--config", str(one), port=one_port) as first,
        herald("run", "--config", str(two), port=two_port) as second,
    ):
        await first.wait_healthy()
        await second.wait_healthy()
        async with herald("run", "--config", str(again)) as duplicate:
            assert await duplicate.wait_exit() == EXIT_TEMPFAIL
        output = "\n".join(duplicate.raw)
        state = tmp_path / "state"
        assert (
            f"herald: replica r1 already running (pid {first.process.pid}) "
            f"on state directory {state}" in output
        )
        assert "Traceback" not in output
    assert (state / "replicas" / "r1.lock").exists()
    assert (state / "replicas" / "r2.lock").exists()


def _settings(replica_id: str, url: str | None = "postgresql://h/db") -> HeraldSettings:
    cluster = {"replicaId": replica_id} | ({"databaseUrl": url} if url else {})
    return HeraldSettings.model_validate({"cluster": cluster})


def test_replica_lock_names_are_safe_file_names_and_keep_ids_apart() -> None:
    assert replica_lock_name(_settings("web-1")) == "web-1"
    odd = replica_lock_name(_settings("Web.1"))
    assert odd is not None
    assert odd != "Web.1"
    assert "/" not in odd
    # A name that is no name is refused with the configuration, database or not.
    with pytest.raises(ValidationError, match=r"cluster\.replicaId"):
        _settings("../Web.1")
    # Ids that differ only in case are two replicas: two lock files.
    assert replica_lock_name(_settings("Web1")) != replica_lock_name(_settings("web1"))
    # Alone on its state directory a gateway keeps the directory's own lock.
    assert replica_lock_name(_settings("web-1", url=None)) is None


def test_a_replica_lock_refuses_only_the_same_replica(tmp_path: Path) -> None:
    r1 = instance.acquire(tmp_path, "r1")
    try:
        r2 = instance.acquire(tmp_path, "r2")
        r2.release()
        with pytest.raises(instance.AlreadyRunningError, match="replica r1 already running"):
            instance.acquire(tmp_path, "r1")
    finally:
        r1.release()
    instance.acquire(tmp_path, "r1").release()
    with pytest.raises(ValueError, match="not a normalised id"):
        instance.acquire(tmp_path, "../escape")
