"""No file of the repository cites the design document Herald was built from: it is not part
of the repository, so a reader could not follow the reference."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITATION = "DESIGN " + "§"  # split, so this file does not cite it itself


def test_no_tracked_file_cites_the_design_document() -> None:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    citing = []
    for name in listed:
        path = ROOT / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        citing += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if CITATION in line]
    assert citing == []
