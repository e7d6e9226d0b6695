"""`new_call_id`: `call_` and 24 lowercase hex digits, every one of them random, so an id cannot be
guessed from the ids before it (run records live in folders named by call id: a script that could
name a later run's id could pre-create its folder). Unique across threads and across a fork; and
`ToolCall`'s default id.
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


def digits(call_id: str) -> str:
    return call_id[len("call_"):]


def test_the_format_is_call_and_24_lowercase_hex_digits() -> None:
    ids = [new_call_id() for _ in range(1000)]
    assert all(ID.fullmatch(i) for i in ids), [i for i in ids if not ID.fullmatch(i)][:3]
    assert len(set(ids)) == len(ids)


def test_the_next_id_cannot_be_told_from_the_last() -> None:
    """No shared prefix, no counter: consecutive ids differ in about 15 of every 16 digits, as
    independent random ones do (a prefix and a counter shared 16 or more of 24). Fewer than 12
    differing digits out of 24 has a chance below 1e-9 for random ids."""
    ids = [new_call_id() for _ in range(2000)]
    for a, b in itertools.pairwise(ids):
        differing = sum(x != y for x, y in zip(digits(a), digits(b)))
        assert differing >= 12, (a, b)
        assert abs(int(digits(a), 16) - int(digits(b), 16)) > 1 << 64, (a, b)  # not a step of a counter
    # every digit position takes many values over the run, the first ones too (no fixed prefix)
    for position in range(24):
        assert len({digits(i)[position] for i in ids}) >= 12, position


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


def test_a_forked_child_makes_ids_of_its_own() -> None:
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
    after = [new_call_id() for _ in range(1000)]

    assert len(child) == 1000 and all(ID.fullmatch(i) for i in child)
    assert len(set(child)) == len(child)
    assert not set(child) & set(before + after)


def test_a_tool_call_gets_a_fresh_id_by_default() -> None:
    a, b = ToolCall(name="echo"), ToolCall(name="echo")
    assert ID.fullmatch(a.id) and ID.fullmatch(b.id)
    assert a.id != b.id
    assert ToolCall(name="echo", id="mine").id == "mine"
