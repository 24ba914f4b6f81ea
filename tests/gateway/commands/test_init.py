"""``herald init``: a commented config and the demo script, where the lookup finds them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gateway.cli import main

REPO = Path(__file__).resolve().parents[3]


def test_the_packaged_example_is_the_repositorys() -> None:
    packaged = REPO / "gateway" / "templates" / "herald.example.json5"
    assert packaged.read_bytes() == (REPO / "config" / "herald.json5").read_bytes()


def test_init_writes_a_config_the_lookup_finds_and_never_overwrites_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HERALD_CONFIG", raising=False)
    monkeypatch.setenv("HERALD_GATEWAY__STATE_DIR", str(tmp_path / "state"))
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    config, script = work / "herald.json5", work / "demo-script.json5"
    assert f"wrote {config} and {script}" in out
    assert "then `herald run`" in out
    assert config.read_bytes() == (REPO / "config" / "herald.json5").read_bytes()
    assert script.read_bytes() == (REPO / "config" / "demo-script.json5").read_bytes()
    # `herald config check` without --config finds it and passes every start-up check.
    assert main(["config", "check"]) == 0
    assert f"{config}: OK" in capsys.readouterr().out
    # A second init refuses to overwrite; --force replaces it.
    config.write_text("// mine\n{}\n")
    assert main(["init"]) == 1
    assert "exists" in capsys.readouterr().err
    assert config.read_text() == "// mine\n{}\n"
    assert main(["init", "--force"]) == 0
    assert config.read_bytes() == (REPO / "config" / "herald.json5").read_bytes()


def test_init_into_another_folder_says_how_to_start_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    target = tmp_path / "elsewhere" / "deep"
    assert main(["init", "--dir", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"herald run --config {target / 'herald.json5'}" in out
    assert (target / "demo-script.json5").is_file()
    # The check command it prints works as printed (not a bare `herald config check`, which
    # would find no file here and check the embedded defaults instead).
    check = out.split("check it with `", 1)[1].split("`", 1)[0]
    assert check == f"herald config check --config {target / 'herald.json5'}"
    monkeypatch.setenv("HERALD_GATEWAY__STATE_DIR", str(tmp_path / "state"))
    assert main(check.split()[1:]) == 0
    assert f"{target / 'herald.json5'}: OK" in capsys.readouterr().out


def test_the_files_init_writes_in_the_checkout_are_ignored_by_git() -> None:
    for name in ("herald.json5", "herald.toml", "herald.json", "demo-script.json5"):
        ignored = subprocess.run(
            ["git", "check-ignore", "-q", name], cwd=REPO, check=False, timeout=30
        )
        assert ignored.returncode == 0, name


def test_config_path_prints_what_the_lookup_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HERALD_CONFIG", raising=False)
    assert main(["config", "path"]) == 1  # what `make run` then falls back from
    assert "no config file found" in capsys.readouterr().err
    assert main(["init"]) == 0
    capsys.readouterr()
    assert main(["config", "path"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'herald.json5'}\n"
