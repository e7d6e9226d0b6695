"""Content blocks: a ToolResult carrying images, audio and resources besides its text, through
the core's converter, result normalisation, and files named by `output_file`."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import attrs
import pytest
from nexus_core._content import content_text, file_content

from nexus_core import ToolCall, ToolResult, failure, native_tool, success, toolkit
from nexus_core.content import AudioContent, ImageContent, ResourceContent, TextContent
from nexus_core.wire import WireError, from_json, to_json
from nexus_core._converter import structure, unstructure

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")

BLOCKS = (
    TextContent("A chart of Q3."),
    ImageContent.from_bytes(PNG, "image/png"),
    AudioContent.from_bytes(b"RIFF....WAVE", "audio/wav"),
    ResourceContent(uri="file:///notes.md", mime_type="text/markdown", text="# Notes", name="notes.md"),
    ResourceContent.from_bytes("file:///q3.pdf", b"%PDF-1.4", "application/pdf"),
    ResourceContent(uri="https://example.com/big.csv", mime_type="text/csv"),
)


def test_blocks_are_frozen_and_hold_base64() -> None:
    image = BLOCKS[1]
    assert isinstance(image, ImageContent)
    assert image.to_bytes() == PNG and image.data == base64.b64encode(PNG).decode()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        image.data = "AAAA"  # type: ignore[misc]
    assert "base64 chars" in repr(image)  # a repr does not print megabytes


@pytest.mark.parametrize(("make", "message"), [
    (lambda: ImageContent(data="not base64!", mime_type="image/png"), "ImageContent.data is not valid base64"),
    (lambda: ImageContent(data=b"raw", mime_type="image/png"), "use ImageContent.from_bytes() for raw bytes"),
    (lambda: ImageContent(data="AAAA", mime_type="png"), "must be a MIME type such as 'image/png', got 'png'"),
    (lambda: AudioContent(data="AAAA", mime_type=""), "AudioContent.mime_type must be a MIME type"),
    (lambda: ResourceContent(uri="file:///x", text="a", blob="AAAA"), "give text or blob, not both"),
    (lambda: ResourceContent(uri="file:///x", blob="%%%"), "ResourceContent.blob is not valid base64"),
    (lambda: TextContent(3), "'text' must be <class 'str'>"),  # type: ignore[arg-type]
])
def test_a_bad_block_is_refused_naming_the_field(make: object, message: str) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        make()  # type: ignore[operator]
    assert message in str(info.value)


def test_a_result_with_blocks_goes_through_the_converter_and_back() -> None:
    result = ToolResult(id="c1", name="chart", output=content_text(BLOCKS), content=BLOCKS)
    data = unstructure(result)
    assert [b["type"] for b in data["content"]] == ["text", "image", "audio", "resource", "resource", "resource"]
    assert data["content"][1] == {"type": "image", "data": base64.b64encode(PNG).decode(), "mime_type": "image/png"}
    assert structure(data, ToolResult) == result
    assert from_json(to_json(result), ToolResult) == result
    # a result without blocks says so
    assert unstructure(ToolResult(id="c", name="n"))["content"] == []


@pytest.mark.parametrize(("block", "message"), [
    ({"type": "video", "data": "AAAA"}, "ToolResult.content[0]: expected a content block with 'type' one of"),
    ({"type": "image", "data": "!!", "mime_type": "image/png"}, "ToolResult.content[0]: ImageContent.data is not valid"),
    ({"type": "text", "text": "a", "extra": 1}, "ToolResult.content[0]: unknown key 'extra'"),
    ({"type": "text"}, "ToolResult.content[0].text: required, but missing"),
    ("text", "ToolResult.content[0]: expected object, got string"),
])
def test_bad_blocks_in_json_are_errors_naming_the_path(block: object, message: str) -> None:
    with pytest.raises(WireError) as info:
        structure({"id": "c", "name": "n", "content": [block]}, ToolResult)
    assert message in str(info.value)


def test_a_result_refuses_what_is_not_a_block() -> None:
    with pytest.raises(TypeError, match="'content' must be"):
        ToolResult(id="c", name="n", content=["just text"])  # type: ignore[list-item]


def test_the_text_form_names_each_block() -> None:
    assert content_text(BLOCKS).splitlines() == [
        "A chart of Q3.",
        "[image: image/png, 70 bytes]",
        "[audio: audio/wav, 12 bytes]",
        "[resource file:///notes.md: text/markdown]",
        "# Notes",
        "[resource file:///q3.pdf: application/pdf, 8 bytes]",
        "[resource link https://example.com/big.csv: text/csv]",
    ]


def test_a_handler_returning_blocks_gives_a_result_with_content() -> None:
    one = native_tool("draw", run=lambda a: ImageContent.from_bytes(PNG, "image/png"))
    many = native_tool("report", run=lambda a: list(BLOCKS))
    wrapped = native_tool("wrapped", run=lambda a: success([TextContent("hi"), BLOCKS[1]]))
    broken = native_tool("broken", run=lambda a: failure([TextContent("no chart"), BLOCKS[1]]))
    with toolkit([one, many, wrapped, broken]) as nx:
        drawn = nx.invoke("draw")
        assert drawn.content == (BLOCKS[1],) and drawn.output == "[image: image/png, 70 bytes]"
        assert drawn.output_structured is None
        report = nx.invoke("report")
        assert report.content == BLOCKS and report.output == content_text(BLOCKS)
        assert nx.invoke("wrapped").content == (TextContent("hi"), BLOCKS[1])
        failed = nx.invoke(ToolCall(name="broken"))
        assert failed.error == "no chart\n[image: image/png, 70 bytes]" and len(failed.content) == 2
    # a list with anything else in it is structured output, as before
    with toolkit([native_tool("mixed", run=lambda a: [1, "two"])]) as nx:
        mixed = nx.invoke("mixed")
        assert mixed.content == () and mixed.output_structured == [1, "two"]


def test_a_file_becomes_the_block_its_type_calls_for(tmp_path: Path) -> None:
    (tmp_path / "chart.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    (tmp_path / "data.json").write_text(json.dumps({"a": 1}), encoding="utf-8")
    (tmp_path / "report.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    image = file_content(str(tmp_path / "chart.png"))
    assert image == ImageContent.from_bytes(PNG, "image/png")
    text = file_content(str(tmp_path / "notes.txt"))
    assert isinstance(text, ResourceContent)
    assert (text.text, text.mime_type, text.name) == ("hello", "text/plain", "notes.txt")
    assert text.uri == (tmp_path / "notes.txt").as_uri()
    assert isinstance(file_content(str(tmp_path / "data.json")), ResourceContent)
    pdf = file_content(str(tmp_path / "report.pdf"))
    assert isinstance(pdf, ResourceContent) and pdf.blob is not None and pdf.to_bytes() == b"%PDF-1.4"
    latin1 = file_content(str(tmp_path / "latin1.txt"))  # not UTF-8: sent as bytes, not garbled
    assert isinstance(latin1, ResourceContent) and latin1.to_bytes() == b"caf\xe9"


def test_a_file_that_cannot_be_sent_is_named_not_raised(tmp_path: Path) -> None:
    missing = file_content(str(tmp_path / "gone.png"))
    assert isinstance(missing, TextContent) and "gone.png: cannot be read" in missing.text
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 2048)
    too_big = file_content(str(big), max_bytes=1024)
    assert isinstance(too_big, TextContent)
    assert too_big.text == f"[output_file {big}: application/octet-stream, 2048 bytes, not sent (over 1024 bytes)]"
    folder = file_content(str(tmp_path))
    assert isinstance(folder, TextContent) and "cannot be read" in folder.text


def test_a_fifo_or_a_device_is_named_not_read(tmp_path: Path) -> None:
    # reading a FIFO with no writer would block the host forever; /dev/zero never ends
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        block = file_content(path)
        assert isinstance(block, TextContent) and block.text == f"[output_file {path}: not a regular file, not sent]"
