"""The terminal side of `nexus chat` and `nexus ask`: streamed text, one line per tool call,
questions to the person, and Ctrl-C.

Everything written goes through `nexus_core.terminal.escape` (`Display.write`): a model's text, a
tool's output, a question's options cannot move the cursor, redraw a line or reorder text. A
question is `nexus_core.terminal.render_question`'s text (the whole call, where it comes from),
and its answer is read only from keys typed after it is shown: pending input is discarded first.

Threads: a task runs on a thread of its own (`run_task`) while the main thread, which owns the
terminal, waits for it. Questions from the task's tool calls (an approval a gate asks for, the
`question` tool), which come from any of its worker threads and may come several at once, are
queued and asked by the main thread one at a time (`ConsoleApprover`). So Ctrl-C always reaches
the main thread, which cancels the task and answers what is still queued with a refusal: the
turn stops, the chat goes on.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from nexus_core import Answer, Question, ToolCall, ToolResult
from nexus_core.terminal import discard_typed_ahead, escape, render_call, render_question

from ._events import AgentEvent, AgentResult, ModelResponded, StoppedCall, TextDelta, ToolCallFinished

if TYPE_CHECKING:
    from ._session import Session

#: how much of a call's arguments, or of a result's first line, one line shows (the rest is
#: counted, never silently cut; a question shows everything)
_ARGS_WIDTH = 100
_SUMMARY_WIDTH = 120
#: how much of what a stopped call said one `^C:` line shows (run_code's says what became of
#: each inner call)
_STOP_WIDTH = 240
#: how much of a call's arguments `nexus ask` logs beside a decision it made by policy
_POLICY_WIDTH = 2000


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else f"{text[:width]}... [+{len(text) - width:,} characters]"


def call_line(call: ToolCall, width: int = _ARGS_WIDTH) -> str:
    return render_call(call, width)


def result_summary(result: ToolResult) -> str:
    if result.is_error:
        first = (result.error or "").strip().splitlines()
        return "error: " + _clip(first[0] if first else "", _SUMMARY_WIDTH)
    if result.metadata.get("pending"):
        return "pending: no answer"
    lines = result.output.count("\n") + (1 if result.output and not result.output.endswith("\n") else 0)
    return f"ok, {lines} line{'s' if lines != 1 else ''}" if lines else "ok"


def stop_line(stopped: StoppedCall) -> str:
    """What became of a call the person's Ctrl-C interrupted, in one line:
    `^C: stopped shell (killed 2 processes: bash, sleep)`."""
    call, result = stopped.call, stopped.result
    if not stopped.ended:
        return f"^C: {call.name} is still ending ({_clip(result.error or '', _SUMMARY_WIDTH)})"
    if result.error_kind != "cancelled":  # it ended by itself as the interrupt came
        return f"^C: {call.name} ended: {result_summary(result)}"
    structured = result.output_structured if isinstance(result.output_structured, dict) else {}
    killed = structured.get("killed")
    if isinstance(killed, list):  # the shell's: what it killed
        names = [str(p.get("name")) for p in killed[:5] if isinstance(p, dict) and p.get("name")]
        what = f"killed {len(killed)} process{'es' if len(killed) != 1 else ''}"
        what += f": {', '.join(names)}{', ...' if len(killed) > len(names) else ''}" if names else ""
        return f"^C: stopped {call.name} ({what})"
    first = (result.error or "").strip().splitlines()
    detail = first[0] if first else ""
    for prefix in ("cancelled: ", "stopped: "):
        detail = detail.removeprefix(prefix)
    return f"^C: stopped {call.name} ({_clip(detail, _STOP_WIDTH)})"


class Display:
    """Writes a session's events: text as it streams to `out`, a line per finished tool call to
    `calls` (with `verbose`, its full arguments and output). Thread-safe."""

    def __init__(self, out: IO[str], calls: IO[str], *, verbose: bool = False, show_text: bool = True) -> None:
        self.out = out
        self.calls = calls
        self.verbose = verbose
        self.show_text = show_text
        self.lock = threading.RLock()
        self._mid_line: dict[int, bool] = {}  # id(stream) -> the last write did not end a line
        self.broken = False  # the reader of our output went away

    def write(self, stream: IO[str], text: str) -> None:
        if not text or self.broken:
            return
        text = escape(text)  # the one way out to the terminal: nothing printed drives it
        with self.lock:
            try:
                stream.write(text)
                stream.flush()
            except BrokenPipeError:
                self.broken = True
                return
            self._mid_line[id(stream)] = not text.endswith("\n")

    def line(self, stream: IO[str], text: str) -> None:
        """`text` on a line of its own, ending the streamed text's line first if needed."""
        with self.lock:
            if self._mid_line.get(id(self.out)) and (stream is self.out or _same_terminal(stream, self.out)):
                self.write(self.out, "\n")
            self.write(stream, text.rstrip("\n") + "\n")

    def end_text(self) -> None:
        with self.lock:
            if self._mid_line.get(id(self.out)):
                self.write(self.out, "\n")

    def note(self, text: str) -> None:
        """A message for the person, on the calls stream (stderr for `nexus ask`)."""
        self.line(self.calls, text)

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            if self.show_text:
                self.write(self.out, event.text)
        elif isinstance(event, ModelResponded):
            self.end_text()  # the text of the next response starts on a line of its own
        elif isinstance(event, ToolCallFinished):
            self.tool_line(event.call, event.result)

    def tool_line(self, call: ToolCall, result: ToolResult) -> None:
        if not self.verbose:
            self.line(self.calls, f"  tool {call_line(call)} -> {result_summary(result)}")
            return
        args = json.dumps(call.arguments, ensure_ascii=False, indent=2, default=str)
        body = result.error if result.is_error else result.output
        text = [f"  tool {call.name} (call {call.id})", _indent(f"arguments: {args}", 4),
                _indent(("error: " if result.is_error else "output:\n") + (body or ""), 4)]
        self.line(self.calls, "\n".join(text))


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def _same_terminal(a: IO[str], b: IO[str]) -> bool:
    try:
        return a.isatty() and b.isatty()
    except (ValueError, OSError):
        return False


class LineReader:
    """Lines from the person: `input()` (with line editing) on a terminal, else lines of stdin.
    `discard_pending()` drops what was typed ahead on a terminal (a question's answer must be
    typed after the question is shown)."""

    def __init__(self, stdin: IO[str] | None = None, prompt_out: IO[str] | None = None) -> None:
        self.stdin = stdin if stdin is not None else sys.stdin
        self.prompt_out = prompt_out if prompt_out is not None else sys.stdout
        try:
            self.tty = self.stdin.isatty()
        except (ValueError, OSError):
            self.tty = False
        if self.tty and self.stdin is sys.stdin:
            try:
                import readline  # noqa: F401  (line editing and history for input())
            except ImportError:
                pass

    def discard_pending(self) -> None:
        """Drop the keys typed but not yet read: a `y` typed while the model was still answering
        must not answer the question shown after it. Only a terminal has such keys; piped input
        is an answer script, read as it comes."""
        discard_typed_ahead(self.stdin)

    def __call__(self, prompt: str) -> str:
        """A line without its newline; EOFError at the end of input."""
        if self.tty and self.stdin is sys.stdin:
            return input(prompt)
        if self.tty:
            self.prompt_out.write(prompt)
            self.prompt_out.flush()
        line = self.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\r\n")


class _Pending:
    def __init__(self, question: Question) -> None:
        self.question = question
        self.answer: Answer | None = None
        self.done = threading.Event()


class ConsoleApprover:
    """Asks the person at the terminal: called from any thread, asked by the thread that runs
    `pump` (the main thread), one question at a time, in the order they came."""

    def __init__(self, display: Display, read: Callable[[str], str]) -> None:
        self.display = display
        self.read = read
        self._queue: queue.Queue[_Pending] = queue.Queue()
        #: the run_code calls whose script a question showed whole: later questions from the
        #: same script show the lines around the call (and `v` the whole script again)
        self._shown_scripts: set[str] = set()

    def __call__(self, question: Question) -> Answer:
        pending = _Pending(question)
        self._queue.put(pending)
        pending.done.wait()
        assert pending.answer is not None
        return pending.answer

    def pump(self, done: threading.Event) -> None:
        """Ask the queued questions until `done` is set. KeyboardInterrupt propagates (the
        question being asked is refused first)."""
        while not done.is_set():
            try:
                pending = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                pending.answer = self._ask(pending.question)
            except KeyboardInterrupt:
                pending.answer = Answer(False, "the task was interrupted")
                raise
            except EOFError:
                pending.answer = Answer(False, "no answer: the input ended")
            except Exception as exc:  # the terminal went away: refuse, do not leave it waiting
                pending.answer = Answer(False, f"no answer ({type(exc).__name__}: {exc})")
            finally:
                if pending.answer is None:
                    pending.answer = Answer(False, "the task was interrupted")
                pending.done.set()

    def refuse_waiting(self, reason: str) -> None:
        """Answer every queued question with a refusal (the task was interrupted)."""
        while True:
            try:
                pending = self._queue.get_nowait()
            except queue.Empty:
                return
            pending.answer = Answer(False, reason)
            pending.done.set()

    def _fresh(self, prompt: str) -> str:
        """The person's answer, typed after the question was shown: keys typed ahead (while
        the model was still writing, say) are discarded first."""
        discard = getattr(self.read, "discard_pending", None)
        if discard is not None:
            discard()
        return self.read(prompt).strip()

    def _ask(self, question: Question) -> Answer:
        d = self.display
        d.end_text()
        full = False
        while True:
            rendered = render_question(question, full=full, shown_scripts=self._shown_scripts)
            d.line(d.out, rendered.text)
            self._shown_scripts.update(c.id for c in question.chain)
            see_all = ", v to see it all" if rendered.folded else ""
            if question.kind == "approval":
                reply = self._fresh(f"  allow? [y/N{see_all}, or a reason to refuse] ")
                if reply.lower() in ("v", "?"):  # the whole call, nothing folded, then ask again
                    full = True
                    continue
                if reply.lower() in ("y", "yes"):
                    return Answer(True)
                if reply.lower() in ("", "n", "no"):
                    return Answer(False)
                return Answer(False, reply)
            hint = "a number or your answer" if question.options else "your answer"
            reply = self._fresh(f"  answer ({hint}{see_all}; empty for none): ")
            if rendered.folded and reply.lower() == "v":
                full = True
                continue
            if reply.isdigit() and 1 <= int(reply) <= len(question.options):
                return Answer(True, question.options[int(reply) - 1])
            return Answer(True, reply) if reply else Answer(False)


class PolicyApprover:
    """`nexus ask`'s answers, with no one at a prompt: `--yes` approves, `--no` (and no flag)
    refuses; questions stay unanswered. Each decision is shown on stderr."""

    def __init__(self, display: Display, policy: str | None) -> None:
        self.display = display
        self.policy = policy

    def __call__(self, question: Question) -> Answer:
        if question.kind == "question":
            self.display.note(f"  asked: {escape(question.text, multiline=False)} (no answer: nexus ask has no one "
                              "to ask; nexus chat does)")
            return Answer(False, by="nexus ask")
        origin = f" (from {question.chain[-1].name} call {question.chain[-1].id})" if question.chain else ""
        what = f"{call_line(question.call, _POLICY_WIDTH)}{origin}: {' / '.join(question.text.splitlines())}"
        if self.policy == "yes":
            self.display.note(f"  approved (--yes): {what}")
            return Answer(True, by="nexus ask --yes")
        if self.policy == "no":
            self.display.note(f"  refused (--no): {what}")
            return Answer(False, by="nexus ask --no")
        self.display.note(f"  refused: {what} (nexus ask --yes approves such calls)")
        return Answer(False, "no one is here to approve it (nexus ask was run without --yes)", by="nexus ask")


def _stdin_is_a_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (ValueError, OSError):
        return False


def run_task(session: Session, text: str | None, display: Display, approver: ConsoleApprover | None) -> AgentResult:
    """Run one task (`text`; None: go on with the session's interrupted one) on its own thread while this (the main) thread asks the person the task's
    questions. Ctrl-C cancels the task (its model request ends, its tool calls are stopped) and
    waits until the task has ended, then says what each running call came to; a second Ctrl-C
    while it stops propagates (the command quits)."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = session.send(text) if text is not None else session.resume()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name="nexus-agent-task", daemon=True)
    worker.start()
    try:
        if approver is not None:
            approver.pump(done)
        else:
            while not done.wait(0.05):
                pass
    except KeyboardInterrupt:
        session.cancel()
        display.end_text()
        if _stdin_is_a_terminal():  # the terminal echoed `^C` where the cursor was: a line of its own
            display.write(display.calls, "\n")
        try:  # from the line on: a second Ctrl-C that comes while it is still being written quits too
            display.note("^C: stopping the turn (Ctrl-C again quits)")
            while not done.wait(0.05):
                if approver is not None:
                    approver.refuse_waiting("the task was interrupted")
        except KeyboardInterrupt:
            display.note("^C: quitting")
            raise
    worker.join()
    if "error" in box:
        raise box["error"]
    result: AgentResult = box["result"]
    for stopped in result.stopped:
        display.note(stop_line(stopped))
    return result
