"""The modes of the folders Herald makes for itself, and how it makes them.

Transcripts, the state database and the locks are private to the account the gateway runs
as, so every folder Herald creates is owner-only (0700). ``mkdir``'s mode is filtered by the
umask, so the mode is set exactly after each folder is made.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

#: The mode of every folder Herald creates (owner only).
DIR_MODE: Final = 0o700


def ensure_dir(path: Path) -> None:
    """Create ``path`` and any missing parents with :data:`DIR_MODE`; existing ones are left
    alone."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        # mkdir's mode is filtered by the umask; the mode is a promise, so set it exactly.
        os.chmod(directory, DIR_MODE)
