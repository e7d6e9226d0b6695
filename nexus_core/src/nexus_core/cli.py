"""The `nexus` command line, on click (as llm and datasette are).

Exit status: 0 on success, 1 when the tool or script failed, 2 for bad usage or bad config.
Config comes from `--config FILE`, else `$NEXUS_CONFIG`, else `./nexus.yaml` when it exists. A
config a tool could have written (one found in, or inside, the working folder, or inside the
workspace it configures) loads only once trusted: `nexus trust FILE`, or `--trust-config` for one
command (`_trust.py` has the rule). An installed agent distribution's command (`acme-agent`, made
by `nexus init`) is this command line with the config it installed, which is trusted and is the
only one read (`run_distribution`; `_distribution.py`).

The core's commands are below; plugins add theirs through `nexus_register_commands(cli)` (called
once, when the command line starts, on each installed plugin's entry-point object). A command
that needs the configured Nexus takes it with `@pass_nexus`. The global options `--config` and
`--workspace` are accepted before the command and after it, by every command, plugins' included.

Start-up stays cheap: this module imports click and the hook markers only; the Nexus, its config
(YAML, JSON Schema) and the tools are imported when a command runs.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import logging
import os
import re
import shutil
import sys
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from ._config import NexusConfig
    from ._distribution import InstalledDistribution
    from ._models import ToolDef, ToolResult
    from ._nexus import Nexus

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DOCS_URL = "docs/index.md in the Nexus repository (docs/cli.md for this command line)"

F = TypeVar("F", bound=Callable[..., Any])


class UsageError(click.UsageError):
    """Bad usage found by a command (not by the parser): exits 2, printing `nexus: <message>`."""

    def show(self, file: Any = None) -> None:
        click.echo(f"nexus: {self.format_message()}", err=True)


# -- the state every command shares ---------------------------------------------------------


class CliState:
    """The global options of one `nexus` invocation, and the Nexus they describe (opened on
    first use by `pass_nexus`, closed when the command ends)."""

    def __init__(self) -> None:
        self.config: Path | None = None
        self.workspace: Path | None = None
        #: `--trust-config`: load the config this once, trusted or not
        self.trust_config = False
        #: plugin id -> settings laid over its config section (a command's own options, such as
        #: `nexus run --timeout`), set before the Nexus is opened
        self.plugin_settings: dict[str, dict[str, Any]] = {}
        #: the installed distribution whose command this is (`acme-agent`), or None for `nexus`
        self.distribution: InstalledDistribution | None = None
        self._nexus: Nexus | None = None

    def config_source(self) -> str | None:
        return self.config_choice()[0]

    def config_choice(self) -> tuple[str | None, bool]:
        """The config file to load, and whether it was found (`./nexus.yaml`) rather than named
        (`--config`, `$NEXUS_CONFIG`). A distribution's command has its installed config."""
        if self.distribution is not None:
            return self.distribution.config, False
        if self.config is not None:
            return str(self.config), False
        env = os.environ.get("NEXUS_CONFIG")
        if env:
            return env, False
        return ("nexus.yaml", True) if Path("nexus.yaml").is_file() else (None, False)

    def session_dir(self) -> Path:
        """The session folder the config and `--workspace` name, read without opening a Nexus
        (no plugin starts): for commands that only read records, such as `nexus runs`. Raises
        ConfigError for bad config, and for a config that needs trust and has none."""
        return Path(self.loaded_config().session_dir)

    def loaded_config(self) -> NexusConfig:
        """The config the global options name, read and checked without opening a Nexus (no
        plugin starts; plugin sections are not checked yet: `NexusConfig.validate_plugin_section`
        checks one against its plugin's schema). For commands that only read or answer records,
        such as `nexus runs` and `nexus approvals`. Raises ConfigError like `session_dir`."""
        if self.distribution is not None:  # installed, so trusted; its relative paths from here
            return _load_checked_config(self.distribution.config, self.workspace, trusted=True, base=Path.cwd())
        source, found = self.config_choice()
        return _load_checked_config(source, self.workspace, trusted=self.trust_config, found=found)

    def open(self, ctx: click.Context) -> Nexus:
        if self._nexus is None:
            if self.distribution is not None:
                self._nexus = self._open_distribution()
            else:
                source, found = self.config_choice()
                self._nexus = open_nexus(source, self.workspace, self.plugin_settings,
                                         trusted=self.trust_config, found=found)
            ctx.call_on_close(self._close)
        return self._nexus

    def _open_distribution(self) -> Nexus:
        """The Nexus of a distribution's command: its installed config, trusted because it is
        installed (read from the package, like its code), relative paths in it taken from the
        working folder. Nothing from the working folder or the environment replaces it, and
        what would have is named on stderr."""
        dist = self.distribution
        assert dist is not None
        if self.config is not None:
            raise UsageError(f"--config {self.config}: {dist.name} runs with the config it installed "
                             f"({dist.config}); `nexus --config FILE` runs with another")
        ignored = []
        if os.environ.get("NEXUS_CONFIG"):
            ignored.append(f"$NEXUS_CONFIG ({os.environ['NEXUS_CONFIG']})")
        if Path("nexus.yaml").is_file():
            ignored.append("./nexus.yaml")
        if ignored:
            click.echo(f"{dist.name}: note: {' and '.join(ignored)} not read: {dist.name} runs with the config "
                       f"it installed ({dist.config})", err=True)
        return open_nexus(dist.config, self.workspace, self.plugin_settings, trusted=True, base=Path.cwd())

    def _close(self) -> None:
        if self._nexus is not None:
            nexus, self._nexus = self._nexus, None
            nexus.close()


def _load_checked_config(config: str | None, workspace: Path | None = None, *, trusted: bool = False,
                        found: bool = False, base: Path | None = None) -> NexusConfig:
    """The `NexusConfig` a command runs with (`--workspace` applied), checked for trust as
    `open_nexus` checks it; no plugin starts. Raises ConfigError for bad config and for a
    config that needs trust and has none, unless `trusted`. `base`: the folder the config's
    relative paths resolve against, instead of its own."""
    from ._config import decode_config, load_config, read_config_bytes

    if config is None:
        cfg = load_config(None)
    else:
        # the bytes checked below are the bytes parsed, never the file read again; parsing runs
        # nothing (plugins start in Nexus(cfg), after the check)
        raw = read_config_bytes(config, config)
        cfg = load_config(config, text=decode_config(raw, config), base=base)
    if workspace is not None:
        cfg.workspace = workspace.resolve()
    if config is not None and not trusted:
        from ._trust import check_trusted, why_untrusted

        reason = why_untrusted(config, cfg.workspace, found)
        if reason is not None:
            check_trusted(config, raw, reason, cfg.workspace)
    return cfg


def open_nexus(config: str | None, workspace: Path | None = None,
               plugin_settings: dict[str, dict[str, Any]] | None = None, *,
               trusted: bool = False, found: bool = False, base: Path | None = None) -> Nexus:
    """The Nexus a command runs with; plugins that failed to load are reported on stderr.
    Raises ConfigError for bad config, and for a config that needs trust and has none (one a
    tool could have written: `found` in the working folder, or inside it or the workspace it
    configures) unless `trusted`; UsageError for a workspace that is not a folder. `base`: the
    folder the config's relative paths resolve against, instead of its own."""
    from ._config import ConfigError
    from ._nexus import Nexus

    cfg = _load_checked_config(config, workspace, trusted=trusted, found=found, base=base)
    for plugin, settings in (plugin_settings or {}).items():
        cfg.plugin_sections[plugin] = {**(cfg.plugin_sections.get(plugin) or {}), **settings}
    if not cfg.workspace.is_dir():
        what = "is not a folder" if cfg.workspace.exists() else "does not exist"
        if workspace is not None:
            raise UsageError(f"--workspace {workspace}: {cfg.workspace} {what}")
        raise ConfigError([cfg.problem(("workspace",), f"workspace: {cfg.workspace} {what}")], cfg.source)
    nx = Nexus(cfg)
    for failure in nx.failures:
        click.echo(f"nexus: warning: plugin {failure.name!r} failed ({failure.phase}): {failure.error}", err=True)
    return nx


def pass_nexus(command: F) -> F:
    """Decorate a command's function to receive the configured `Nexus` as its first argument.
    The Nexus is built from the global options when the command runs, and closed after it; a
    config error exits 2 with every problem listed. For plugins' commands, too."""

    @functools.wraps(command)
    def with_nexus(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        state = ctx.ensure_object(CliState)
        return command(state.open(ctx), *args, **kwargs)

    return with_nexus  # type: ignore[return-value]


def _store_global(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None and value is not False:  # a flag left out, after the command, unsets nothing
        setattr(ctx.ensure_object(CliState), param.name or "", value)
    return value


_TRUST_HELP = ("Load the config for this command even if it is not trusted (one that a tool could have "
               "written: see `nexus trust`).")


def _global_options() -> list[click.Option]:
    return [
        click.Option(["--config"], type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
                     expose_value=False, is_eager=True, callback=_store_global,
                     help="A YAML config file (default: $NEXUS_CONFIG, else ./nexus.yaml when it exists)."),
        click.Option(["--workspace"], type=click.Path(path_type=Path), metavar="DIR",
                     expose_value=False, is_eager=True, callback=_store_global,
                     help="The folder the file and shell tools may touch (overrides the config's)."),
        click.Option(["--trust-config"], is_flag=True, expose_value=False, is_eager=True, callback=_store_global,
                     help=_TRUST_HELP),
    ]


def _with_global_options(command: click.Command) -> click.Command:
    """Let `--config` and `--workspace` follow the command too (`nexus tools --config x.yaml`),
    for subcommands of plugins' groups as well."""
    if getattr(command, "_nexus_globals", False):
        return command
    names = {opt for p in command.params for opt in getattr(p, "opts", [])}
    command.params.extend(o for o in _global_options() if not names & set(o.opts))
    command._nexus_globals = True  # type: ignore[attr-defined]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_global_options(sub)
    return command


class NexusGroup(click.Group):
    """The `nexus` group: plugins' commands added at start, the global options on every command,
    and "did you mean" for a mistyped command."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        return _with_global_options(command) if command is not None else None

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and super().get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"no command {name!r}{hint}; `nexus --help` lists the commands", ctx)
        return super().resolve_command(ctx, args)


def _version() -> str:
    from . import __version__

    return __version__


EPILOG = f"""\b
Examples:
  nexus tools                                  list the tools
  nexus call shell '{{"command": "echo hi"}}'     call one through the gates
  nexus --config agent.yaml plugins            what is installed, and what failed

\b
Documentation: {DOCS_URL}"""


@click.group(cls=NexusGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "-V", "--version", prog_name="nexus",
                      message="%(prog)s (nexus-rt-core) %(version)s")
@click.option("--config", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              expose_value=False, is_eager=True, callback=_store_global,
              help="A YAML config file (default: $NEXUS_CONFIG, else ./nexus.yaml when it exists).")
@click.option("--workspace", type=click.Path(path_type=Path), metavar="DIR",
              expose_value=False, is_eager=True, callback=_store_global,
              help="The folder the file and shell tools may touch (overrides the config's).")
@click.option("--trust-config", is_flag=True, expose_value=False, is_eager=True, callback=_store_global,
              help=_TRUST_HELP)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Nexus: plugins and tools for LLM tool use.

    Every command builds a Nexus from the config and the installed plugins, exactly as Python's
    `Nexus.from_config` does, so a call made here meets the same gates as a model's.
    """
    ctx.ensure_object(CliState)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].rstrip() if text.strip() else ""


def _columns(char: str) -> int:
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 0 if unicodedata.combining(char) else 1


def _fit(line: str, width: int) -> str:
    """`line` cut to `width` terminal columns, ending in "…" where it was cut."""
    if sum(map(_columns, line)) <= width:
        return line
    used, kept = 0, []
    for char in line:
        used += _columns(char)
        if used > width - 1:
            break
        kept.append(char)
    return "".join(kept).rstrip() + "…"


def _terminal_width(whole: bool) -> int | None:
    """The width to cut listing lines to: the terminal's when stdout is one, else None (a pipe,
    a file or `--long` gets every line whole)."""
    if whole or not sys.stdout.isatty():
        return None
    return max(shutil.get_terminal_size().columns, 20)


def _complete_tool_name(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Tab completion of a tool's name: the installed plugins' tools, no config read and no
    process started (see `_completion`)."""
    from ._completion import complete_tool_name

    return complete_tool_name(incomplete)


def _dump(value: Any) -> None:
    from ._converter import unstructure

    click.echo(json.dumps(unstructure(value), indent=2, ensure_ascii=False))


def print_result(result: ToolResult, as_json: bool = False) -> int:
    """Print a tool's result as the CLI does (output on stdout, `error: ...` on stderr, or the
    whole result as JSON) and return the exit status it means."""
    if as_json:
        _dump(result)
    elif result.is_error:
        click.echo(f"error: {result.error}", err=True)
    else:
        out = result.output
        click.echo(out, nl=not out.endswith("\n"))
    return EXIT_FAILED if result.is_error else EXIT_OK


# -- commands -------------------------------------------------------------------------------


def _argument_lines(schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    lines = []
    for name, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type", "any")
        kind = " | ".join(kind) if isinstance(kind, list) else str(kind)
        if "enum" in prop:
            kind = " | ".join(json.dumps(v) for v in prop["enum"])
        facts = ["required"] if name in required else []
        if "default" in prop:
            facts.append(f"default {json.dumps(prop['default'])}")
        head = f"  {name} ({kind}{', ' if facts else ''}{', '.join(facts)})"
        description = (prop.get("description") or "").strip()
        lines.append(head)
        if description:
            lines.extend(f"      {line}" for line in description.splitlines())
    return lines or ["  (none)"]


def _show_tool(tool: ToolDef) -> None:
    click.echo(f"{tool.name}  ({tool.plugin or 'registered by the host'})\n")
    click.echo(tool.description.strip() or "(no description)")
    click.echo("\nArguments:")
    for line in _argument_lines(tool.input_schema or {}):
        click.echo(line)
    if tool.output_schema:
        click.echo("\nResult fields:")
        for line in _argument_lines(tool.output_schema):
            click.echo(line)
    click.echo(f"\nCall it: nexus call {tool.name} '{{...}}'")


def _unknown_tool(nx: Nexus, name: str) -> str:
    close = difflib.get_close_matches(name, [t.name for t in nx.tools()], n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"no tool {name!r}{hint}; `nexus tools` lists the tools"


@cli.command("tools", epilog="""\b
Examples:
  nexus tools              one line per tool, cut to the terminal's width
  nexus tools -l           the same, each line whole
  nexus tools read         the read tool's description and arguments
  nexus tools --json       every definition, schemas included""")
@click.argument("name", required=False, shell_complete=_complete_tool_name)
@click.option("--json", "as_json", is_flag=True, help="Print full tool definitions as JSON.")
@click.option("-l", "--long", "whole", is_flag=True,
              help="Print each line whole (on a terminal, lines are cut to its width).")
@pass_nexus
def cmd_tools(nx: Nexus, name: str | None, as_json: bool, whole: bool) -> int:
    """List the registered tools, or show one: its description, arguments and result fields."""
    if name is not None:
        tool = nx.tool(name)
        if tool is None:
            raise UsageError(_unknown_tool(nx, name))
        if as_json:
            _dump(tool)
        else:
            _show_tool(tool)
        return EXIT_OK
    tools = nx.tools()
    if as_json:
        _dump(tools)
        return EXIT_OK
    if not tools:
        click.echo("no tools registered (nexus plugins shows what is installed)")
        return EXIT_OK
    width = max(len(t.name) for t in tools)
    columns = _terminal_width(whole)
    for t in tools:
        line = f"{t.name:<{width}}  {t.plugin or '(host)':<22}  {_first_line(t.description)}"
        click.echo(line if columns is None else _fit(line, columns))
    return EXIT_OK


def _parse_arguments(text: str) -> dict[str, Any]:
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"ARGS_JSON is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(value, dict):
        raise UsageError(f"ARGS_JSON must be a JSON object, got {type(value).__name__}")
    return value


@cli.command("call", epilog="""\b
Examples:
  nexus call shell '{"command": "ls"}'
  echo '{"path": "README.md"}' | nexus call read -
  nexus call read '{"path": "x"}' --json     the whole result, errors included""")
@click.argument("tool", shell_complete=_complete_tool_name)
@click.argument("args_json", metavar="ARGS_JSON", default="{}")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@pass_nexus
def cmd_call(nx: Nexus, tool: str, args_json: str, as_json: bool) -> int:
    """Call TOOL through the gates and print its output. ARGS_JSON is a JSON object ('-' reads
    stdin; default {}). Exits 1 when the tool fails."""
    arguments = _parse_arguments(args_json)
    result = nx.invoke(tool, arguments)
    status = print_result(result, as_json)
    if result.error_kind == "unknown_tool" and not as_json:
        click.echo("nexus: `nexus tools` lists the tools", err=True)
    return status


@cli.command("plugins", epilog="""\b
Examples:
  nexus plugins            active, inactive, blocked and failed plugins
  nexus plugins -v         with each one's hooks, and failure tracebacks""")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show hooks and failure tracebacks.")
@pass_nexus
def cmd_plugins(nx: Nexus, as_json: bool, verbose: bool) -> int:
    """List plugins: active ones with their tools, then inactive, blocked and failed ones."""
    infos = nx.plugins()
    if as_json:
        _dump(infos)
        return EXIT_OK
    for info in infos:
        dist = f"{info.distribution} {info.version}" if info.distribution else "(registered by the host)"
        click.echo(f"{info.name}  [{info.status}]  {dist}")
        if info.tools:
            click.echo(f"    tools: {', '.join(info.tools)}")
        if info.providers:
            click.echo(f"    model providers: {', '.join(info.providers)}")
        if verbose and info.hooks:
            click.echo(f"    hooks: {', '.join(info.hooks)}")
        if info.error:
            click.echo(f"    error: {info.error}")
    if verbose:
        for failure in nx.failures:
            click.echo(f"\n--- {failure.name} ({failure.phase}) ---\n{failure.detail}")
    return EXIT_OK


@cli.command("schemas", epilog="""\b
Examples:
  nexus schemas                      OpenAI Chat Completions tools
  nexus schemas --format anthropic   Anthropic Messages tools
  nexus schemas --format openai-responses --strict""")
@click.option("--format", "fmt", default="openai", show_default=True, metavar="FORMAT",
              help="openai, openai-responses, anthropic, gemini or mcp.")
@click.option("--strict", is_flag=True, help="OpenAI strict mode (openai and openai-responses only).")
@pass_nexus
def cmd_schemas(nx: Nexus, fmt: str, strict: bool) -> int:
    """Print the tool schemas in an LLM provider's format."""
    from .adapters import FORMATS, StrictSchemaError

    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    options = {"strict": True} if strict else {}
    try:
        schemas = nx.schemas(fmt, **options)
    except StrictSchemaError as exc:
        click.echo(f"nexus: {exc}", err=True)
        return EXIT_FAILED
    except (TypeError, ValueError) as exc:  # an option this format does not have
        raise UsageError(str(exc)) from None
    click.echo(json.dumps(schemas, indent=2, ensure_ascii=False))
    return EXIT_OK


@cli.command("skills", epilog="""\b
Example:
  nexus --config agent.yaml skills""")
@click.option("--json", "as_json", is_flag=True, help="Print skills and problems as JSON.")
@pass_nexus
def cmd_skills(nx: Nexus, as_json: bool) -> int:
    """List the skills found (name, description, folder); broken ones on stderr."""
    from ._converter import unstructure
    from .skills import skill_set

    skills = skill_set(nx)
    found, problems = skills.all(), skills.problems
    for problem in problems:
        click.echo(f"nexus: broken skill: {problem}", err=True)
    if as_json:
        click.echo(json.dumps({"skills": [{"name": s.name, "description": s.description, "path": s.path}
                                          for s in found],
                               "problems": unstructure(problems)}, indent=2, ensure_ascii=False))
        return EXIT_OK
    if not found:
        folders = ", ".join(str(f) for f in skills.folders) or "(none configured)"
        click.echo(f"no skills found in: {folders}")
        return EXIT_OK
    width = max(len(s.name) for s in found)
    for s in found:
        click.echo(f"{s.name:<{width}}  {_first_line(s.description)}  ({s.path})")
    return EXIT_OK


def _protection_lines(nx: Nexus, state: CliState) -> list[str]:
    """What `nexus doctor` says about the core's protections (docs/security.md)."""
    from ._trust import recorded_digest, trust_file, why_untrusted

    source, found = state.config_choice()
    records = trust_file()
    if state.distribution is not None:
        dist = state.distribution
        config = (f"config: {source}: installed with {dist.name} {dist.version}, trusted because it is installed "
                  f"(./nexus.yaml and $NEXUS_CONFIG are not read)")
    elif source is None:
        config = "config: none (the defaults)"
    else:
        reason = why_untrusted(source, nx.config.workspace, found)
        if reason is None:
            config = f"config: {source}: named, outside the workspace and the working folder (needs no trust)"
        elif state.trust_config:
            config = f"config: {source}: loaded with --trust-config, not trusted ({reason})"
        else:
            recorded = recorded_digest(source)
            config = f"config: {source}: trusted (sha256 {recorded[:12] if recorded else '?'}...)"
    lines = [config + "; a config a tool could have written loads only once trusted (nexus trust)",
             f"trusted configs are recorded in {records}"]
    if records.resolve().is_relative_to(nx.config.workspace.resolve()):
        lines.append(f"warning: the record of trusted configs is inside the workspace, where tools write: "
                     f"it vouches for no config there (set $NEXUS_TRUST_FILE to a file outside it)")
    lines.append("approvals: the whole call (long values folded with counts, v shows all), the script and line "
                 "it comes from; only keys typed after the question answer it")
    tty = [name for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr))
           if getattr(stream, "isatty", lambda: False)()]
    lines.append("terminal: control characters, ESC sequences and bidi controls are escaped in what nexus prints "
                 f"to a terminal ({', '.join(tty) + ' here' if tty else 'not here: output goes to a pipe or a file'})")
    aliases = sorted((alias, t.name) for t in nx.tools() for alias in t.aliases)
    named = ", ".join(f"{alias} = {name}" for alias, name in aliases) if aliases else "no aliases here"
    lines.append(f"tool identity: gates see one tool under all its names ({named})")
    return lines


@cli.command("doctor", epilog="""\b
Example:
  nexus doctor      exits 1 when a plugin reports a requirement that is not met""")
@pass_nexus
def cmd_doctor(nx: Nexus) -> int:
    """Show what this machine gives each plugin (run_code: each sandbox layer, and why not)."""
    import platform

    from ._plugins import call_for_plugin, describe_exception

    click.echo(f"nexus-rt-core {_version()} on Python {platform.python_version()} ({sys.executable})")
    click.echo(f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} CPUs")
    click.echo(f"workspace: {nx.config.workspace}")
    click.echo("\nprotections:")
    for line in _protection_lines(nx, click.get_current_context().ensure_object(CliState)):
        click.echo(f"  {line}")
    status = EXIT_OK
    for failure in nx.failures:
        click.echo(f"error: plugin {failure.name} failed ({failure.phase}): {failure.error}")
        status = EXIT_FAILED
    pm = nx.plugin_manager
    for plugin_name, _ in pm.list_name_plugin():
        try:
            reports = call_for_plugin(pm, "nexus_doctor", plugin_name, nexus=nx)
        except Exception as exc:
            reports = [[f"error: its nexus_doctor raised {describe_exception(exc)}"]]
        lines = [str(line) for report in reports for line in report]
        if not lines:
            continue
        click.echo(f"\n{plugin_name}:")
        for line in lines:
            click.echo(f"  {line}")
            if line.startswith("error:"):
                status = EXIT_FAILED
    return status


@cli.command("trust", epilog="""\b
Examples:
  nexus trust                  the config the command line would load (./nexus.yaml here)
  nexus trust agent.yaml       a config named like --config names it
  nexus trust --forget agent.yaml""")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--forget", is_flag=True, help="Take the file out of the trusted configs.")
@click.option("--yes", is_flag=True, help="Record it without asking (on a terminal it asks first).")
@click.pass_context
def cmd_trust(ctx: click.Context, file: str | None, forget: bool, yes: bool) -> int:
    """Trust a config file (default: the one the command line would load): show what it does
    (its plugins, the commands it runs, what it connects to), then record its SHA-256 outside
    the workspace. A config a tool could have written loads only once trusted; a change to the
    file makes it untrusted again."""
    from ._config import decode_config, load_config, read_config_bytes
    from ._trust import digest, forget_trust, record_trust, summary, trust_file

    state = ctx.ensure_object(CliState)
    if file is None and state.distribution is not None:
        raise UsageError(f"{state.distribution.name}'s config needs no trust: it is installed with it; "
                         f"name a FILE to trust one for `nexus --config`")
    shown = file if file is not None else state.config_source()
    if shown is None:
        raise UsageError("no config to trust here: name one (nexus trust FILE), or run it where ./nexus.yaml is")
    if forget:
        if not forget_trust(shown):
            raise UsageError(f"{shown} is not among the trusted configs ({trust_file()})")
        click.echo(f"{shown}: no longer trusted")
        return EXIT_OK
    raw = read_config_bytes(shown, shown)
    text = decode_config(raw, shown)
    cfg = load_config(shown, text=text)  # a config that cannot load is not worth trusting: fix it first
    from ._yaml import load_yaml

    _, data = load_yaml(text)
    click.echo(f"{os.path.abspath(shown)}")
    click.echo(f"  sha256: {digest(raw)}")
    for line in summary(data if isinstance(data, dict) else {}, cfg.workspace):
        click.echo(f"  {line}")
    if not yes and sys.stdin.isatty():
        from .terminal import discard_typed_ahead

        discard_typed_ahead(sys.stdin)  # the answer is typed after reading the above
        if click.prompt("trust it?", default="n", show_default=True).strip().lower() not in ("y", "yes"):
            click.echo("not trusted")
            return EXIT_FAILED
    where = record_trust(shown, raw)
    click.echo(f"trusted (recorded in {where}); a change to the file makes it untrusted again")
    return EXIT_OK


@cli.command("init", epilog="""\b
Examples:
  nexus init acme-agent                          the default plugins, model openai:gpt-4.1
  nexus init acme-agent --model anthropic:claude-sonnet-4-5 --plugin nexus.agent --plugin nexus.tool.file
  nexus init examples/acme-agent --config agent.yaml     ship this config as it is
  pip install --find-links dist ./acme-agent && acme-agent chat""")
@click.argument("path", metavar="NAME")
@click.option("--plugin", "plugins", multiple=True, metavar="ID",
              help="A plugin it runs (repeat it); instead of the default set. The model's provider is added.")
@click.option("--model", metavar="PROVIDER:MODEL", help="The model it uses (default: openai:gpt-4.1).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Ship this config file as it is (its plugins.active chooses the plugins).")
def cmd_init(path: str, plugins: tuple[str, ...], model: str | None, config_file: str | None) -> int:
    """Make an agent distribution: a package folder NAME/ that depends on the chosen plugins and
    ships a config, so that `pip install ./NAME` gives the command NAME, the whole nexus command
    line with that config. NAME may be a path (examples/acme-agent): its last part is the name."""
    from ._distribution import DistributionError, plan_distribution, write_distribution

    try:
        plan = plan_distribution(path, plugins=plugins, model=model, config_file=config_file)
        written = write_distribution(plan)
    except DistributionError as exc:
        raise UsageError(str(exc)) from None
    click.echo(f"wrote {plan.folder}/ ({len(written)} files): the distribution {plan.name}")
    click.echo(f"  depends on: {', '.join(plan.dependencies)}")
    click.echo(f"  runs: {', '.join(plan.plugins)}" + (f"; model {plan.model}" if plan.model else ""))
    click.echo(f"install it: pip install --find-links dist {plan.shown}   (dist: Nexus's wheels, "
               f"./scripts/build-wheels)")
    click.echo(f"then: {plan.name} tools, {plan.name} chat, {plan.name} ask \"...\", {plan.name} mcp serve")
    return EXIT_OK


# -- plugins' commands ----------------------------------------------------------------------


class _StderrErrors(logging.Handler):
    """Errors the library logs (an observer or a shutdown that raised) on stderr. Warnings about
    failed plugins are not repeated: `open_nexus` reports those itself."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.setFormatter(logging.Formatter("nexus: error: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")  # the current stderr, not the one at start
        except Exception:
            self.handleError(record)


def _log_errors_to_stderr() -> None:
    logger = logging.getLogger("nexus_core")
    if not any(isinstance(h, _StderrErrors) for h in logger.handlers):
        logger.addHandler(_StderrErrors())


_commands_added = False


def add_plugin_commands(group: click.Group) -> list[str]:
    """Call `nexus_register_commands(cli=group)` on every installed plugin's entry-point object
    (the environment switches apply). Returns warnings, one per plugin that raised or declares
    the hook where it cannot be called without a Nexus; a plugin that fails to import is left to
    the Nexus, which reports it when it loads."""
    from ._plugins import describe_exception, select_entry_points, static_hookimpl

    warnings = []
    chosen, _ = select_entry_points(None, ())
    # What a plugin prints while it is imported goes to stderr: stdout carries only what the
    # command writes (`nexus call --json` prints JSON there, `nexus mcp serve` its protocol).
    with contextlib.redirect_stdout(sys.stderr):
        for ep in chosen:
            try:
                obj = ep.load()
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                continue
            try:
                hook = static_hookimpl(obj, "nexus_register_commands")
            except TypeError as exc:
                warnings.append(f"plugin {ep.name!r}: {exc}")
                continue
            if hook is None:
                continue
            before = set(group.commands)
            try:
                hook(cli=group)
            except Exception as exc:
                for name in set(group.commands) - before:  # half-added commands would fail later
                    del group.commands[name]
                warnings.append(f"plugin {ep.name!r} raised in nexus_register_commands: {describe_exception(exc)}")
    return warnings


#: set by the shell when it asks for completions (click's `_{PROG}_COMPLETE`; docs/cli.md)
COMPLETE_VAR = "_NEXUS_COMPLETE"


def build_cli() -> click.Group:
    """The `nexus` group with every installed plugin's commands added (once per process)."""
    global _commands_added
    if not _commands_added:
        _commands_added = True
        warnings = add_plugin_commands(cli)
        if not os.environ.get(COMPLETE_VAR):  # a Tab must not print into the person's prompt
            for warning in warnings:
                click.echo(f"nexus: warning: {warning}", err=True)
    return cli


def _quiet_broken_pipe() -> None:
    """Output piped into `head` and cut short: stop quietly, as a Unix tool does. stdout is
    pointed at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _asks_only_for_the_version(args: Sequence[str]) -> bool:
    """`nexus [--config F] [--workspace D] --version` (or `-V`): no plugin's command is needed
    for that."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in ("--version", "-V"):
            return True
        i += 2 if args[i] in ("--config", "--workspace") else 1
    return False


def main(argv: Sequence[str] | None = None, *, distribution: str | None = None) -> int:
    """Run the command line. What any command prints to a terminal (tool output, a model's
    text, a plugin's command) is escaped on the way (`nexus_core.terminal.protect`), so no text
    a tool, a model or a server wrote can drive the terminal; a pipe or a file gets it as it is.
    `distribution`: run as that installed distribution's command (`run_distribution`)."""
    from .terminal import protect

    streams = sys.stdout, sys.stderr
    protected = sys.stdout, sys.stderr = protect(sys.stdout), protect(sys.stderr)
    try:
        return _main(argv, distribution)
    finally:  # put the streams back, unless someone else has since (click, after a broken pipe)
        if (sys.stdout, sys.stderr) == protected:
            sys.stdout, sys.stderr = streams


def _main(argv: Sequence[str] | None, distribution: str | None = None) -> int:
    from ._config import ConfigError

    _log_errors_to_stderr()
    args = list(argv) if argv is not None else sys.argv[1:]
    state = CliState()
    prog, complete_var = "nexus", COMPLETE_VAR
    if distribution is not None:
        from ._distribution import DISTRIBUTIONS_GROUP, DistributionError, find_distribution

        try:
            state.distribution = find_distribution(distribution)
        except DistributionError as exc:
            click.echo(f"{distribution}: {exc}", err=True)
            return EXIT_USAGE
        if state.distribution is None:
            click.echo(f"{distribution}: no installed distribution {distribution!r} (entry point group "
                       f"{DISTRIBUTIONS_GROUP}): install its package again (pip install ...)", err=True)
            return EXIT_USAGE
        if _asks_only_for_the_version(args):
            click.echo(f"{distribution} {state.distribution.version} (nexus-rt-core {_version()})")
            return EXIT_OK
        prog = distribution
        complete_var = "_" + re.sub(r"\W", "_", distribution).upper() + "_COMPLETE"  # click's own rule
    group = cli if _asks_only_for_the_version(args) else build_cli()
    try:
        try:
            result = group.main(args=args, prog_name=prog, complete_var=complete_var, standalone_mode=False,
                                obj=state)
        except click.exceptions.Exit as exc:  # --help, --version
            return int(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            return EXIT_USAGE if isinstance(exc, click.UsageError) else int(exc.exit_code)
        except click.Abort:
            click.echo("", err=True)
            return 130
        except ConfigError as exc:
            for problem in exc.problems:
                click.echo(f"nexus: config error: {problem}", err=True)
            return EXIT_USAGE
        except KeyboardInterrupt:
            return 130
        sys.stdout.flush()
    except BrokenPipeError:  # click handles the ones it sees the same way: quietly, status 1
        _quiet_broken_pipe()
        return EXIT_FAILED
    return int(result) if isinstance(result, int) else EXIT_OK


def run() -> None:
    """The console script's entry point."""
    sys.exit(main())


def run_distribution(name: str) -> None:
    """The console script of an installed agent distribution (`acme-agent`, made by `nexus
    init`): the whole command line with the config the distribution `name` installed (found in
    the entry-point group `nexus.distributions`; docs/distributions.md)."""
    sys.exit(main(distribution=name))


if __name__ == "__main__":  # `python -m nexus_core.cli`: run the importable copy of this module, the
    # one plugins import `pass_nexus` and `CliState` from, not this `__main__` copy
    from nexus_core.cli import run as _run

    _run()


__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "CliState", "UsageError", "cli", "main", "open_nexus", "pass_nexus",
           "print_result", "run", "run_distribution"]
