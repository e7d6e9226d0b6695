"""An MCP server for nexus_mcp's tests, on the SDK's `MCPServer`: tools that answer, fail,
crash, hang, return images or nested and recursive results. Runs over stdio, or streamable
HTTP with `--http PORT`.

--fail-if FILE   exit at start (status 3) while FILE exists: a server that fails to start
--hang-if FILE   never finish starting while FILE exists: a start that times out
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from pydantic import BaseModel

# a 1x1 PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


#: a process that ignores SIGTERM and SIGHUP and sleeps (10 minutes at most, should a test leak
#: it); its command line carries STUBBORN, to be found by
STUBBORN = "nexus-test-stubborn"
STUBBORN_CODE = ("import signal, time\n"
                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                 "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
                 "print('ready', flush=True)\n"
                 "time.sleep(600)\n")
#: a daemon's double fork: the middle process prints its child's pid and exits at once, so the
#: child (in a session of its own) is an orphan from the start
DAEMON_CODE = ("import os, sys\n"
               "child = os.fork()\n"
               "if child == 0:\n"
               "    os.setsid()\n"
               "    os.execv(sys.executable, [sys.executable, '-c', sys.argv[1], sys.argv[2]])\n"
               "print('pid', child, flush=True)\n"
               "os._exit(0)\n")


def spawn_stubborn(how: str) -> int:
    """Start a stubborn process that left the server's process group (`setsid`: a session of its
    own; `setpgid`: a group of its own; `daemon`: a double fork, orphaned at once): its pid,
    once it ignores SIGTERM."""
    argv = [sys.executable, "-c", STUBBORN_CODE, STUBBORN]
    if how == "daemon":
        argv = [sys.executable, "-c", DAEMON_CODE, STUBBORN_CODE, STUBBORN]
    options = {"setsid": {"start_new_session": True}, "setpgid": {"process_group": 0}, "daemon": {}}[how]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, **options)  # type: ignore[call-overload]
    assert process.stdout is not None
    pid = process.pid
    lines = [process.stdout.readline().split() for _ in range(2 if how == "daemon" else 1)]
    for line in lines:
        if line[:1] == [b"pid"]:
            pid = int(line[1])
    assert [b"ready"] in lines, lines
    if how == "daemon":
        process.wait()  # the middle process is gone: the stubborn one is an orphan
    return pid


class Point(BaseModel):
    x: int
    y: int


class Segment(BaseModel):
    """A segment: two points (a nested model, listed under $defs) and its length."""

    start: Point
    end: Point
    length: float


class Tree(BaseModel):
    """A tree: its output schema refers to itself."""

    name: str
    children: list[Tree] = []


def build() -> MCPServer:
    server = MCPServer("fixture")

    @server.tool()
    def echo(text: str) -> str:
        """Answer with the text."""
        return text

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def crash() -> str:
        """Exit the server process at once (status 7), mid-call."""
        sys.stderr.write("fixture server: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(7)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Wait, then answer."""
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def fail(message: str) -> str:
        """Fail with the message, as a tool error (isError)."""
        raise ToolError(message)

    @server.tool(structured_output=False)
    def image() -> list[object]:
        """An image and a caption."""
        return ["a red dot", Image(data=PNG, format="png")]

    @server.tool()
    def segment(x1: int, y1: int, x2: int, y2: int) -> Segment:
        """The segment between two points."""
        return Segment(start=Point(x=x1, y=y1), end=Point(x=x2, y=y2),
                       length=((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5)

    @server.tool()
    def tree(depth: int) -> Tree:
        """A chain of nodes `depth` deep."""
        node = Tree(name=f"n{depth}")
        for level in range(depth - 1, -1, -1):
            node = Tree(name=f"n{level}", children=[node])
        return node

    @server.tool()
    def spawn(how: str) -> int:
        """Start a process that ignores SIGTERM and left this server's process group: `setsid`,
        `setpgid` or `daemon` (a double fork). Its pid."""
        return spawn_stubborn(how)

    @server.tool()
    async def linger() -> str:
        """From now on, ignore SIGTERM and do not exit when stdin closes (async: on the main
        thread, where signal handlers are set)."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        threading.Thread(target=time.sleep, args=(600,), daemon=False).start()
        return "lingering"

    @server.tool()
    def env(name: str) -> str:
        """An environment variable of the server process."""
        return os.environ.get(name, "<unset>")

    @server.tool()
    def cwd() -> str:
        """The server's working folder."""
        return os.getcwd()

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """A header of the HTTP request that carried this call."""
        request = ctx.request_context.request
        headers = getattr(request, "headers", None)
        return headers.get(name, "<none>") if headers is not None else "<not http>"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-if")
    parser.add_argument("--hang-if")
    parser.add_argument("--http", type=int)
    args = parser.parse_args()
    print(f"fixture server starting, pid {os.getpid()}", file=sys.stderr, flush=True)
    if args.fail_if and Path(args.fail_if).exists():
        print("fixture server: refusing to start", file=sys.stderr, flush=True)
        sys.exit(3)
    while args.hang_if and Path(args.hang_if).exists():
        time.sleep(0.1)
    server = build()
    if args.http is not None:
        anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=args.http))
    else:
        anyio.run(server.run_stdio_async)


if __name__ == "__main__":
    main()
