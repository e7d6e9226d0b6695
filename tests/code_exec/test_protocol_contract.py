"""protocol.py's messages are a contract, as hookspecs are the hooks': each message's TypedDict
says who sends it to whom, what each field means, and what the receiver does with a bad value;
and the readers (`read_child`, `read_zygote`, `read_zygote_request`) do what the contracts say:
they accept exactly the fields each TypedDict declares, refuse a bad value of a field that is
acted on, and leave off a bad value of one that is only shown. The runs that end with a protocol
error are test_protocol.py's and test_attacks_pipe.py's; this is the contract itself."""

from __future__ import annotations

import copy
import re
import typing
from typing import Any

import pytest

from nexus_tool_code_exec import protocol
from nexus_tool_code_exec.protocol import ProtocolError

PROCESSES = {"host", "child", "zygote"}


def message_classes() -> dict[str, type]:
    """Every message TypedDict, by the type its `t` names."""
    found: dict[str, type] = {}
    for value in vars(protocol).values():
        if isinstance(value, type) and typing.is_typeddict(value) and "t" in value.__annotations__:
            (kind,) = typing.get_args(typing.get_type_hints(value)["t"])
            assert kind not in found, f"two messages of type {kind!r}"
            found[kind] = value
    return found


MESSAGES = message_classes()


def fields(cls: type) -> tuple[set[str], set[str]]:
    """(required, optional) fields of a message, from its type hints (NotRequired marks these)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    optional = {k for k, hint in hints.items() if typing.get_origin(hint) is typing.NotRequired}
    return set(hints) - optional - {"t"}, optional


def test_every_message_type_has_one_typeddict() -> None:
    constants = {value for name, value in vars(protocol).items()
                 if name.isupper() and isinstance(value, str) and name in {
                     "START", "RESULT", "CALL", "OUT", "WHERE", "DONE", "ERROR", "READY", "SPARE", "FORKED", "EXIT",
                     "TRASH", "FORK", "KILL", "PRELOAD"}}
    assert set(MESSAGES) == constants


@pytest.mark.parametrize("kind", sorted(MESSAGES))
def test_each_message_says_who_sends_it_what_each_field_means_and_what_a_bad_value_does(kind: str) -> None:
    cls = MESSAGES[kind]
    doc = cls.__doc__ or ""
    head = re.match(r"(\w+) -> (\w+): \S", doc)
    assert head and {head.group(1), head.group(2)} <= PROCESSES, f"{cls.__name__}: starts with 'sender -> receiver: '"
    required, optional = fields(cls)
    described = set(re.findall(r"^\s*- `(\w+)`: \S", doc, re.MULTILINE))
    assert described == required | optional, f"{cls.__name__}: fields described {sorted(described)}"
    assert "\n    Bad values: " in doc, f"{cls.__name__}: says what the receiver does with a bad value"


# -- what the host reads from a child ------------------------------------------------------------

#: a message of each kind a child sends, with every field it may have
CHILD_SAMPLES: dict[str, dict[str, Any]] = {
    "call": {"t": "call", "id": 1, "name": "echo", "args": {"text": "x"}, "p": True, "line": 3, "g": 2},
    "out": {"t": "out", "s": "stdout", "d": "hi\n", "truncated": True, "held": False, "dropped": 5},
    "where": {"t": "where", "line": 4},
    "done": {"t": "done", "result": "[1]", "truncated": False},
    "error": {"t": "error", "kind": "runtime", "message": "line 2: ValueError: no", "traceback": "Traceback...",
              "line": 2},
}


def test_the_samples_have_every_field() -> None:
    assert set(CHILD_SAMPLES) == {k for k, cls in MESSAGES.items() if (cls.__doc__ or "").startswith("child -> host")}
    for kind, sample in CHILD_SAMPLES.items():
        required, optional = fields(MESSAGES[kind])
        assert set(sample) == required | optional | {"t"}, kind


@pytest.mark.parametrize("kind", sorted(CHILD_SAMPLES))
def test_a_whole_message_is_read_as_it_came(kind: str) -> None:
    sample = copy.deepcopy(CHILD_SAMPLES[kind])
    assert protocol.read_child(sample) == CHILD_SAMPLES[kind]


@pytest.mark.parametrize("kind", sorted(CHILD_SAMPLES))
def test_the_optional_fields_may_be_left_out_and_the_required_ones_not(kind: str) -> None:
    required, optional = fields(MESSAGES[kind])
    bare = {k: v for k, v in CHILD_SAMPLES[kind].items() if k not in optional}
    assert protocol.read_child(copy.deepcopy(bare)) == bare
    for key in required:
        without = {k: v for k, v in bare.items() if k != key}
        if kind == "out":  # output without a stream or text is dropped (see below)
            assert protocol.read_child(without) is None
            continue
        with pytest.raises(ProtocolError):
            protocol.read_child(without)


@pytest.mark.parametrize("kind", sorted(CHILD_SAMPLES))
def test_a_field_the_message_does_not_have_is_a_protocol_error(kind: str) -> None:
    with pytest.raises(ProtocolError, match=r"with a field it does not have \('exec'\)$"):
        protocol.read_child({**copy.deepcopy(CHILD_SAMPLES[kind]), "exec": "import os"})


#: a bad value of a field the host acts on: (message type, field, value, the error)
REFUSED = [
    ("call", "id", "1", "a call needs an integer id, a tool name and an arguments object"),
    ("call", "id", True, "a call needs an integer id, a tool name and an arguments object"),
    ("call", "id", -(1 << 63) - 1, "a call needs an integer id, a tool name and an arguments object"),
    ("call", "id", 1 << 63, "a call needs an integer id, a tool name and an arguments object"),
    ("call", "id", 1.0, "a call needs an integer id, a tool name and an arguments object"),
    ("call", "name", ["echo"], "a call needs an integer id, a tool name and an arguments object"),
    ("call", "args", ["x"], "a call needs an integer id, a tool name and an arguments object"),
    ("call", "p", 1, "a call's 'p' must be true or false, not 1"),
    ("out", "truncated", "yes", "output's 'truncated' must be true or false, not 'yes'"),
    ("out", "held", None, "output's 'held' must be true or false, not None"),
    ("out", "dropped", -1, "output's 'dropped' must be a count of bytes, not -1"),
    ("out", "dropped", False, "output's 'dropped' must be a count of bytes, not False"),
    ("done", "result", 1, "the end's result must be JSON text, not 1"),
    ("done", "result", {"a": 1}, "the end's result must be JSON text, not a JSON object"),
    ("done", "truncated", 0, "the end's 'truncated' must be true or false, not 0"),
    ("error", "kind", "fatal", "an error of an unknown kind 'fatal'"),
    ("error", "kind", ["runtime"], "an error of an unknown kind a JSON array"),
    ("error", "message", 5, "an error's 'message' must be text, not 5"),
    ("error", "traceback", [], "an error's 'traceback' must be text, not a JSON array"),
]


@pytest.mark.parametrize(("kind", "key", "value", "error"), REFUSED,
                         ids=[f"{k}-{f}-{v!r}"[:40] for k, f, v, _ in REFUSED])
def test_a_bad_value_of_a_field_the_host_acts_on_is_a_protocol_error(kind: str, key: str, value: Any,
                                                                     error: str) -> None:
    with pytest.raises(ProtocolError) as info:
        protocol.read_child({**copy.deepcopy(CHILD_SAMPLES[kind]), key: value})
    assert str(info.value) == error


#: a bad value of a field that is only shown: left off, the message read all the same
SHOWN_ONLY = [("call", "line"), ("call", "g"), ("where", "line"), ("error", "line")]


@pytest.mark.parametrize(("kind", "key"), SHOWN_ONLY)
@pytest.mark.parametrize("value", [0, -1, True, "7", 1.5, None, [3]])
def test_a_bad_value_of_a_field_only_shown_is_left_off(kind: str, key: str, value: Any) -> None:
    read = protocol.read_child({**copy.deepcopy(CHILD_SAMPLES[kind]), key: value})
    assert read is not None and key not in read
    assert read == {k: v for k, v in CHILD_SAMPLES[kind].items() if k != key}


@pytest.mark.parametrize(("stream", "data"), [("/etc/passwd", "x"), (None, "x"), ("stdout", {"not": "text"}),
                                              ("stderr", 5)])
def test_output_of_no_stream_or_without_text_is_dropped(stream: Any, data: Any) -> None:
    assert protocol.read_child({"t": "out", "s": stream, "d": data}) is None


@pytest.mark.parametrize("kind", ["exec", "result", "start", "spare", 7, None, ["call"], {"t": "call"}])
def test_a_message_type_a_child_does_not_send_is_a_protocol_error(kind: Any) -> None:
    with pytest.raises(ProtocolError, match="^an unknown message type "):
        protocol.read_child({"t": kind})


def test_an_error_never_shows_more_than_a_piece_of_what_came() -> None:
    huge = "x" * (8 << 20)
    for msg in ({"t": huge}, {"t": "call", "id": 1, "name": "echo", "args": {}, "p": huge},
                {"t": "error", "kind": huge, "message": ""}, {"t": "where", huge: 1}, {"t": "done", "result": 1, huge: 1}):
        with pytest.raises(ProtocolError) as info:
            protocol.read_child(msg)
        assert len(str(info.value)) < 120, str(info.value)[:200]


# -- between the host and the zygote --------------------------------------------------------------

ZYGOTE_SAMPLES: dict[str, dict[str, Any]] = {
    "ready": {"t": "ready", "pid": 10},
    "spare": {"t": "spare", "pid": 11, "scratch": "/tmp/r/run-1", "key": "k", "idle": True, "replaces": None},
    "forked": {"t": "forked", "req": 1, "pid": 12, "scratch": "/tmp/r/run-2"},
    "exit": {"t": "exit", "pid": 11, "status": -9, "cpu": 0.25},
    "trash": {"t": "trash", "paths": ["/tmp/r/trash-1"]},
}
REQUEST_SAMPLES: dict[str, dict[str, Any]] = {
    "fork": {"t": "fork", "req": 1},
    "kill": {"t": "kill", "pid": 11},
    "preload": {"t": "preload", "key": "k", "bindings": {"pieces": [], "signatures": {}}},
}


@pytest.mark.parametrize(("read", "samples"), [(protocol.read_zygote, ZYGOTE_SAMPLES),
                                               (protocol.read_zygote_request, REQUEST_SAMPLES)],
                         ids=["zygote-to-host", "host-to-zygote"])
def test_the_zygotes_messages_and_the_hosts_requests_are_read_field_by_field(read: Any,
                                                                            samples: dict[str, Any]) -> None:
    sender, receiver = ("zygote", "host") if samples is ZYGOTE_SAMPLES else ("host", "zygote")
    assert set(samples) == {k for k, cls in MESSAGES.items()
                            if (cls.__doc__ or "").startswith(f"{sender} -> {receiver}")}
    for kind, sample in samples.items():
        required, optional = fields(MESSAGES[kind])
        assert set(sample) == required | optional | {"t"} and not optional, kind
        assert read(copy.deepcopy(sample)) == sample
        for key in required:
            with pytest.raises(ProtocolError, match=f"'{key}' is missing"):
                read({k: v for k, v in sample.items() if k != key})
            with pytest.raises(ProtocolError, match=f"'{key}' is "):
                read({**sample, key: [] if not isinstance(sample[key], list) else "x"})
        with pytest.raises(ProtocolError, match=r"with a field it does not have \('more'\)$"):
            read({**sample, "more": 1})
    with pytest.raises(ProtocolError, match="^an unknown (message|request) type 'call'"):
        read({"t": "call"})


def test_a_zygote_message_with_a_bool_for_a_number_is_refused() -> None:
    with pytest.raises(ProtocolError, match="'pid' is True"):
        protocol.read_zygote({"t": "ready", "pid": True})
    with pytest.raises(ProtocolError, match="a folder that is not a path"):
        protocol.read_zygote({"t": "trash", "paths": ["/tmp/a", 1]})
