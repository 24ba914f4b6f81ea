"""What ``pip install .`` (or ``uv tool install .``) installs: a wheel with everything the
gateway reads at run time — templates, the example config ``herald init`` writes, the demo
script, the web chat's static files — and the ``herald`` command."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_the_wheel_holds_every_file_read_at_run_time(tmp_path: Path) -> None:
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    built = subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    needed = {
        "gateway/templates/herald.example.json5",
        "gateway/templates/demo-script.json5",
        "gateway/templates/announce.md",
        "channels/webchat/static/index.html",
        "channels/webchat/static/app.js",
    }
    assert needed <= names
    for template in (ROOT / "gateway" / "templates").iterdir():
        if template.is_file() and template.suffix in (".md", ".json5"):
            assert f"gateway/templates/{template.name}" in names
    assert "herald = gateway.cli:main" in scripts
