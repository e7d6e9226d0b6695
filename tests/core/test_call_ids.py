"""`new_call_id`: `call_` and 24 lowercase hex digits (a per-process random prefix, then a counter),
unique across threads, across a fork (the child draws its own prefix) and across the counter's
wrap (a new prefix is drawn); and `ToolCall`'s default id.
"""

from __future__ import annotations

import itertools
import os
import re
import threading

import pytest

from nexus_core import ToolCall
from nexus_core._models import new_call_id

ID = re.compile(r"call_[0-9a-f]{24}")
PREFIX = len("call_") + 16  # the random part; the 8 hex digits after it count


def prefix(call_id: str) -> str:
    return call_id[:PREFIX]


def test_the_format_is_call_and_24_lowercase_hex_digits() -> None:
    ids = [new_call_id() for _ in range(1000)]
    assert all(ID.fullmatch(i) for i in ids), [i for i in ids if not ID.fullmatch(i)][:3]
    assert len(set(ids)) == len(ids)


def test_ids_from_four_threads_are_all_distinct() -> None:
    per_thread = 25_000
    start = threading.Barrier(4)
    made: list[list[str]] = [[] for _ in range(4)]

    def work(out: list[str]) -> None:
        start.wait()
        out.extend(new_call_id() for _ in range(per_thread))

    threads = [threading.Thread(target=work, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    everything = [i for out in made for i in out]
    assert len(everything) == 4 * per_thread
    assert len(set(everything)) == len(everything)
    assert all(ID.fullmatch(i) for i in everything)


def test_a_forked_child_draws_its_own_prefix() -> None:
    before = [new_call_id() for _ in range(100)]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send 1000 ids back, then leave without any cleanup
        code = 1
        try:
            os.close(r)
            data = "\n".join(new_call_id() for _ in range(1000)).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    try:
        chunks = []
        while chunk := os.read(r, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    child = b"".join(chunks).decode().split("\n")
    after = [new_call_id() for _ in range(100)]
    parent = before + after

    assert len(child) == 1000 and all(ID.fullmatch(i) for i in child)
    assert len(set(child)) == len(child)
    assert not {prefix(i) for i in child} & {prefix(i) for i in parent}
    assert not set(child) & set(parent)
    assert {prefix(i) for i in after} == {prefix(i) for i in before}  # the parent's prefix stays


def test_a_tool_call_gets_a_fresh_id_by_default() -> None:
    a, b = ToolCall(name="echo"), ToolCall(name="echo")
    assert ID.fullmatch(a.id) and ID.fullmatch(b.id)
    assert a.id != b.id
    assert ToolCall(name="echo", id="mine").id == "mine"


def test_the_counter_wrap_draws_a_new_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    old = prefix(new_call_id())
    # the state is (prefix, counter): put this prefix's counter at its last value
    monkeypatch.setattr(new_call_id, "_state", (old, itertools.count(0xFFFFFFFF)))

    last = new_call_id()
    assert last == old + "ffffffff"  # the last one of this prefix
    ids = [new_call_id() for _ in range(1000)]
    assert all(ID.fullmatch(i) for i in ids)
    assert len(set(ids + [last])) == len(ids) + 1
    assert {prefix(i) for i in ids} == {prefix(ids[0])} != {old}
    assert ids[0].endswith("00000000")
