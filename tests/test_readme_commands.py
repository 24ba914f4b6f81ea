"""Every command, config snippet and link the README and ``docs/`` show works as written, so
the documentation cannot drift from the code.

- Each ``make run`` line with its variables (fake tokens) passes the checks ``herald run``
  makes before it starts, with the config ``make run`` falls back to.
- Each ``json5`` snippet loads as a config file of its own.
- Each ``herald …`` command (in ``sh`` blocks and in inline code) is one the CLI accepts;
  each ``make …`` names a target of the Makefile; any other program is one of a short list.
- Each relative link names a file that exists, and each ``#anchor`` a heading (or an
  ``id``) in it.
- The "Try it" terminal block runs as written in ``bash``, from a shell whose PATH has no
  ``.venv/bin``, against the gateway ``make run`` started (slow: it installs Herald).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.cli import build_parser
from gateway.config import load_settings
from gateway.preflight import preflight

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")
#: Programs other than make and herald the documentation may show.
OTHER_PROGRAMS = {"export", "systemctl", "cp", "journalctl", "curl", "git", "cd"}
#: Placeholders of inline commands, replaced by a value of their kind before parsing.
PLACEHOLDERS = {
    "<session key>": "agent:main:main",
    "<session>": "agent:main:main",
    "<key|file>": "agent:main:main",
    "<key>": "agent:main:main",
    "<run>": "1a2b3c4d",
    "<name>": "time",
    "<task>": "task",
    "<id>": "job",
}
#: Command groups prose may name without a subcommand ("`herald db` …").
NAMES = [["db"], ["runs", "show"], ["config"], ["sessions"], ["runs"], ["transcripts"]]
INLINE = re.compile(r"`(herald [^`]+)`")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
ANCHOR_ID = re.compile(r'<a id="([^"]+)"></a>')


def text_of(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def blocks(language: str, pages: list[Path] | None = None) -> list[str]:
    return [
        body
        for page in pages or PAGES
        for lang, body in FENCE.findall(text_of(page))
        if lang == language
    ]


def shell_lines(pages: list[Path] | None = None) -> list[str]:
    """Every command line of the ``sh`` blocks, comments dropped."""
    lines = []
    for body in blocks("sh", pages):
        for raw in body.splitlines():
            line = raw.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def command_words(line: str) -> list[str]:
    """The words of ``line`` past ``sudo``, variable assignments and a trailing ``&``."""
    words = shlex.split(line.rstrip("&").strip())
    while words and (words[0] == "sudo" or ASSIGNMENT.match(words[0])):
        words.pop(0)
    return words


def run_lines() -> list[str]:
    return [line for line in shell_lines([ROOT / "README.md"]) if "make run" in line]


def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([a-z][a-z-]*):", makefile, re.MULTILINE)}


def example_config() -> Path:
    """The config ``make run`` falls back to (the Makefile's ``EXAMPLE_CONFIG``)."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(r"^EXAMPLE_CONFIG := (\S+)$", text, re.MULTILINE)
    assert match, "the Makefile names no EXAMPLE_CONFIG"
    return ROOT / match.group(1)


def herald_accepts(words: list[str]) -> str | None:
    """None when the CLI parses ``words`` (``herald`` dropped), else why not."""
    parser = build_parser()
    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
            parser.parse_args(words)
    except SystemExit as exc:
        return None if exc.code == 0 else f"herald {shlex.join(words)}: refused by the parser"
    return None


def test_the_readme_shows_make_run_lines() -> None:
    assert len(run_lines()) >= 4  # the quick start, two providers, Slack and Discord


def test_the_readme_says_first_what_make_run_and_make_test_do() -> None:
    head = "\n".join(text_of(ROOT / "README.md").splitlines()[:12])
    assert "make run" in head
    assert "http://127.0.0.1:8787/" in head
    assert "demo model" in head
    assert "make test" in head


def test_the_readme_is_short_and_has_a_table_of_contents() -> None:
    text = text_of(ROOT / "README.md")
    assert len(text.splitlines()) <= 450
    assert "## Contents" in text


@pytest.mark.parametrize("line", run_lines())
def test_a_make_run_line_of_the_readme_passes_the_start_up_checks(
    line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = shlex.split(line)
    env = {"HOME": str(tmp_path), "HERALD_GATEWAY__STATE_DIR": str(tmp_path / "state")}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[:2] == ["make", "run"], line
    monkeypatch.chdir(ROOT)
    preflight(load_settings(example_config(), environ=env))


@pytest.mark.parametrize("snippet", blocks("json5"))
def test_a_config_snippet_loads(snippet: str, tmp_path: Path) -> None:
    path = tmp_path / "herald.json5"
    # A snippet is a fragment of the file's object, or the whole object.
    whole = snippet.lstrip().startswith("{")
    path.write_text(snippet if whole else "{\n" + snippet + "\n}\n", encoding="utf-8")
    env = {"HOME": str(tmp_path), "HERALD_GATEWAY__STATE_DIR": str(tmp_path / "state")}
    # A `${VAR}` a snippet names is the operator's to set: give each one a value.
    env.update(dict.fromkeys(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", snippet), "set"))
    preflight(load_settings(path, environ=env))


@pytest.mark.parametrize("line", shell_lines())
def test_a_shell_line_runs_a_known_program_as_it_takes_it(line: str) -> None:
    words = command_words(line)
    assert words, line
    program, args = words[0], words[1:]
    if program == "herald":
        assert herald_accepts(args) is None, line
    elif program == "make":
        targets = [a for a in args if not ASSIGNMENT.match(a)]
        assert set(targets) <= make_targets(), line
    else:
        assert program in OTHER_PROGRAMS, line


def inline_commands() -> list[tuple[str, str]]:
    """``herald …`` in inline code, without alternatives (``a|b``) or elisions."""
    found = []
    for page in PAGES:
        for span in INLINE.findall(text_of(page)):
            command = " ".join(span.split())
            if any(mark in command for mark in ("|", "…", "[", "·")):
                continue
            if command.split()[1:] and command.split()[1:] in NAMES:
                continue  # a command group named in prose, not a command
            for placeholder, value in PLACEHOLDERS.items():
                command = command.replace(placeholder, value)
            if "<" not in command:
                found.append((page.name, command))
    return found


def test_there_are_inline_commands_to_check() -> None:
    assert len(inline_commands()) >= 20


@pytest.mark.parametrize(("page", "command"), inline_commands())
def test_an_inline_herald_command_is_one_the_cli_takes(page: str, command: str) -> None:
    assert herald_accepts(shlex.split(command)[1:]) is None, (page, command)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`|\*", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = text_of(page)
    return {slug(h) for h in HEADING.findall(text)} | set(ANCHOR_ID.findall(text))


def links() -> list[tuple[str, str]]:
    return [
        (page.relative_to(ROOT).as_posix(), target)
        for page in PAGES
        for target in LINK.findall(text_of(page))
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


def test_there_are_links_to_check() -> None:
    assert len(links()) >= 20


@pytest.mark.parametrize(("page", "target"), links())
def test_a_relative_link_names_a_file_and_heading_that_exist(page: str, target: str) -> None:
    path, _, anchor = target.partition("#")
    source = ROOT / page
    file = (source.parent / path).resolve() if path else source
    assert file.is_file(), (page, target)
    if anchor:
        assert anchor in anchors(file), (page, target, sorted(anchors(file)))


# -- the "Try it" terminal block, run as written ---------------------------------------------


def try_it_block() -> str:
    """The ``sh`` block of "Try it" that starts with ``make install``."""
    readme = text_of(ROOT / "README.md")
    section = readme.split("## Try it", 1)[1].split("\n## ", 1)[0]
    found = [body for lang, body in FENCE.findall(section) if lang == "sh"]
    assert len(found) == 1, "Try it shows one terminal block"
    assert found[0].startswith("make install")
    return str(found[0])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def plain_path() -> str:
    """A PATH with uv and the system's programs, and no ``.venv/bin``."""
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    return os.pathsep.join([str(Path(uv).parent), "/usr/local/bin", "/usr/bin", "/bin"])


@contextlib.contextmanager
def make_run(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        ["make", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def wait_until_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120  # a hang guard, not a timing assertion
    while time.monotonic() < deadline:
        assert process.poll() is None, "make run exited"
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    raise AssertionError("make run never listened")


@pytest.mark.slow
def test_the_try_it_terminal_block_runs_as_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    # A new shell of this machine's (its certificates, proxies and package mirrors kept),
    # with a home of its own and no virtual environment on its PATH.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HERALD_", "PYTEST", "VIRTUAL_ENV", "PYTHON"))
    }
    env.update(
        HOME=str(home),
        PATH=plain_path(),
        # Where this machine keeps uv's downloads (a new HOME would start an empty cache).
        UV_CACHE_DIR=os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache" / "uv")),
        HERALD_GATEWAY__PORT=str(port),
    )
    assert ".venv" not in env["PATH"]
    with make_run(env) as gateway:
        wait_until_listening(port, gateway)
        script = "set -e\n" + try_it_block()
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    out = done.stdout
    assert done.returncode == 0, (out, done.stderr)
    assert (home / ".local" / "bin" / "herald").exists()
    # status found the gateway make run started, on the config it runs.
    assert "herald: running (pid " in out
    assert f"config     {example_config()}" in out
    # spawn --wait printed the demo sub-agent's result, its task matched whatever its case.
    assert "Notes on the lighthouse:" in out
    assert "I only understand a few phrases" not in out
