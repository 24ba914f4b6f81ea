"""``.ci/install-packages``: what ``make test`` does about the Debian packages it needs.

The suite runs the real bubblewrap, chromium and PostgreSQL. On a machine where one is missing
and cannot be installed (no apt-get here, or not root), ``make test`` must stop at once with the
one line that says how, not run into dozens of failing tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "install-packages"


def test_missing_packages_stop_with_one_line_naming_the_install_command(tmp_path: Path) -> None:
    # A PATH with nothing on it: no chromium, no bwrap, no apt-get to install them with.
    done = subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        env={"PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "chromium" in lines[0]
    assert "bubblewrap" in lines[0]
    assert "install as root with: apt-get install" in lines[0]


def test_the_makefile_stops_before_pytest_when_the_packages_are_missing() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "pytest: $(STAMP) packages" in makefile
    # The target fails when the script does: no `|| echo` that lets the tests run anyway.
    recipe = makefile.split("\npackages:\n", 1)[1].split("\n\n", 1)[0]
    assert recipe.strip() == "@bash .ci/install-packages"


def test_ci_only_calls_make_test() -> None:
    commands = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert commands[-1] == "make test"
    assert not any("apt-get" in line or "install" in line for line in commands)
