"""systemd/herald.service: the directives it must carry, and systemd's own verdict on it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import load_settings
from gateway.constants import EXIT_CONFIG
from gateway.settings import GatewayConfig

SYSTEMD_DIR = Path(__file__).resolve().parent.parent / "systemd"
UNIT = SYSTEMD_DIR / "herald.service"
ENV_EXAMPLE = SYSTEMD_DIR / "herald.env.example"

Unit = dict[str, dict[str, list[str]]]


def parse_unit(text: str) -> Unit:
    """Sections → key → every value in order (keys like Environment= may repeat)."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if section is None or not sep:
            raise ValueError(f"not a unit file line: {raw!r}")
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


@pytest.fixture(scope="module")
def service() -> dict[str, list[str]]:
    return parse_unit(UNIT.read_text())["Service"]


def test_parser_reads_repeats_and_continuations() -> None:
    unit = parse_unit("[Service]\n# c\nEnvironment=A=1\nEnvironment=B=2\nExecStart=/x \\\n  --y\n")

    assert unit == {"Service": {"Environment": ["A=1", "B=2"], "ExecStart": ["/x  --y"]}}


PINNED = {
    "Type": "notify",
    "NotifyAccess": "main",
    "ExecStart": "/usr/local/bin/herald run --config /etc/herald/herald.json5",
    "ExecReload": "/bin/kill -HUP $MAINPID",
    "Restart": "on-failure",
    "RestartPreventExitStatus": str(EXIT_CONFIG),
    "WatchdogSec": "30",
    "StateDirectory": "herald",
    "EnvironmentFile": "-/etc/herald/herald.env",
    "DynamicUser": "yes",
    "UMask": "0077",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "NoNewPrivileges": "yes",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    "RestrictNamespaces": "yes",
    "LockPersonality": "yes",
    "MemoryDenyWriteExecute": "yes",
    "SystemCallArchitectures": "native",
    "SystemCallFilter": "@system-service",
    "CapabilityBoundingSet": "",
}


@pytest.mark.parametrize(("key", "value"), PINNED.items(), ids=list(PINNED))
def test_pinned_directive(service: dict[str, list[str]], key: str, value: str) -> None:
    assert service.get(key) == [value]


def test_stop_timeout_outlasts_the_default_drain(service: dict[str, list[str]]) -> None:
    (stop_timeout,) = service["TimeoutStopSec"]
    # A drain that is cut off by SIGKILL loses the runs it was meant to finish.
    assert int(stop_timeout) > GatewayConfig().shutdown_drain_seconds


def test_unit_installs_into_multi_user() -> None:
    unit = parse_unit(UNIT.read_text())

    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    assert unit["Unit"]["After"] == ["network-online.target"]


def test_env_example_names_every_secret_and_no_values() -> None:
    assignments = dict(
        line.split("=", 1)
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    )

    assert set(assignments) == {
        "HERALD_TOKEN",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
        "DISCORD_TOKEN",
        "HERALD_DATABASE_URL",
    }
    # An example must not ship something that looks like a working credential.
    assert all(value == "" for value in assignments.values())


@pytest.fixture
def verifiable_unit(tmp_path: Path) -> Path:
    """A copy of the unit whose ExecStart names a binary that exists on this machine."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this machine (package: systemd)")
    text = UNIT.read_text()
    executable = os.path.realpath(sys.executable)
    copy_text, count = re.subn(
        r"^ExecStart=/usr/local/bin/herald ", f"ExecStart={executable} ", text, flags=re.M
    )
    assert count == 1
    copy = tmp_path / UNIT.name
    copy.write_text(copy_text)
    return copy


def systemd_version() -> int:
    first_line = run_analyze("--version").stdout.splitlines()[0]
    match = re.match(r"systemd (\d+)", first_line)
    assert match is not None, first_line
    return int(match.group(1))


def run_analyze(*args: str) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None
    return subprocess.run([analyze, *args], capture_output=True, text=True, timeout=60, check=False)


def test_systemd_analyze_verify_accepts_the_unit(verifiable_unit: Path) -> None:
    result = run_analyze("verify", os.fspath(verifiable_unit))

    # Unknown keys and bad values are only warnings (exit 0), so read the lines that name
    # our unit; the container may add complaints about units that are not ours.
    ours = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if os.fspath(verifiable_unit) in line or line.startswith(UNIT.name)
    ]
    assert ours == []
    assert result.returncode == 0, result.stderr


def test_systemd_analyze_security_rates_the_sandbox_ok(verifiable_unit: Path) -> None:
    if systemd_version() < 250:
        pytest.skip("systemd-analyze security --offline needs systemd 250 or newer")
    # --threshold is in tenths: fail above an exposure of 2.0 ("OK" in systemd's scale).
    result = run_analyze("security", "--offline=true", "--threshold=20", os.fspath(verifiable_unit))

    assert result.returncode == 0, result.stdout[-2000:] + result.stderr


TEMPLATE = SYSTEMD_DIR / "herald@.service"
CLUSTER_EXAMPLE = SYSTEMD_DIR.parent / "config" / "cluster.json5"
CLUSTER_SECRETS = {
    "HERALD_DATABASE_URL": "postgresql://herald:pw@db.example:5432/herald",
    "HERALD_TOKEN": "t" * 32,
}


def test_the_replica_template_is_the_unit_plus_a_port_and_a_replica_name() -> None:
    unit, template = parse_unit(UNIT.read_text()), parse_unit(TEMPLATE.read_text())
    service, replica = unit["Service"], template["Service"]

    # Everything the single unit sets, the template sets the same (sandbox, restarts,
    # watchdog), so the two cannot drift apart...
    def rest(section: dict[str, list[str]]) -> dict[str, list[str]]:
        return {k: v for k, v in section.items() if k not in ("Environment", "User")}

    assert rest(replica) == rest(service)
    # ...plus each instance's port and replica name, and one user for every instance.
    assert replica["Environment"] == [
        *service["Environment"],
        "HERALD_GATEWAY__PORT=%i",
        "HERALD_CLUSTER__REPLICA_ID=%H-%i",
    ]
    assert replica["User"] == ["herald"]
    assert template["Install"] == unit["Install"]

    def undescribed(section: dict[str, list[str]]) -> dict[str, list[str]]:
        return {k: v for k, v in section.items() if k != "Description"}

    assert undescribed(template["Unit"]) == undescribed(unit["Unit"])


def test_the_template_environment_sets_the_port_and_the_replica_id() -> None:
    environ = {"HERALD_GATEWAY__PORT": "8788", "HERALD_CLUSTER__REPLICA_ID": "host-8788"}
    settings = load_settings(CLUSTER_EXAMPLE, environ={**environ, **CLUSTER_SECRETS}).settings

    assert settings.gateway.port == 8788
    assert settings.cluster.resolved_replica_id() == "host-8788"


def test_systemd_analyze_verify_accepts_an_instance_of_the_template(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed on this machine (package: systemd)")
    executable = os.path.realpath(sys.executable)
    text, count = re.subn(
        r"^ExecStart=/usr/local/bin/herald ",
        f"ExecStart={executable} ",
        TEMPLATE.read_text(),
        flags=re.M,
    )
    assert count == 1
    (tmp_path / TEMPLATE.name).write_text(text)
    instance = tmp_path / "herald@8788.service"
    instance.symlink_to(tmp_path / TEMPLATE.name)

    result = run_analyze("verify", os.fspath(instance))

    ours = [line for line in (result.stdout + result.stderr).splitlines() if "herald@" in line]
    assert ours == []
    assert result.returncode == 0, result.stderr


# -- the one install story: the unit's comment, the README and the binary ExecStart runs --

INSTALL_LINE = re.compile(r"^#\s+(sudo make install .+)$", re.MULTILINE)
#: What ProtectHome=yes hides from the service.
HIDDEN = (Path("/home"), Path("/root"))


def install_line() -> str:
    found = INSTALL_LINE.findall(UNIT.read_text())
    assert len(found) == 1, "the unit's comment shows one install command"
    return str(found[0])


def test_the_unit_and_the_readme_give_the_same_install_line(
    service: dict[str, list[str]],
) -> None:
    line = install_line()
    readme = (SYSTEMD_DIR.parent / "README.md").read_text(encoding="utf-8")
    assert f"\n{line}\n" in readme
    values = dict(word.split("=", 1) for word in shlex.split(line) if "=" in word)
    assert service["ExecStart"][0].split()[0] == f"{values['BIN_DIR']}/herald"


def hidden(path: Path) -> bool:
    return any(path == top or top in path.parents for top in HIDDEN)


@pytest.mark.slow
def test_the_install_line_gives_a_herald_that_starts_with_home_hidden(tmp_path: Path) -> None:
    """The install line, with its directories moved under a scratch root, installs a
    ``herald`` whose environment and interpreter live outside /home and /root, and that
    runs with both hidden (as ``ProtectHome=yes`` does; bubblewrap stands in for systemd)."""
    bwrap = shutil.which("bwrap")
    assert bwrap, "bubblewrap is not installed: apt-get install bubblewrap"
    words = shlex.split(install_line())
    assert words[:3] == ["sudo", "make", "install"]
    values = dict(word.split("=", 1) for word in words[3:])
    root = tmp_path / "root-fs"
    moved = {k: str(root / v.lstrip("/")) if k != "PYTHON" else v for k, v in values.items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERALD_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(
        [str(Path(shutil.which("uv") or Path.home() / ".local/bin/uv").parent), "/usr/bin", "/bin"]
    )
    done = subprocess.run(
        ["make", "install", *(f"{k}={v}" for k, v in moved.items())],
        cwd=SYSTEMD_DIR.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    command = Path(moved["BIN_DIR"]) / "herald"
    assert command.resolve().is_relative_to(Path(moved["TOOL_DIR"]))
    interpreter = Path(command.read_text().splitlines()[0].removeprefix("#!").split()[0])
    assert interpreter.is_relative_to(Path(moved["TOOL_DIR"]))
    assert not hidden(interpreter.resolve()), interpreter.resolve()
    protected = [bwrap, "--ro-bind", "/", "/", "--tmpfs", "/root", "--tmpfs", "/home"]
    protected += ["--dev", "/dev", "--proc", "/proc", "--setenv", "HOME", "/nonexistent"]
    config = SYSTEMD_DIR.parent / "config" / "herald.json5"
    state = tmp_path / "state"  # writable, as StateDirectory= is
    state.mkdir()
    protected += ["--bind", str(state), str(state)]
    protected += ["--setenv", "HERALD_GATEWAY__STATE_DIR", str(state)]
    checked = subprocess.run(
        [*protected, str(command), "config", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"{config}: OK")


EXEC_DROP_IN = SYSTEMD_DIR / "exec-sandbox.conf"


def test_the_exec_drop_in_lifts_only_what_bubblewrap_needs() -> None:
    drop_in = parse_unit(EXEC_DROP_IN.read_text())

    assert drop_in == {
        "Service": {
            "RestrictNamespaces": ["", "user mnt pid ipc uts net"],
            "SystemCallFilter": ["@mount"],
            "RestrictAddressFamilies": ["AF_NETLINK"],
            "ProtectKernelTunables": ["no"],
            "ProtectKernelLogs": ["no"],
        }
    }


def test_the_unit_with_the_exec_drop_in_verifies_and_rates_ok(verifiable_unit: Path) -> None:
    # The drop-in's [Service] lines after the unit's: what systemd makes of the pair.
    verifiable_unit.write_text(verifiable_unit.read_text() + "\n" + EXEC_DROP_IN.read_text())
    verified = run_analyze("verify", os.fspath(verifiable_unit))
    assert verified.returncode == 0, verified.stderr
    if systemd_version() < 250:
        pytest.skip("systemd-analyze security --offline needs systemd 250 or newer")
    # 3.0: user namespaces, @mount and netlink cost 1.2 of exposure; still "OK" on its scale.
    rated = run_analyze("security", "--offline=true", "--threshold=30", os.fspath(verifiable_unit))
    assert rated.returncode == 0, rated.stdout[-2000:] + rated.stderr


def unprivileged_bwrap(*mounts: str) -> subprocess.CompletedProcess[str]:
    """bubblewrap's sandbox started as an unprivileged user (the unit's dynamic user) in a
    mount namespace where ``mounts`` (shell commands) ran first, as systemd's would."""
    from gateway.schema.sandbox import SandboxConfig
    from gateway.tools.sandbox import bwrap_argv

    argv = bwrap_argv(["true"], workdir=Path("/tmp"), config=SandboxConfig(), as_root=False)
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs"]
    script = " && ".join([*mounts, 'exec "$@"'])
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, "sh", *drop, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_read_only_proc_sys_is_what_stops_bubblewrap() -> None:
    """Why the drop-in turns ProtectKernelTunables off: with /proc/sys bound read-only over
    itself, the kernel refuses the sandbox a /proc of its own."""
    if os.geteuid() != 0 or not all(map(shutil.which, ("unshare", "setpriv", "bwrap"))):
        pytest.skip("needs root, unshare, setpriv and bwrap (CI has them)")
    plain = unprivileged_bwrap("true")
    assert plain.returncode == 0, plain.stderr  # the control
    protected = unprivileged_bwrap(
        "mount --bind /proc/sys /proc/sys", "mount -o remount,bind,ro /proc/sys"
    )
    assert protected.returncode != 0
    assert "Can't mount proc" in protected.stderr
