"""The `nexus.tool.shell` plugin: the `shell` tool (alias `bash`), which runs a shell command in
the workspace and returns its stdout, stderr and exit code.

    plugins:
      nexus.tool.shell:
        timeout_seconds: 60        # default for the `timeout` argument
        max_timeout_seconds: 600   # the most a call may ask for
        max_output_bytes: 32768    # per stream; the middle of longer output is dropped, and marked
        env_allowlist: [PATH, HOME, LANG, "LC_*"]   # host variables the command sees
        env: {PAGER: cat}          # fixed variables for every command

The shell is not a sandbox: only its starting folder is confined to the workspace (and kept out
of the session folder, when a config puts that inside the workspace), and a command can read and
write whatever the host user can, `.git/config` included: gating it is a gate's job (or `Ask`).
There is no `read_only` setting for that reason; a read-only agent leaves this plugin out
(`plugins.blocked: [nexus.tool.shell]`). When a command ends, times out or its call is stopped
(`ctx.cancel`), every process it started is killed, those that called `setsid` too (see _run).

The plugin is `ShellPlugin`, its settings `Settings` (the schema of its config section is
derived from that class). See docs/tool-shell.md.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import attrs
from nexus_core.plugins import Plugin, SettingError, setting

from nexus_core import CallContext, ToolDef, ToolResult, failure, hookimpl

from ._run import Completed, kill_method, run_command

__all__ = ["DEFAULT_ENV_ALLOWLIST", "PLUGIN_ID", "Settings", "ShellPlugin"]

PLUGIN_ID = "nexus.tool.shell"

#: what an approval of a shell call says besides the command (the shell is no sandbox)
APPROVAL_NOTE = ("the shell runs this command as you: it can do anything your user can (read, change or "
                 "delete any of your files, reach the network), not only in the workspace")

#: host environment variables a command sees by default: enough for programs to find themselves
#: and to pick a locale, and no tokens or keys
DEFAULT_ENV_ALLOWLIST = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*",
                         "TERM", "TZ", "TMPDIR")


@attrs.frozen
class Settings:
    """The `plugins.nexus.tool.shell` section; its JSON Schema is derived from this class."""

    timeout_seconds: float = setting(60, exclusiveMinimum=0, description="timeout of a call that gives none")
    max_timeout_seconds: float = setting(600, exclusiveMinimum=0,
                                         description="the largest timeout a call may ask for")
    max_output_bytes: int = setting(32768, minimum=256, description="cap on each of stdout and stderr")
    env_allowlist: tuple[str, ...] = setting(DEFAULT_ENV_ALLOWLIST,
                                             description="names (fnmatch patterns) of host variables passed on")
    env: dict[str, str] = setting(factory=dict,
                                  description="variables set for every command, over the allowed host ones")
    shell: str | None = setting(
        None, description="the shell that runs `<shell> -c <command>` (default: bash, else /bin/sh)")
    aliases: tuple[str, ...] = setting(("bash",), uniqueItems=True,
                                       items={"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
                                       description="more names for the same tool (gates see it as `shell`)")

    def __attrs_post_init__(self) -> None:
        if self.timeout_seconds > self.max_timeout_seconds:
            raise SettingError("timeout_seconds", f"{self.timeout_seconds:g} is more than max_timeout_seconds "
                                                  f"({self.max_timeout_seconds:g})")


OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "exit_code": {"type": ["integer", "null"], "description": "128+N when killed by signal N; null when timed out"},
        "timed_out": {"type": "boolean"},
        "stdout_truncated": {"type": "boolean", "description": "longer than the cap"},
        "stderr_truncated": {"type": "boolean"},
        "killed": {"type": "array", "description": "processes killed when it ended (its shell too unless it "
                                                   "exited)",
                   "items": {"type": "object", "properties": {"pid": {"type": "integer"}, "name": {"type": "string"}},
                             "required": ["pid", "name"], "additionalProperties": False}},
    },
    "required": ["stdout", "stderr", "exit_code", "timed_out", "stdout_truncated", "stderr_truncated", "killed"],
    "additionalProperties": False,
}


def json_number(value: float) -> int | float:
    """A setting's number as the model should read it: 60, not the 60.0 a float setting holds."""
    return int(value) if float(value).is_integer() else value


def input_schema(default_timeout: float, max_timeout: float) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1,
                        "description": "Run by the shell with `-c`: pipes, `&&`, redirects work."},
            "workdir": {"type": "string",
                        "description": "Folder to run in, inside the workspace (default: its root)."},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": json_number(max_timeout),
                        "default": json_number(default_timeout),
                        "description": "Seconds before it and all it started are killed."},
        },
        "required": ["command"],
        "additionalProperties": False,
    }


def description(max_output_bytes: int) -> str:
    return (
        "Run a shell command in the workspace and return its stdout, stderr and exit code.\n"
        "A non-zero exit code is reported in the result, not treated as a failure. stdin is empty, so "
        "interactive programs get end-of-file; pass flags such as --yes instead. When the command ends "
        "or times out, every process it started is killed: background jobs (`cmd &`), even daemons that "
        f"detach with setsid, do not outlive the call. stdout and stderr are each capped at {max_output_bytes} bytes; the middle of longer "
        "output is dropped and marked, so filter it (grep, head, tail) when you expect a lot."
    )


def code_description(max_output_bytes: int) -> str:
    """What a run_code script reads of the shell: the facts of `description` without the advice
    for direct calls (its fields say what comes back)."""
    return (f"Run a shell command in the workspace; a non-zero exit code is no failure. stdin is empty. stdout "
            f"and stderr are capped at {max_output_bytes} bytes each, the middle dropped.")


# -- the pieces a call needs ----------------------------------------------------------------


def find_shell(configured: str | None) -> str:
    """The shell executable: the configured one (a path, or a name looked up on PATH), else bash,
    else /bin/sh, which POSIX guarantees. A configured shell that is not there is a SettingError."""
    if configured:
        found = shutil.which(configured)
        if found is None:
            raise SettingError("shell", f"cannot find {configured!r}")
        return found
    return shutil.which("bash") or "/bin/sh"


def command_env(allowlist: Sequence[str], fixed: Mapping[str, str]) -> dict[str, str]:
    """The environment a command runs with: the allowed host variables, then the fixed ones.
    Built per call, so a host that changes its own environment (PATH, say) is followed."""
    env = {name: value for name, value in os.environ.items()
           if any(fnmatchcase(name, pattern) for pattern in allowlist)}
    env.update(fixed)
    return env


def resolve_workdir(workspace: Path, requested: str | None, session_dir: Path | None = None) -> Path:
    """The real folder `requested` names, which must be inside the workspace and not inside the
    session folder (when a config puts that inside the workspace).

    Resolving symlinks first means `..`, absolute paths and symlinks that lead out are all caught
    by one containment check. Raises ValueError with a message for the model. This only picks
    where a command starts: the command itself can go anywhere the host user can.
    """
    root = Path(os.path.realpath(workspace))
    target = Path(os.path.realpath(root / requested)) if requested else root
    if not target.is_relative_to(root):
        raise ValueError(f"workdir {requested!r} is outside the workspace ({root}); "
                         "commands start inside it")
    if session_dir is not None and target.is_relative_to(os.path.realpath(session_dir)):
        where = f"workdir {requested!r}" if requested else f"the workspace {root}"
        raise ValueError(f"{where} is inside the session folder ({session_dir}), where run records are "
                         "kept; the shell does not start commands there")
    if not target.is_dir():
        raise ValueError(f"workdir {requested!r} is not a folder in the workspace" if requested
                         else f"the workspace {root} is not a folder; create it, or configure another")
    return target


#: how many names a result lists of the processes killed, before it counts the rest
_NAMES_SHOWN = 8


def describe_kill(done: Completed, which: str = "") -> str:
    """What was killed, for the model: `killed 3 processes (bash, sleep, sleep)`; `which` goes
    after the count (`killed 1 process it left running (sleep)`)."""
    if done.kill_note == "process group":
        return "the command's process group was killed"
    count = len(done.killed)
    names = [name for _, name in done.killed[:_NAMES_SHOWN]]
    if count > _NAMES_SHOWN:
        names.append(f"{count - _NAMES_SHOWN} more")
    return f"killed {count} process{'es' if count != 1 else ''}{which}" + (f" ({', '.join(names)})" if names else "")


def _aftermath(done: Completed) -> list[str]:
    """Lines about what could not be killed, or a supervisor that could not do its work."""
    lines = []
    if done.left:
        shown = ", ".join(f"{name} (pid {pid}: {why})" for pid, name, why in done.left[:_NAMES_SHOWN])
        lines.append(f"[could not kill {len(done.left)} process{'es' if len(done.left) != 1 else ''}: {shown}]")
    if done.kill_note not in ("supervisor", "process group"):
        lines.append(f"[warning: {done.kill_note}]")
    return lines


def summarize(done: Completed, timeout: float) -> str:
    """The text the model reads: stdout, then stderr under a heading, then how it ended."""
    parts = []
    if done.stdout:
        parts.append(done.stdout.rstrip("\n"))
    if done.stderr:
        parts.append("[stderr]\n" + done.stderr.rstrip("\n"))
    if done.timed_out:
        parts.append(f"[timed out after {timeout:g} s: {describe_kill(done)}]")
    elif done.signal is not None:
        name = signal.Signals(done.signal).name if done.signal in signal.valid_signals() else str(done.signal)
        parts.append(f"[killed by signal {name}: exit code {done.exit_code}]")
    elif done.exit_code:
        parts.append(f"[exit code {done.exit_code}]")
    if not done.timed_out and not done.stopped and done.killed:
        parts.append(f"[the command ended; {describe_kill(done, ' it left running')}]")
    parts += _aftermath(done)
    return "\n".join(parts) if parts else "[no output]"


def stopped_result(done: Completed, structured: dict[str, Any], reason: str) -> ToolResult:
    """The result of a call stopped by its caller: an error of kind "cancelled", saying what was
    killed, with what the command wrote until then."""
    why = f" ({reason})" if reason else ""
    error = f"stopped: the call was cancelled{why}: {describe_kill(done)}"
    shown = [part for part in (done.stdout.rstrip("\n"), done.stderr and "[stderr]\n" + done.stderr.rstrip("\n"))
             if part]
    output = "\n".join([*shown, f"[{error}]", *_aftermath(done)])
    return ToolResult(id="", name="", output=output, error=error, error_kind="cancelled",
                      output_structured=structured)


def make_handler(settings: Settings, shell: str, workspace: Path,
                 session_dir: Path | None = None) -> Callable[[dict[str, Any], CallContext], ToolResult]:
    """The `shell` handler for one Nexus: a closure over its settings, shell, workspace and
    session folder. It takes the call's context, to stop the command when the call is cancelled
    (`ctx.cancel`)."""
    default_timeout = float(settings.timeout_seconds)
    cap = settings.max_output_bytes

    def shell_handler(arguments: dict[str, Any], ctx: CallContext) -> ToolResult:
        try:
            cwd = resolve_workdir(workspace, arguments.get("workdir"), session_dir)
        except ValueError as exc:
            return failure(str(exc))
        timeout = float(arguments.get("timeout", default_timeout))
        try:
            done = run_command([shell, "-c", arguments["command"]], cwd=cwd,
                               env=command_env(settings.env_allowlist, settings.env),
                               timeout=timeout, max_output_bytes=cap, stop=ctx.cancel)
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the command
            return failure(f"cannot start {shell}: {getattr(exc, 'strerror', None) or exc}")
        structured = {
            "stdout": done.stdout,
            "stderr": done.stderr,
            "exit_code": done.exit_code,
            "timed_out": done.timed_out,
            "stdout_truncated": done.stdout_truncated,
            "stderr_truncated": done.stderr_truncated,
            "killed": [{"pid": pid, "name": name} for pid, name in done.killed],
        }
        if done.stopped:
            return stopped_result(done, structured, ctx.cancel.reason)
        return ToolResult(id="", name="", output=summarize(done, timeout), output_structured=structured)

    return shell_handler


# -- the plugin -----------------------------------------------------------------------------


class ShellPlugin(Plugin[Settings]):
    """The plugin object of one Nexus (the entry point names this class): its settings, the
    shell they name, and the `shell` tool under each of its names."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    def configure(self) -> None:
        self.shell = find_shell(self.settings.shell)

    @hookimpl
    def nexus_doctor(self) -> list[str]:
        """The shell is no sandbox: say where its commands start, and warn when run records are
        within their reach by default."""
        config = self.nexus.config
        root = Path(os.path.realpath(config.workspace))
        session = Path(os.path.realpath(config.session_dir))
        lines = [(f"commands start in the workspace ({root}); the shell is not a sandbox: a command reaches "
                  "whatever the host user can (.git/config too: gate the shell, or Ask)")]
        available, how = kill_method()
        lines.append(f"process tree: {'available' if available else 'unavailable'} here: {how}; on timeout, "
                     "on the call being stopped and when the command ends")
        if session.is_relative_to(root):
            lines.append(f"warning: the session folder ({config.session_dir}) is inside the workspace: the shell "
                         "refuses to start a command there, but a command can cd to it; keep it outside")
        return lines

    @hookimpl
    def nexus_register_tools(self, register: Callable[..., Any]) -> None:
        settings = self.settings
        handler = make_handler(settings, self.shell, self.nexus.config.workspace, self.nexus.config.session_dir)
        schema = input_schema(settings.timeout_seconds, settings.max_timeout_seconds)
        text = description(settings.max_output_bytes)
        # MCP's tool hints: a command can change anything, and reach beyond the machine.
        hints = {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": True}
        # One tool under every name: the registry resolves an alias to this ToolDef, so a gate for
        # `tool.name == "shell"` covers `bash` and any configured alias (docs/writing-a-gate.md).
        register(ToolDef(name="shell", handler=handler, description=text, input_schema=schema,
                         output_schema=OUTPUT_SCHEMA, annotations=hints, takes_context=True,
                         aliases=tuple(settings.aliases), approval_note=APPROVAL_NOTE,
                         code_description=code_description(settings.max_output_bytes)))
