"""The `nexus` command line.

Exit status: 0 on success, 1 when the tool or script failed, 2 for bad usage or bad config.
Config comes from `--config FILE`, else `$NEXUS_CONFIG`, else `./nexus.yaml` when it exists.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._config import ConfigError
from ._converter import unstructure
from ._models import CodeExecChunk, ToolCall
from ._nexus import Nexus
from ._plugins import call_for_plugin, describe_exception
from .hookspecs import hookimpl
from .adapters import FORMATS

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad usage: exits 2 with the message."""


def _config_source(args: argparse.Namespace) -> str | None:
    if args.config:
        return str(args.config)
    env = os.environ.get("NEXUS_CONFIG")
    if env:
        return env
    return "nexus.yaml" if Path("nexus.yaml").is_file() else None


def _open(args: argparse.Namespace) -> Nexus:
    nx = Nexus.from_config(_config_source(args), workspace=args.workspace)
    for failure in nx.failures:
        print(f"nexus: warning: plugin {failure.name!r} failed ({failure.phase}): {failure.error}", file=sys.stderr)
    return nx


class _StderrErrors(logging.Handler):
    """Errors the library logs (an observer or a shutdown that raised) on stderr. Warnings about
    failed plugins are not repeated: `_open` reports those itself."""

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


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


# -- commands -------------------------------------------------------------------------------


def cmd_tools(nx: Nexus, args: argparse.Namespace) -> int:
    tools = nx.tools()
    if args.json:
        print(json.dumps(unstructure(tools), indent=2))
        return EXIT_OK
    if not tools:
        print("no tools registered (nexus plugins shows what is installed)")
        return EXIT_OK
    width = max(len(t.name) for t in tools)
    for t in tools:
        print(f"{t.name:<{width}}  {t.plugin or '(host)':<22}  {_first_line(t.description)}")
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


def print_result(result: Any, as_json: bool) -> int:
    if as_json:
        print(json.dumps(unstructure(result), indent=2, ensure_ascii=False))
    elif result.is_error:
        print(f"error: {result.error}", file=sys.stderr)
    else:
        out = result.output
        print(out, end="" if out.endswith("\n") else "\n")
    return EXIT_FAILED if result.is_error else EXIT_OK


def cmd_call(nx: Nexus, args: argparse.Namespace) -> int:
    arguments = _parse_arguments(args.args_json)
    result = nx.invoke(args.tool, arguments)
    return print_result(result, args.json)


def cmd_plugins(nx: Nexus, args: argparse.Namespace) -> int:
    infos = nx.plugins()
    if args.json:
        print(json.dumps(unstructure(infos), indent=2))
        return EXIT_OK
    for info in infos:
        dist = f"{info.distribution} {info.version}" if info.distribution else "(registered by the host)"
        print(f"{info.name}  [{info.status}]  {dist}")
        if info.tools:
            print(f"    tools: {', '.join(info.tools)}")
        if args.verbose and info.hooks:
            print(f"    hooks: {', '.join(info.hooks)}")
        if info.error:
            print(f"    error: {info.error}")
    if args.verbose:
        for failure in nx.failures:
            print(f"\n--- {failure.name} ({failure.phase}) ---\n{failure.detail}")
    return EXIT_OK


def cmd_schemas(nx: Nexus, args: argparse.Namespace) -> int:
    print(json.dumps(nx.schemas(args.format), indent=2, ensure_ascii=False))
    return EXIT_OK


def cmd_skills(nx: Nexus, args: argparse.Namespace) -> int:
    from .skills import skill_set

    skills = skill_set(nx)
    found, problems = skills.all(), skills.problems
    for problem in problems:
        print(f"nexus: broken skill: {problem}", file=sys.stderr)
    if args.json:
        print(json.dumps({"skills": [{"name": s.name, "description": s.description, "path": s.path}
                                     for s in found],
                          "problems": unstructure(problems)}, indent=2, ensure_ascii=False))
        return EXIT_OK
    if not found:
        folders = ", ".join(str(f) for f in skills.folders) or "(none configured)"
        print(f"no skills found in: {folders}")
        return EXIT_OK
    width = max(len(s.name) for s in found)
    for s in found:
        print(f"{s.name:<{width}}  {_first_line(s.description)}  ({s.path})")
    return EXIT_OK


def cmd_run(nx: Nexus, args: argparse.Namespace) -> int:
    """Run a script through run_code: its output streamed live, the result JSON printed last."""
    if nx.tool("run_code") is None:
        raise UsageError("run_code is not available: install nexus-rt-tool-code-exec (or activate "
                         "nexus.tool.code_exec in plugins.active)")
    try:
        script = sys.stdin.read() if str(args.script) == "-" else Path(args.script).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {args.script}: {exc.strerror or exc}") from None
    call = ToolCall(name="run_code", arguments={"script": script})

    class LiveOutput:
        @hookimpl
        def nexus_code_exec_stdout(self, chunk: CodeExecChunk) -> None:
            if chunk.call_id == call.id and chunk.data:
                stream = sys.stderr if chunk.stream == "stderr" else sys.stdout
                stream.write(chunk.data)
                stream.flush()

    printer = LiveOutput()
    name = nx.register(printer, name="nexus.cli.live-output")
    try:
        result = nx.invoke(call)
    finally:
        nx.unregister(name)
    structured = result.output_structured if isinstance(result.output_structured, dict) else {}
    if structured.get("stdout") and not structured["stdout"].endswith("\n"):
        print()
    if structured.get("stdout_truncated"):
        print("nexus: output truncated at max_output_bytes", file=sys.stderr)
    if args.json:
        print(json.dumps(unstructure(result), indent=2, ensure_ascii=False))
    elif result.is_error:
        print(f"error: {result.error}", file=sys.stderr)
    else:
        print(json.dumps(structured.get("result"), indent=2, ensure_ascii=False))
    return EXIT_FAILED if result.is_error else EXIT_OK


def cmd_doctor(nx: Nexus, args: argparse.Namespace) -> int:
    """What this machine gives each plugin: for run_code, each sandbox layer and what a run costs."""
    import platform

    from . import __version__

    print(f"nexus-rt-core {__version__} on Python {platform.python_version()} ({sys.executable})")
    print(f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"workspace: {nx.config.workspace}")
    status = EXIT_OK
    for failure in nx.failures:
        print(f"error: plugin {failure.name} failed ({failure.phase}): {failure.error}")
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
        print(f"\n{plugin_name}:")
        for line in lines:
            print(f"  {line}")
            if line.startswith("error:"):
                status = EXIT_FAILED
    return status


COMMANDS: dict[str, Callable[[Nexus, argparse.Namespace], int]] = {
    "tools": cmd_tools,
    "call": cmd_call,
    "plugins": cmd_plugins,
    "schemas": cmd_schemas,
    "skills": cmd_skills,
    "run": cmd_run,
    "doctor": cmd_doctor,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nexus", description="Nexus: plugins and tools for LLM tool use.")
    parser.add_argument("--config", type=Path, help="a YAML config file (default: $NEXUS_CONFIG or ./nexus.yaml)")
    parser.add_argument("--workspace", type=Path, help="the folder file and shell tools may touch")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("tools", help="list the registered tools")
    p.add_argument("--json", action="store_true", help="print full tool definitions as JSON")

    p = sub.add_parser("call", help="call a tool through the gates and print its output")
    p.add_argument("tool", help="the tool's name")
    p.add_argument("args_json", nargs="?", default="{}", metavar="ARGS_JSON", help="the arguments as a JSON object ('-' reads stdin)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")

    p = sub.add_parser("plugins", help="list plugins: active, inactive, blocked and failed")
    p.add_argument("--json", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true", help="show hooks and failure tracebacks")

    p = sub.add_parser("schemas", help="print the tool schemas in a provider's format")
    p.add_argument("--format", default="openai", choices=FORMATS)

    p = sub.add_parser("skills", help="list the skills found (name, description, folder); broken ones on stderr")
    p.add_argument("--json", action="store_true", help="print skills and problems as JSON")

    p = sub.add_parser("run", help="run a Python script through run_code, streaming its output")
    p.add_argument("script", metavar="SCRIPT.py", help="the script ('-' reads stdin)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON last")

    sub.add_parser("doctor", help="show what this machine gives the plugins (run_code's sandbox layers)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    _log_errors_to_stderr()
    try:
        with _open(args) as nx:
            return COMMANDS[args.command](nx, args)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"nexus: config error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"nexus: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
