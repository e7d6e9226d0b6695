"""The core built-in tools, loaded as the installed plugins they are: `todowrite`
(nexus.tool.todo) and `question` (nexus.tool.question)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nexus_core.builtins.todo import Todo, todos

from nexus_core import Nexus, ToolCall, hookimpl

ALL_STATUSES = [
    {"content": "read the issue", "status": "completed", "id": "1", "priority": "high"},
    {"content": "write the code", "status": "in_progress", "id": "2"},
    {"content": "write the docs", "status": "pending"},
    {"content": "rewrite in Rust", "status": "cancelled", "priority": "low"},
]


@pytest.fixture
def make_nexus(tmp_path: Path) -> Iterator[Callable[..., Nexus]]:
    made: list[Nexus] = []

    def make(*active: str, plugins: list[Any] = ()) -> Nexus:
        nx = Nexus.from_config({"workspace": str(tmp_path), "skills": [], "plugins": {"active": list(active)}},
                               plugins=plugins)
        made.append(nx)
        return nx

    yield make
    for nx in made:
        nx.close()


def test_the_built_ins_load_as_installed_plugins(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus("nexus.tool.todo", "nexus.tool.question", "nexus.skills")
    assert {t.name: t.plugin for t in nx.tools()} == {
        "todowrite": "nexus.tool.todo", "question": "nexus.tool.question", "skill": "nexus.skills"}
    assert nx.failures == []


# -- todowrite ------------------------------------------------------------------------------


def test_todowrite_echoes_the_list_with_a_mark_per_status(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus("nexus.tool.todo")
    result = nx.invoke("todowrite", {"todos": ALL_STATUSES})
    assert not result.is_error
    assert result.output == "[x] read the issue\n[~] write the code\n[ ] write the docs\n[-] rewrite in Rust"
    assert result.output_structured == {"todos": [
        {"content": "read the issue", "status": "completed", "id": "1", "priority": "high"},
        {"content": "write the code", "status": "in_progress", "id": "2"},
        {"content": "write the docs", "status": "pending"},
        {"content": "rewrite in Rust", "status": "cancelled", "priority": "low"},
    ]}


def test_todowrite_replaces_the_list_each_time(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus("nexus.tool.todo")
    nx.invoke("todowrite", {"todos": ALL_STATUSES})
    result = nx.invoke("todowrite", {"todos": [{"content": "ship it", "status": "in_progress"}]})
    assert result.output == "[~] ship it"
    assert todos(nx) == [Todo(content="ship it", status="in_progress")]
    assert nx.invoke("todowrite", {"todos": []}).output == "(the todo list is empty)"
    assert todos(nx) == []


def test_the_todo_list_is_kept_per_nexus(make_nexus: Callable[..., Nexus]) -> None:
    one, two = make_nexus("nexus.tool.todo"), make_nexus("nexus.tool.todo")
    one.invoke("todowrite", {"todos": [{"content": "a", "status": "pending"}]})
    two.invoke("todowrite", {"todos": [{"content": "b", "status": "completed"}]})
    assert [t.content for t in todos(one)] == ["a"]
    assert [t.content for t in todos(two)] == ["b"]


def test_todos_of_a_nexus_that_never_wrote_any_is_empty(make_nexus: Callable[..., Nexus]) -> None:
    assert todos(make_nexus("nexus.tool.todo")) == []


@pytest.mark.parametrize(
    ("todo", "where"),
    [
        ({"content": "x", "status": "done"}, "status"),
        ({"content": "x"}, "status"),
        ({"status": "pending"}, "content"),
        ({"content": "", "status": "pending"}, "content"),
        ({"content": "x", "status": "pending", "priority": "urgent"}, "priority"),
        ({"content": "x", "status": "pending", "due": "today"}, "due"),
    ],
)
def test_todowrite_refuses_a_malformed_item_and_keeps_the_old_list(
        make_nexus: Callable[..., Nexus], todo: dict[str, Any], where: str) -> None:
    nx = make_nexus("nexus.tool.todo")
    nx.invoke("todowrite", {"todos": [{"content": "keep me", "status": "pending"}]})
    result = nx.invoke("todowrite", {"todos": [todo]})
    assert result.error_kind == "invalid_arguments" and where in result.error
    assert [t.content for t in todos(nx)] == ["keep me"]


def test_todowrite_schema_is_like_opencodes(make_nexus: Callable[..., Nexus]) -> None:
    schema = make_nexus("nexus.tool.todo").tool("todowrite").input_schema
    item = schema["properties"]["todos"]["items"]
    assert item["required"] == ["content", "status"]
    assert item["properties"]["status"]["enum"] == ["pending", "in_progress", "completed", "cancelled"]
    assert item["properties"]["priority"]["enum"] == ["high", "medium", "low"]
    assert set(item["properties"]) == {"content", "status", "id", "priority"}


# -- question -------------------------------------------------------------------------------


class Answerer:
    def __init__(self, answer: str | None) -> None:
        self.answer = answer
        self.asked: list[tuple[str, list[str], ToolCall]] = []

    @hookimpl
    def nexus_question_answer(self, question: str, options: list[str], call: ToolCall) -> str | None:
        self.asked.append((question, options, call))
        return self.answer


def test_nexus_question_answer_hook_answers_the_question(make_nexus: Callable[..., Nexus]) -> None:
    answerer = Answerer("blue")
    nx = make_nexus("nexus.tool.question", plugins=[answerer])
    call = ToolCall(name="question", arguments={"question": "Which colour?", "options": ["red", "blue"]},
                    id="q-1", parent_call_id="p-0")
    result = nx.invoke(call)
    assert (result.output, result.is_error) == ("blue", False)
    assert result.output_structured == {"status": "answered", "question": "Which colour?",
                                        "options": ["red", "blue"], "answer": "blue"}
    ((question, options, seen_call),) = answerer.asked
    assert (question, options) == ("Which colour?", ["red", "blue"])
    assert (seen_call.id, seen_call.parent_call_id, seen_call.name) == ("q-1", "p-0", "question")
    assert seen_call.arguments == call.arguments


def test_nexus_question_answer_first_non_none_answer_wins(make_nexus: Callable[..., Nexus]) -> None:
    silent, speaker = Answerer(None), Answerer("yes")
    nx = make_nexus("nexus.tool.question", plugins=[silent, speaker])
    assert nx.invoke("question", {"question": "Proceed?"}).output == "yes"


def test_nexus_question_answer_is_not_asked_when_the_host_passed_an_answer(
        make_nexus: Callable[..., Nexus]) -> None:
    answerer = Answerer("from the hook")
    nx = make_nexus("nexus.tool.question", plugins=[answerer])
    result = nx.invoke("question", {"question": "Proceed?", "options": ["yes", "no"]}, answer="no")
    assert result.output == "no" and result.output_structured["answer"] == "no"
    assert answerer.asked == []


def test_with_no_answerer_the_question_is_pending_not_an_error(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus("nexus.tool.question")
    result = nx.invoke("question", {"question": "Which colour?", "options": ["red", "blue"]})
    assert not result.is_error
    assert result.output == "pending: waiting for the user's answer to: Which colour? (options: red, blue)"
    assert result.output_structured == {"status": "pending", "question": "Which colour?", "options": ["red", "blue"]}
    assert result.metadata == {"pending": True}


def test_nexus_question_answer_returning_none_leaves_it_pending(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus("nexus.tool.question", plugins=[Answerer(None)])
    result = nx.invoke("question", {"question": "Later?"})
    assert result.metadata.get("pending") is True
    assert result.output == "pending: waiting for the user's answer to: Later?"
    assert result.output_structured["options"] == []


def test_an_agent_loop_resumes_a_pending_question_with_the_answer(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus("nexus.tool.question")
    call = ToolCall(name="question", arguments={"question": "Deploy to prod?", "options": ["yes", "no"]})
    first = nx.invoke(call)
    assert first.metadata.get("pending")
    user_says = first.output_structured["options"][0]  # the host asks the user, then invokes again
    second = nx.invoke(call, answer=user_says)
    assert second.output == "yes" and second.id == call.id and not second.metadata.get("pending")


def test_a_non_text_answer_is_sent_as_json(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus("nexus.tool.question")
    result = nx.invoke("question", {"question": "Which?", "options": ["a", "b", "c"]}, answer=["a", "c"])
    assert result.output == '["a", "c"]' and result.output_structured["answer"] == ["a", "c"]


def test_an_answerer_that_raises_is_an_error_result(make_nexus: Callable[..., Nexus]) -> None:
    class Broken:
        @hookimpl
        def nexus_question_answer(self, question: str, options: list[str], call: ToolCall) -> str | None:
            raise RuntimeError("no terminal")

    result = make_nexus("nexus.tool.question", plugins=[Broken()]).invoke("question", {"question": "x?"})
    assert result.is_error and "no terminal" in result.error


def test_question_needs_a_question(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus("nexus.tool.question")
    assert nx.invoke("question", {"options": ["a"]}).error_kind == "invalid_arguments"
    assert nx.invoke("question", {"question": ""}).error_kind == "invalid_arguments"
