"""protocol.py's framing, which every process of run_code uses: messages as JSON lines (`encoder`,
`write_all`, `LineReader`), and fds passed with a message over the zygote's socket
(`send_with_fds`, `fd_receiver`). Real pipes and sockets."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import pytest

from nexus_tool_code_exec import protocol
from nexus_tool_code_exec.protocol import FramingError, LineReader
from proc_helpers import open_fds


@pytest.fixture(autouse=True)
def no_fd_leaks() -> Iterator[None]:
    before = open_fds()
    yield
    assert open_fds() == before


class CountingBuffer(bytearray):
    """A bytearray that counts the bytes its `find` looks at."""

    searched = 0

    def find(self, sub: bytes, start: int = 0, *args: int) -> int:  # type: ignore[override]
        at = super().find(sub, start, *args)
        type(self).searched += (at + 1 if at >= 0 else len(self)) - start
        return at


def test_messages_come_out_as_they_went_in_whatever_the_pieces() -> None:
    messages = [{"t": protocol.CALL, "id": i, "name": "echo", "args": {"text": "é" * i}, "p": False}
                for i in range(50)]
    data = b"".join(protocol.encode(m) for m in messages)
    for piece in (1, 7, 4096):
        lines = LineReader(1 << 20)
        got = []
        for at in range(0, len(data), piece):
            lines.feed(data[at:at + piece])
            while (msg := lines.next()) is not None:
                got.append(msg)
        assert got == messages


def test_take_reads_what_feed_and_next_read_whatever_the_pieces() -> None:
    # take() parses a piece that is one whole line where it is, and hands any other to the buffer
    messages = [{"t": protocol.CALL, "id": i, "name": "echo", "args": {"text": "é" * i}, "p": False}
                for i in range(50)]
    data = b"".join(protocol.encode(m) for m in messages)
    pieces = [protocol.encode(m) for m in messages[:5]]  # whole lines, one at a time (the fast path)
    pieces += [data[at:at + 7] for at in range(0, len(data), 7)]  # pieces across lines
    pieces += [protocol.encode(m) for m in messages[:5]]  # whole again, after the buffer was used
    lines = LineReader(1 << 20)
    got, sizes = [], []
    for piece in pieces:
        msg = lines.take(piece)
        while msg is not None:
            got.append(msg)
            sizes.append(lines.size)
            msg = lines.next()
    want = messages[:5] + messages + messages[:5]
    assert got == want
    assert sizes == [len(protocol.encode(m)) - 1 for m in want]


@pytest.mark.parametrize(("data", "error"), [
    (b"not json\n", "a line that is not JSON"),
    (b"[1, 2]\n", "a message that is not an object"),
    (b"\n", "a line that is not JSON"),
], ids=["garbage", "not-an-object", "empty"])
def test_take_of_a_whole_line_that_is_not_a_message_is_a_framing_error(data: bytes, error: str) -> None:
    with pytest.raises(FramingError, match=error):
        LineReader(1 << 20).take(data)


def test_size_is_the_last_messages_bytes_without_its_newline() -> None:
    lines = LineReader(100)
    line = protocol.encode({"t": protocol.OUT, "s": "stdout", "d": "hi"})
    lines.feed(line)
    assert lines.next() is not None
    assert lines.size == len(line) - 1


@pytest.mark.parametrize(("data", "error"), [
    (b"not json\n", "a line that is not JSON"),
    (b"[1, 2]\n", "a message that is not an object"),
    (b"[" * 100000 + b"]" * 100000 + b"\n", "a line that is not JSON"),
], ids=["garbage", "not-an-object", "deeply-nested"])
def test_what_is_not_a_message_is_a_framing_error(data: bytes, error: str) -> None:
    lines = LineReader(1 << 20)
    lines.feed(data)
    with pytest.raises(FramingError, match=error):
        lines.next()


def test_a_line_longer_than_the_limit_is_an_error_before_it_ends() -> None:
    lines = LineReader(1000)
    lines.feed(b"x" * 1000)
    assert lines.next() is None  # at the limit: not yet
    lines.feed(b"x")
    with pytest.raises(FramingError, match="a message longer than the limit"):
        lines.next()


def test_each_byte_is_searched_for_a_newline_once() -> None:
    """An over-long line arriving in many reads (or a burst of small messages) costs the host
    time in proportion to its size, not to its size squared: what was searched once is not
    searched again when more comes."""
    lines = LineReader(1 << 30)
    lines._buf = CountingBuffer()
    CountingBuffer.searched = 0
    head, piece, tail = b'{"t": "out", "s": "stdout", "d": "', b"x" * 65536, b'"}\n'
    burst = protocol.encode({"t": protocol.OUT, "s": "stdout", "d": "y"}) * 1000
    lines.feed(head)
    for _ in range(512):  # 32 MiB of one line, read by read
        assert lines.next() is None
        lines.feed(piece)
    lines.feed(tail + burst)
    big = lines.next()
    assert big is not None and len(big["d"]) == 512 * len(piece)
    count = 0
    while lines.next() is not None:
        count += 1
    assert count == 1000
    assert CountingBuffer.searched <= len(head) + 512 * len(piece) + len(tail) + len(burst)


def test_read_pulls_from_a_pipe_until_a_message_is_complete() -> None:
    r, w = os.pipe()
    try:
        lines = LineReader(1000)
        writer = threading.Thread(target=lambda: [protocol.write_all(w, b'{"t": "done", "result": "1", '),
                                                  protocol.write_all(w, b'"truncated": false}\n' + b"x" * 2000)])
        writer.start()
        assert lines.read(lambda: os.read(r, 512)) == {"t": "done", "result": "1", "truncated": False}
        with pytest.raises(FramingError):  # the rest: a line longer than the limit
            lines.read(lambda: os.read(r, 512))
        writer.join()
    finally:
        os.close(r)
        os.close(w)


def test_the_end_of_the_stream_is_none() -> None:
    assert LineReader(100).read(lambda: b"") is None


def test_encoder_uses_its_default_for_what_json_has_no_type_for() -> None:
    encode = protocol.encoder(default=str)
    assert encode({"t": protocol.RESULT, "id": 1, "result": {"output_structured": {1, 2} - {1, 2}}}) == \
        b'{"t":"result","id":1,"result":{"output_structured":"set()"}}\n'
    with pytest.raises(TypeError):
        protocol.encode({"value": object()})


def test_fds_travel_with_their_message_in_order() -> None:
    host, zygote = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pipes = [os.pipe() for _ in range(3)]
    try:
        protocol.send_with_fds(zygote, {"t": protocol.READY, "pid": 1})
        for n, (r, w) in enumerate(pipes):
            protocol.send_with_fds(zygote, {"t": protocol.SPARE, "pid": n}, [r, w])
        passed: list[list[int]] = []
        lines, receive = LineReader(1 << 20), protocol.fd_receiver(host, passed)
        assert lines.read(receive) == {"t": protocol.READY, "pid": 1}
        for n, (r, w) in enumerate(pipes):
            assert lines.read(receive) == {"t": protocol.SPARE, "pid": n}
            got_r, got_w = passed.pop(0)
            os.write(w, b"through the original")
            assert os.read(got_r, 100) == b"through the original"  # the same pipe, another fd
            os.write(got_w, b"and back")
            assert os.read(r, 100) == b"and back"
            os.close(got_r)
            os.close(got_w)
    finally:
        host.close()
        zygote.close()
        for r, w in pipes:
            os.close(r)
            os.close(w)
