"""Issue 6's attack suite, part 2: the pipe to the host. A script reaches the runtime's Channel
(sys.modules['_nexus_rt']._channel, or a frame walk: see test_attacks_escape.py) or simply the
pipe's fd numbers, and speaks to the host as it likes: forged calls (to run_code, to tools that
do not exist, around the gates), huge arguments, garbage, a fake "done" and carrying on, closing
the pipe. Whatever it sends is untrusted: the host must refuse what is not allowed, put every
call it answers through the gates, end the run with a clear error and never wait past the
timeout. test_protocol.py plays the same games with a fake child; these come from a real script
in the real sandbox.

Each of these once found the host falling short (calls in flight holding run_code past its
deadline, forged calls piling up in host memory, result limits enforced only in the child,
deeply nested JSON, a scratch folder leaked by a script still writing): they stay as the
guard against those coming back.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from attack_helpers import LIMIT, NAP_STILL_RUNNING, Range, stopped_calls, wait_until
from proc_helpers import rss_growth

from nexus_tool_code_exec.host.runner import MAX_CALLS_PAST_LIMIT

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
              pytest.mark.usefixtures("unharmed")]


#: the runtime's channel and the pipe's fds, reached without a dunder
REACH = """\
import json, tools, typing

sys = typing.sys
os = sys.modules["os"]
channel = sys.modules["_nexus_rt"]._channel


def raw_call(name, args, rid=4242):
    \"\"\"A call written straight onto the pipe, the reply read straight off it.\"\"\"
    os.write(channel.wfd, (json.dumps({"t": "call", "id": rid, "name": name, "args": args}) + "\\n").encode())
    data = b""
    while not data.endswith(b"\\n"):
        sys.modules["select"].select([channel.rfd], [], [])  # the runtime's end is non-blocking
        data += os.read(channel.rfd, 1 << 20)
    return json.loads(data)


"""


def inner_calls(rng: Range) -> tuple[list[str], list[str]]:
    """The names of the inner calls the gates saw, and of those whose handler ran."""
    gated = [c.name for c in rng.watch.gated if c.parent_call_id is not None]
    invoked = [c.name for c in rng.watch.invoked if c.parent_call_id is not None]
    return gated, invoked


def test_forged_calls_meet_the_same_refusals_and_gates_as_real_ones(rng: Range) -> None:
    """Through the Channel object and raw on the pipe: run_code and unknown tools are refused
    without invoking anything, shell is vetoed by the range's gate, the file tools keep to the
    workspace, a bad argument fails validation. Nothing reaches a handler around the gates."""
    script = REACH + f"""\
def run(ctx):
    found = {{}}
    forged = {{
        "run_code": {{"script": "def run(ctx):\\n    return open({rng.secret_path!r}).read()\\n"}},
        "no_such_tool": {{}},
        "shell": {{"command": "cat {rng.secret_path}; touch {rng.outside}"}},
        "bash": {{"command": "env"}},
        "read": {{"path": {rng.secret_path!r}}},
        "write": {{"path": {rng.outside!r}, "content": "pwned"}},
        "echo": {{"text": 5}},
    }}
    for name, args in forged.items():
        found[name] = channel.request({{"t": "call", "name": name, "args": args}})["result"]
    found["raw_run_code"] = raw_call("run_code", forged["run_code"])["result"]
    found["raw_read"] = raw_call("read", {{"path": "../" * 12 + {rng.secret_path!r}.lstrip("/")}})["result"]
    found["raw_echo"] = raw_call("echo", {{"text": "through the gates"}}, rid=-7)
    return found
"""
    result = rng.run(script)
    found = result.output_structured["result"]
    for name in ("run_code", "no_such_tool", "raw_run_code"):
        tool = name.removeprefix("raw_")
        assert (found[name]["error"], found[name]["error_kind"]) == (f"unknown tool: {tool!r}", "unknown_tool")
    for name in ("shell", "bash"):
        assert found[name]["error_kind"] == "vetoed" and "no shell for scripts on the range" in found[name]["error"]
    for name in ("read", "write", "raw_read"):
        assert found[name]["error"] and "outside the workspace" in found[name]["error"], found[name]
    assert found["echo"]["error_kind"] == "invalid_arguments"
    assert found["raw_echo"]["id"] == -7 and found["raw_echo"]["result"]["output"] == "through the gates"
    gated, invoked = inner_calls(rng)
    # unknown names never reach a gate; every handler that ran was gated first
    assert sorted(gated) == ["bash", "echo", "echo", "read", "read", "shell", "write"]
    assert sorted(invoked) == ["echo", "read", "read", "write"]
    # but every answer, the refusals of unbound names included, reached the result observers:
    # an audit sees the forged calls it most wants to see
    with rng.watch.lock:
        audited = sorted(r.name for r in rng.watch.results if r.name != "run_code")
    assert audited == sorted(["no_such_tool", "shell", "bash", "read", "write", "echo", "read", "echo"])
    refusals = [r for r in rng.watch.results if r.error_kind == "unknown_tool"]
    assert sorted(r.name for r in refusals) == ["no_such_tool", "run_code", "run_code"]


def test_one_call_with_huge_arguments(rng: Range) -> None:
    """A 24 MiB argument (the host's message limit is 32 MiB): answered, or refused with a clear
    error; the host copes either way and the run ends normally."""
    script = REACH + """\
def run(ctx):
    big = "x" * (24 << 20)
    reply = channel.request({"t": "call", "name": "echo", "args": {"text": big}})
    result = reply["result"]
    return {"error": result.get("error"), "echoed": len(result.get("output") or "")}
"""
    result = rng.run(script)
    assert result.output_structured == {"result": {"error": None, "echoed": 24 << 20}}, result.error


def test_a_fake_done_ends_the_run_and_the_script_with_it(rng: Range) -> None:
    """The script says it is done, then carries on (trying to write outside and to signal the
    host every millisecond): the host takes the claim (the script's own result is the script's
    to give), ends the run at once and kills the process; nothing it tried afterwards lands."""
    script = REACH + f"""\
def run(ctx):
    channel.send({{"t": "done", "result": json.dumps("forged, but mine to forge")}})
    while True:
        for attempt in (lambda: open({rng.outside!r}, "w"), lambda: os.kill({rng.host_pid}, 10)):
            try:
                attempt()
            except OSError:
                pass
"""
    result = rng.run(script)
    # the script never stops by itself: a host that waited for it would answer "timed out"
    assert result.output_structured == {"result": "forged, but mine to forge"}


@pytest.mark.parametrize(("write", "violation"), [
    ("b'garbage\\n'", "a line that is not JSON"),
    ("b'[1, 2, 3]\\n'", "a message that is not an object"),
    ("b'{\"t\": \"exec\", \"code\": \"import os\"}\\n'", "an unknown message type 'exec'"),
    ("b'{\"t\": \"call\", \"id\": \"1\", \"name\": \"echo\", \"args\": {}}\\n'",
     "a call needs an integer id, a tool name and an arguments object"),
    ("b'\"' + b'x' * (40 << 20)", "a message longer than the limit"),
], ids=["garbage", "not-an-object", "unknown-type", "string-id", "over-long-line"])
def test_garbage_on_the_pipe_stops_the_run_at_once(rng: Range, write: str, violation: str) -> None:
    script = REACH + f"""\
def run(ctx):
    print("about to break the protocol")
    data = {write}
    while data:
        data = data[os.write(channel.wfd, data):]
    while True:
        pass
"""
    result = rng.run(script)
    # (it spins forever after: only the host's stop, not the timeout, gives this error)
    assert result.error == f"runtime error: the script's process broke the protocol ({violation}) and was stopped"


@pytest.mark.parametrize("closing", ["both", "to_host", "from_host", "dup2_devnull"])
def test_closing_the_pipe_ends_the_run_promptly_with_a_clear_error(rng: Range, closing: str) -> None:
    """The script closes its ends of the pipe (or points them at /dev/null) and spins: the host
    sees the end of the pipe and stops the process, well before the timeout."""
    action = {
        "both": "os.close(channel.rfd); os.close(channel.wfd)",
        "to_host": "os.close(channel.wfd)",
        "from_host": "os.close(channel.rfd); tools.echo(text='anyone there?')",
        "dup2_devnull": "null = os.open('/dev/null', os.O_RDWR); os.dup2(null, channel.wfd); os.dup2(null, channel.rfd)",
    }[closing]
    script = REACH + f"""\
def run(ctx):
    print("closing")
    {action}
    while True:
        pass
"""
    result = rng.run(script)
    # (it spins forever after: a host that did not see the pipe's end would answer "timed out")
    if closing == "from_host":
        # the call cannot read its answer: the script's own error, reported on the pipe it kept
        line = script.splitlines().index(f"    {action}") + 1
        assert result.error == f"runtime error: line {line}: OSError: Bad file descriptor"
    else:
        assert result.error == "runtime error: the script's process was killed by SIGKILL"


def test_a_flood_of_calls_it_never_reads_the_answers_to_is_cut_at_the_timeout(rng: Range) -> None:
    """Thousands of calls, past max_tool_calls, without reading one answer: the host's writes
    back fill the pipe and block; the timeout still ends the run on time, and the host's writer
    is freed when the process dies. Where the pipe holds the answers to more than max_tool_calls
    + MAX_CALLS_PAST_LIMIT calls, the host stops the run first (issue 11: refusals are bounded)."""
    script = REACH + """\
def run(ctx):
    line = (json.dumps({"t": "call", "id": 1, "name": "no_such_tool", "args": {}}) + "\\n").encode()
    for _ in range(5000):
        os.write(channel.wfd, line)
    while True:
        pass
"""
    result = rng.run(script, timeout=LIMIT)
    ends = (f"script timed out after {LIMIT}s",
            f"tool call limit exceeded: the script went on calling after its limit of 1000 calls "
            f"({MAX_CALLS_PAST_LIMIT} more were refused); it was stopped")
    assert result.error is not None
    # and its process is gone: `unharmed`. On a busy machine the end can come while the host is
    # answering one of the calls it took just before: the error then says so after the reason
    first = next((e for e in ends if result.error.startswith(e)), None)
    assert first is not None, result.error
    rest = result.error[len(first):]
    assert rest == "" or (rest.startswith("; ") and "still running and was stopped: no_such_tool" in rest), rest


def test_answers_it_never_reads_do_not_hold_the_host_past_the_timeout(rng: Range) -> None:
    """Calls whose (big) answers fill the pipe, then "done", then a busy loop. A sequential call
    is answered on the thread that reads the child (no thread hop per call), so a child that
    stops reading its answers holds that thread: the run is stopped at its timeout, and the
    blocked write freed when the process is killed."""
    script = REACH + """\
def run(ctx):
    for i in range(8):
        channel.send({"t": "call", "id": 100 + i, "name": "echo", "args": {"text": "y" * (1 << 20)}})
    typing.sys.modules["time"].sleep(0.3)  # let the answers pile up in the pipe
    channel.send({"t": "done", "result": "1"})
    while True:
        pass
"""
    result = rng.run(script, timeout=LIMIT)
    assert result.output_structured == {"result": 1} or result.error == f"script timed out after {LIMIT}s"


# -- where the host once trusted the child too far (see the module docstring) ------------------


@pytest.mark.parametrize("how", ["thread", "forged"])
def test_a_call_left_in_flight_does_not_hold_the_host_past_the_timeout(rng: Range, how: str) -> None:
    body = {
        "thread": "sys.modules['threading'].Thread(target=lambda: tools.nap(s=60), daemon=True).start()",
        "forged": "channel.send({'t': 'call', 'id': 99, 'name': 'nap', 'args': {'s': 60}})",
    }[how]
    script = REACH + f"""\
def run(ctx):
    {body}
    sys.modules["time"].sleep(0.3)  # the call is in the host's hands
    return "returned while a call is in flight"
"""
    # the slow tool sleeps until the test ends (or 60 s): a run that waited for it would answer
    # only once it returned
    result = rng.run(script, timeout=LIMIT)
    assert rng.nap.entered.is_set(), "the slow call never reached the tool"
    assert not rng.nap.returned.is_set(), "run_code waited for the call in flight"
    # a sequential call is answered on the reading thread, so the "done" behind it is read only
    # when the call ends: such a script gets its timeout, never a run_code held past it
    # either way the run's end cancelled the call it left behind, waited STOP_GRACE, and says so
    if result.error is None:
        assert result.output_structured == {"result": "returned while a call is in flight"}
        assert result.output.endswith(f"(1 inner call was still running and was stopped: {NAP_STILL_RUNNING})")
    else:
        assert stopped_calls(result.error, f"script timed out after {LIMIT}s") == [NAP_STILL_RUNNING]


def test_huge_forged_calls_do_not_pile_up_in_the_host(rng: Range) -> None:
    script = REACH + """\
def run(ctx):
    line = b'{"t":"call","id":1,"name":"no_such_tool","args":{"a":"' + b"x" * (16 << 20) + b'"}}\\n'
    for _ in range(16):
        view = memoryview(line)
        while view:
            view = view[os.write(channel.wfd, view):]
    return "sent"
"""
    result, grew = rss_growth(lambda: rng.run(script))
    session = Path(rng.nx.config.session_dir) / "plugins" / "nexus.tool.code_exec" / result.id
    persisted = sum(p.stat().st_size for p in session.rglob("*")) if session.exists() else 0
    shutil.rmtree(session, ignore_errors=True)  # 256 MiB of x's
    sent = 16 * (16 << 20)
    assert grew < sent // 2 and persisted < sent // 8, (
        f"{sent >> 20} MiB of forged arguments: the host grew by {grew >> 20} MiB and kept "
        f"{persisted >> 20} MiB on disk")


@pytest.mark.parametrize("final", ["done", "error"])
def test_a_forged_final_message_cannot_exceed_the_result_limit(rng: Range, final: str) -> None:
    message = {
        "done": '{"t": "done", "result": json.dumps("x" * (8 << 20))}',
        "error": '{"t": "error", "kind": "runtime", "message": "x" * (8 << 20)}',
    }[final]
    script = REACH + f"""\
def run(ctx):
    channel.send({message})
    while True:
        pass
"""
    result = rng.run(script)
    text = (result.output or "") + (result.error or "")
    assert len(text) <= 2 << 20, f"run_code gave {len(text) >> 20} MiB past a 1 MiB max_result_bytes"
    if final == "done":  # the same words as when the child itself finds its result too large
        assert result.error == (f"result is not JSON-serializable: the result is too large: {(8 << 20) + 2} "
                                f"bytes (the limit is {1 << 20})")
    else:
        assert result.error is not None and result.error.startswith("runtime error: xxx")
        assert result.error.endswith(f"... ({len('runtime error: ') + (8 << 20)} characters in all)")


@pytest.mark.parametrize("where", ["call", "done"])
def test_deeply_nested_json_from_the_child_is_a_clear_error(rng: Range, where: str) -> None:
    line = {
        "call": "b'{\"t\":\"call\",\"id\":1,\"name\":\"echo\",\"args\":{\"text\":' + b'[' * 100000 + b']' * 100000 + b'}}\\n'",
        "done": "(json.dumps({'t': 'done', 'result': '[' * 100000 + ']' * 100000}) + '\\n').encode()",
    }[where]
    script = REACH + f"""\
def run(ctx):
    os.write(channel.wfd, {line})
    while True:
        pass
"""
    result = rng.run(script)
    # (it spins forever after: only the host's stop gives these errors, not the timeout)
    assert result.error == {
        "call": "runtime error: the script's process broke the protocol (a line that is not JSON) and was stopped",
        "done": "result is not JSON-serializable: the script's process sent invalid JSON",
    }[where]
    session = Path(rng.nx.config.session_dir) / "plugins" / "nexus.tool.code_exec" / result.id
    assert (session / "error.txt").exists()


def test_a_script_that_keeps_writing_after_done_leaves_no_scratch_folder(rng: Range) -> None:
    script = """\
import typing

def run(ctx):
    os, threading = typing.sys.modules["os"], typing.sys.modules["threading"]
    for i in range(200):
        open("pre%d" % i, "w").close()

    def scribble(k):
        n = 0
        while True:
            n += 1
            try:
                open("t%d_%d" % (k, n), "w").close()
            except OSError:
                pass

    for k in range(8):
        threading.Thread(target=scribble, args=(k,), daemon=True).start()
    return "bye"
"""
    leaked: list[str] = []
    for _ in range(40):  # racy by nature: stop at the first folder left behind
        before = len(rng.launched)
        result = rng.run(script)
        assert result.output_structured == {"result": "bye"}
        # removed once the zygote has reaped the child (the host is told, then removes it)
        leaked = [s for _, s in rng.launched[before:]
                  if not wait_until(lambda s=s: not os.path.exists(s), within=3.0)]
        if leaked:
            break
    contents = {s: sorted(os.listdir(s))[:3] for s in leaked}
    for path in leaked:  # ours to clean, so the range's own check judges the rest
        shutil.rmtree(path, ignore_errors=True)
    assert not leaked, f"scratch folders left with the script's files in them: {contents}"


def test_the_same_nexus_still_runs_an_ordinary_script_after_the_attacks(rng: Range) -> None:
    result = rng.run("import tools\n\ndef run(ctx):\n    return tools.echo(text='still here').output\n")
    assert result.output_structured == {"result": "still here"}
    assert result.output == "still here"  # the text a model reads (issue 14.8)
