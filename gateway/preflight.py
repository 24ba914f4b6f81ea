"""What ``herald run`` checks before it creates anything, and ``herald config check`` with it.

Each problem is a :class:`ConfigIssue` naming the file and the key, raised together as one
:class:`ConfigError`, so the process exits 78 (systemd's ``RestartPreventExitStatus``) before
a directory, a database or a socket exists:

- tool policies and ``allowAgents`` name only tools, groups and agents that exist (a typo in
  a ``deny`` list would leave the tool callable);
- the state directory is a directory, or can be made: not a file, not under a file, not on
  a kernel file system such as ``/proc``, its nearest existing parent writable;
- every scripted provider's rules file exists and is valid;
- Herald's MCP endpoint (``mcp.serve.path``, when enabled) does not share its first path
  segment with a route of the gateway (:func:`gateway.api.paths.mcp_path_problem`);
- with ``exec`` allowed and its sandbox on, or a stdio MCP server sandboxed, bubblewrap is
  installed and starts; each sandbox's ``readOnly`` paths exist and hold neither the state
  directory nor the config file; a sandboxed server's program is inside its sandbox.
"""

from __future__ import annotations

import os
import shutil
from difflib import get_close_matches
from pathlib import Path

from gateway.api.paths import mcp_path_problem
from gateway.catalog import build_tools
from gateway.config import LoadedSettings
from gateway.errors import ConfigError, ConfigIssue
from gateway.providers import ScriptError, default_script_path, load_script
from gateway.schema.mcp import McpServerConfig
from gateway.schema.sandbox import SandboxLimits
from gateway.settings import HeraldSettings
from gateway.tools import policy_issues, tools_for_agent
from gateway.tools.sandbox import BWRAP_PACKAGE, SANDBOX_FIX, SYSTEM_DIRS, find_bwrap, probe

#: Kernel file systems: nothing Herald writes belongs there.
KERNEL_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))


def preflight(loaded: LoadedSettings) -> None:
    """Raise :class:`ConfigError` listing every problem that would stop ``herald run``."""
    settings = loaded.settings
    where = str(loaded.path) if loaded.path else None
    issues = [
        *policy_issues(settings, build_tools(settings)),
        *agent_issues(settings),
        *state_dir_issues(settings.gateway.resolved_state_dir()),
        *script_issues(settings, loaded.config_dir),
        *sandbox_issues(settings, loaded.path),
        *api_key_issues(settings),
        *mcp_serve_issues(settings),
    ]
    if issues:
        # At the key's line in the file (or naming the variable or flag that set it).
        placed = [loaded.place(issue) for issue in issues]
        located = [
            issue if issue.file else ConfigIssue(issue.message, file=where, key=issue.key)
            for issue in placed
        ]
        raise ConfigError(located)


def used_providers(settings: HeraldSettings) -> set[str]:
    """The providers an agent's model (or the sub-agents' default model) names."""
    refs = [settings.agent.model, settings.agent.subagents.model]
    refs += [agent.model for agent in settings.routing.agents.values()]
    return {ref.partition("/")[0] for ref in refs if ref}


def api_key_issues(settings: HeraldSettings) -> list[ConfigIssue]:
    """A provider an agent uses that calls its vendor's API without a key: every turn
    would fail (``herald doctor`` fails it too). An unused one is only a note."""
    from gateway.providers import missing_api_key

    issues: list[ConfigIssue] = []
    for name in sorted(used_providers(settings)):
        provider = settings.models.providers.get(name)
        env = missing_api_key(provider) if provider is not None else None
        if env is not None:
            key = f"models.providers.{name}.apiKey"
            issues.append(
                ConfigIssue(
                    f'empty: the vendor\'s API needs a key (e.g. apiKey: "${{{env}}}", '
                    f"with {env} exported)",
                    key=key,
                )
            )
    return issues


def mcp_serve_issues(settings: HeraldSettings) -> list[ConfigIssue]:
    """An enabled MCP endpoint whose path collides with a route of the gateway."""
    serve = settings.mcp.serve
    problem = mcp_path_problem(serve.path) if serve.enabled else None
    return [ConfigIssue(problem, key="mcp.serve.path")] if problem else []


def agent_issues(settings: HeraldSettings) -> list[ConfigIssue]:
    """Unknown agent ids in ``routing.agents.<id>.subagents.allowAgents``."""
    known = sorted(settings.routing.agents)
    issues: list[ConfigIssue] = []
    for agent_id, agent in settings.routing.agents.items():
        for name in agent.subagents.allow_agents:
            if name == "*" or name in settings.routing.agents:
                continue
            close = get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (agents: {', '.join(known)})"
            issues.append(
                ConfigIssue(
                    f"unknown agent {name!r}{hint}",
                    key=f"routing.agents.{agent_id}.subagents.allowAgents",
                )
            )
    return issues


def state_dir_issues(path: Path) -> list[ConfigIssue]:
    """Why ``path`` cannot be Herald's state directory (nothing is created here)."""
    key = "gateway.stateDir"
    absolute = Path(os.path.abspath(path))
    for tree in KERNEL_TREES:
        if absolute == tree or tree in absolute.parents:
            return [ConfigIssue(f"{absolute} is on the kernel's {tree} file system", key=key)]
    if absolute.exists():
        if not absolute.is_dir():
            return [ConfigIssue(f"{absolute} exists and is not a directory", key=key)]
        if not os.access(absolute, os.W_OK | os.X_OK):
            return [ConfigIssue(f"{absolute} is not writable by this user", key=key)]
        return []
    parent = absolute.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return [ConfigIssue(f"{absolute} cannot be made: {parent} is a file", key=key)]
    if not os.access(parent, os.W_OK | os.X_OK):
        return [ConfigIssue(f"{absolute} cannot be made: {parent} is not writable", key=key)]
    return []


def script_issues(settings: HeraldSettings, config_dir: Path) -> list[ConfigIssue]:
    """Every scripted provider's rules file: present and valid."""
    issues: list[ConfigIssue] = []
    for name, provider in settings.models.providers.items():
        if provider.api != "scripted":
            continue
        path = (config_dir / provider.script).expanduser() if provider.script else None
        try:
            load_script(path or default_script_path())
        except ScriptError as exc:
            key = f"models.providers.{name}.script"
            issues += [ConfigIssue(str(i), key=key) for i in exc.issues]
    return issues


def exec_allowed(settings: HeraldSettings) -> bool:
    """Whether any agent may call ``exec`` (its sub-agents get no more than it has)."""
    registry = build_tools(settings)
    return any("exec" in tools_for_agent(settings, a, registry) for a in settings.routing.agents)


def sandbox_issues(settings: HeraldSettings, config_file: Path | None) -> list[ConfigIssue]:
    """For ``exec`` (when allowed) and each sandboxed stdio MCP server: ``readOnly`` paths
    that do not exist or would show the state directory or the config file; a server's
    program outside what its sandbox shows; bubblewrap missing or unable to start."""
    issues: list[ConfigIssue] = []
    #: (key, what asks for a sandbox, how to do without, its limits): the bubblewrap checks.
    uses: list[tuple[str, str, str, SandboxLimits]] = []
    sandbox = settings.agent.tools.exec.sandbox
    if sandbox.enabled:
        key = "agent.tools.exec.sandbox"
        issues += _readonly_issues(settings, config_file, sandbox, f"{key}.readOnly")
        if exec_allowed(settings):
            why = f"exec is allowed and its sandbox is on ({sandbox.mode!r})"
            uses.append((f"{key}.mode", why, 'set mode "off" to run commands unsandboxed', sandbox))
    for name, server in settings.mcp.enabled_servers().items():
        if server.sandbox is None:
            continue
        key = f"mcp.servers.{name}"
        issues += _readonly_issues(settings, config_file, server.sandbox, f"{key}.sandbox.readOnly")
        issues += _program_issues(key, server)
        why = f"MCP server {name!r} runs in a sandbox"
        uses.append((f"{key}.sandbox", why, "set its sandbox to false", server.sandbox))
    if issues or not uses:
        return issues
    if find_bwrap() is None:
        return [
            ConfigIssue(
                f"{why}, but bubblewrap is not installed: install the {BWRAP_PACKAGE} package "
                f"(apt-get install {BWRAP_PACKAGE}), or {without}",
                key=key,
            )
            for key, why, without, _ in uses
        ]
    # Where user namespaces are refused (a hardened unit, a container), every sandboxed
    # program would fail: say so now, once, with the fix.
    key, why, _, limits = uses[0]
    if (complaint := probe(limits)) is not None:
        subject = "exec is allowed" if key.startswith("agent.") else why
        message = f"{subject}, but bubblewrap cannot start a sandbox here: {complaint}"
        return [ConfigIssue(f"{message}; fix: {SANDBOX_FIX}", key=key)]
    return []


def _readonly_issues(
    settings: HeraldSettings, config_file: Path | None, sandbox: SandboxLimits, key: str
) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    hidden = [("the state directory", settings.gateway.resolved_state_dir())]
    if config_file is not None:
        hidden.append(("the config file", config_file.resolve()))
    for raw in sandbox.read_only:
        path = Path(raw)
        if not path.exists():
            issues.append(ConfigIssue(f"{raw} does not exist", key=key))
            continue
        real = path.resolve()
        for what, secret in hidden:
            if real == secret or real in secret.parents:
                issues.append(ConfigIssue(f"{raw} holds {what} ({secret})", key=key))
    return issues


def _program_issues(key: str, server: McpServerConfig) -> list[ConfigIssue]:
    """A sandboxed server's program, and what its path links to, must be where its sandbox
    shows them: the system directories, its readOnly paths, its cwd. A program not found
    at all is left to the start, which reports it as for an unsandboxed server."""
    if server.command is None or server.sandbox is None:
        return []
    found = shutil.which(server.command)
    if found is None:
        return []
    shown = [Path(p) for p in (*SYSTEM_DIRS, *server.sandbox.read_only)]
    if server.cwd:
        shown.append(Path(os.path.expanduser(server.cwd)))
    program = Path(os.path.abspath(found))
    outside = [p for p in (program, program.resolve()) if not _inside(p, shown)]
    if not outside:
        return []
    message = (
        f"{outside[0]} (the server's program) is outside its sandbox, which shows /usr, "
        f"/bin, /lib*, its cwd and its readOnly paths: add {outside[0].parent} to "
        f"{key}.sandbox.readOnly"
    )
    return [ConfigIssue(message, key=f"{key}.command")]


def _inside(path: Path, places: list[Path]) -> bool:
    return any(path.is_relative_to(place) for place in places)
