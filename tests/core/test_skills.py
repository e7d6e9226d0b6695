"""Skills: SKILL.md discovery (good ones load, broken ones are reported with path and line), the
`skill` tool, activation hooks, per-Nexus state, the prompt, and `nexus skills`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nexus_core.cli import main as cli_main
from nexus_core.skills import (
    SkillError,
    UnknownSkillError,
    activate_skill,
    active_skills,
    deactivate_skill,
    discover_skills,
    list_skills,
    load_skill,
    skill_problems,
    skill_set,
    skills_prompt,
)

from nexus_core import Nexus, SkillContent, hookimpl

PDF = """---
name: pdf
description: Fill in and read PDF forms.
license: MIT
---
# PDF forms

Use `scripts/fill.py` to fill a form.
"""

CSV = """---
name: csv-tools
---
Read CSV files with the csv module.
"""

BROKEN_YAML = """---
name: broken
description: [unclosed
---
body
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    """Two good skills (one with resources) and one with broken YAML."""
    root = tmp_path / "skills"
    write(root / "pdf" / "SKILL.md", PDF)
    write(root / "pdf" / "scripts" / "fill.py", "def fill(path): ...\n")
    write(root / "pdf" / "reference.md", "# Reference\n")
    write(root / "pdf" / ".hidden", "secret\n")
    write(root / "pdf" / "scripts" / "__pycache__" / "fill.cpython-311.pyc", "x")
    write(root / "csv" / "SKILL.md", CSV)
    write(root / "broken" / "SKILL.md", BROKEN_YAML)
    return root


class Recorder:
    """An observer of the skill hooks."""

    def __init__(self) -> None:
        self.loaded: list[SkillContent] = []
        self.deactivated: list[str] = []

    @hookimpl
    def nexus_skill_loaded(self, skill: SkillContent) -> None:
        self.loaded.append(skill)

    @hookimpl
    def nexus_skill_deactivate(self, name: str) -> None:
        self.deactivated.append(name)


@pytest.fixture
def make_nexus(tmp_path: Path) -> Callable[..., Nexus]:
    made: list[Nexus] = []

    def make(skills: list[Path], plugins: list[Any] = (), active: list[str] = ("nexus.skills",)) -> Nexus:
        nx = Nexus.from_config({"workspace": str(tmp_path), "skills": [str(s) for s in skills],
                                "plugins": {"active": list(active)}}, plugins=plugins)
        made.append(nx)
        return nx

    yield make
    for nx in made:
        nx.close()


# -- discovery ------------------------------------------------------------------------------


def test_a_folder_with_one_broken_skill_loads_the_good_ones_and_reports_the_broken_one(skills_dir: Path) -> None:
    scan = discover_skills([skills_dir])
    assert sorted(s.name for s in scan.skills) == ["csv-tools", "pdf"]
    (problem,) = scan.problems
    assert problem.path == str((skills_dir / "broken" / "SKILL.md").absolute())
    assert problem.line == 3  # the line of the bad YAML in the file
    assert "invalid YAML" in problem.message
    assert str(problem).startswith(f"{problem.path}:3: ")


def test_a_skill_has_its_front_matter_body_folder_and_resources(skills_dir: Path) -> None:
    pdf = next(s for s in discover_skills([skills_dir]).skills if s.name == "pdf")
    assert pdf.description == "Fill in and read PDF forms."
    assert pdf.body == "# PDF forms\n\nUse `scripts/fill.py` to fill a form."
    assert pdf.path == str((skills_dir / "pdf").absolute())
    # files beside SKILL.md, relative; hidden files and caches left out
    assert pdf.resources == ("reference.md", "scripts/fill.py")
    assert pdf.metadata == {"license": "MIT"}


def test_description_is_optional(skills_dir: Path) -> None:
    csv = load_skill(skills_dir / "csv")
    assert (csv.name, csv.description, csv.resources) == ("csv-tools", "", ())


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("# no front matter\n", 1, "no front matter"),
        ("", 1, "no front matter"),
        ("---\nname: x\nbody without end\n", 1, "not closed"),
        ("---\n---\nbody\n", 1, "front matter is empty"),
        ("---\ndescription: d\n---\nbody\n", 1, "missing required key 'name'"),
        ("---\ndescription: d\nname: [a, b]\n---\n", 3, "'name' must be a string, got list"),
        ("---\nname: has spaces\n---\n", 2, "'name' 'has spaces' is not valid"),
        ("---\nname: ../escape\n---\n", 2, "is not valid"),
        ("---\nname: ok\ndescription: 42\n---\n", 3, "'description' must be a string, got int"),
        ("---\n- a\n- b\n---\n", 2, "must be a mapping of keys, got list"),
        ("---\nname: x\n  bad: indent\n---\n", 3, "invalid YAML"),
    ],
)
def test_broken_skill_files_are_reported_with_path_and_line(tmp_path: Path, text: str, line: int,
                                                            message: str) -> None:
    file = write(tmp_path / "s" / "SKILL.md", text)
    with pytest.raises(SkillError) as info:
        load_skill(file)
    problem = info.value.problem
    assert (problem.path, problem.line) == (str(file.absolute()), line)
    assert message in problem.message


def test_a_file_that_is_not_utf8_is_reported(tmp_path: Path) -> None:
    file = tmp_path / "s" / "SKILL.md"
    file.parent.mkdir()
    file.write_bytes(b"---\nname: x\n---\n\xff\xfe")
    (problem,) = discover_skills([tmp_path]).problems
    assert "not UTF-8" in problem.message and problem.path == str(file.absolute())


def test_crlf_and_a_bom_are_fine(tmp_path: Path) -> None:
    file = tmp_path / "s" / "SKILL.md"
    file.parent.mkdir()
    file.write_bytes("\ufeff---\r\nname: win\r\ndescription: d\r\n---\r\nbody\r\n".encode())
    skill = load_skill(file)
    assert (skill.name, skill.description, skill.body) == ("win", "d", "body")


def test_the_same_name_twice_keeps_the_first_and_reports_the_second(tmp_path: Path) -> None:
    first = write(tmp_path / "a" / "pdf" / "SKILL.md", PDF)
    second = write(tmp_path / "b" / "pdf2" / "SKILL.md", PDF)
    scan = discover_skills([tmp_path / "a", tmp_path / "b"])
    assert [s.path for s in scan.skills] == [str(first.parent.absolute())]
    (problem,) = scan.problems
    assert problem.path == str(second.absolute()) and "already used by" in problem.message


def test_missing_folders_are_skipped_and_nested_skills_are_separate(tmp_path: Path) -> None:
    write(tmp_path / "outer" / "SKILL.md", "---\nname: outer\n---\nouter\n")
    write(tmp_path / "outer" / "notes.md", "n\n")
    write(tmp_path / "outer" / "inner" / "SKILL.md", "---\nname: inner\n---\ninner\n")
    write(tmp_path / "outer" / "inner" / "tool.py", "x = 1\n")
    scan = discover_skills([tmp_path / "nope", tmp_path])
    by_name = {s.name: s for s in scan.skills}
    assert set(by_name) == {"outer", "inner"} and scan.problems == ()
    assert by_name["outer"].resources == ("notes.md",)  # the inner skill's files are its own
    assert by_name["inner"].resources == ("tool.py",)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_a_symlink_loop_does_not_hang_discovery(tmp_path: Path) -> None:
    write(tmp_path / "s" / "SKILL.md", CSV)
    os.symlink(tmp_path, tmp_path / "s" / "loop")
    assert [s.name for s in discover_skills([tmp_path]).skills] == ["csv-tools"]


# -- symbolic links leading out of the configured folders (issue 11) ----------------------------


def test_a_symlinked_skill_folder_inside_the_configured_folders_is_followed(tmp_path: Path) -> None:
    write(tmp_path / "skills" / ".store" / "real" / "SKILL.md", CSV)  # hidden: not searched itself
    os.symlink(tmp_path / "skills" / ".store" / "real", tmp_path / "skills" / "linked")
    scan = discover_skills([tmp_path / "skills"])
    assert [s.name for s in scan.skills] == ["csv-tools"] and scan.problems == ()
    assert scan.skills[0].path == str(tmp_path / "skills" / "linked")


def test_a_symlinked_skill_folder_leading_elsewhere_is_a_problem_not_a_skill(tmp_path: Path) -> None:
    write(tmp_path / "elsewhere" / "SKILL.md", PDF)
    (tmp_path / "skills").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "skills" / "pdf")
    scan = discover_skills([tmp_path / "skills"])
    assert scan.skills == ()
    (problem,) = scan.problems
    assert problem.path == str(tmp_path / "skills" / "pdf")
    assert problem.message == (f"a symbolic link to {tmp_path / 'elsewhere'}, outside the configured skill folders: "
                               "not followed (add that folder to `skills` to use the skills in it)")
    # the way out that the message names
    assert [s.name for s in discover_skills([tmp_path / "skills", tmp_path / "elsewhere"]).skills] == ["pdf"]


def test_a_skill_md_that_links_out_of_its_folder_is_refused(tmp_path: Path) -> None:
    secret = write(tmp_path / "host" / "notes.md", PDF)
    (tmp_path / "skills" / "pdf").mkdir(parents=True)
    os.symlink(secret, tmp_path / "skills" / "pdf" / "SKILL.md")
    scan = discover_skills([tmp_path / "skills"])
    assert scan.skills == ()
    (problem,) = scan.problems
    assert problem.message.startswith(f"a symbolic link to {secret}, outside the skill's folder")
    # a link to a file of its own folder is fine
    write(tmp_path / "skills" / "csv" / "real.md", CSV)
    os.symlink("real.md", tmp_path / "skills" / "csv" / "SKILL.md")
    assert [s.name for s in discover_skills([tmp_path / "skills"]).skills] == ["csv-tools"]


def test_a_resource_that_links_out_of_its_skill_is_not_listed(tmp_path: Path) -> None:
    folder = tmp_path / "skills" / "pdf"
    write(folder / "SKILL.md", PDF)
    write(folder / "ref.md", "r\n")
    secret = write(tmp_path / "host" / "id_rsa", "KEY\n")
    os.symlink(secret, folder / "key.md")
    os.symlink("ref.md", folder / "same.md")
    (skill,) = discover_skills([tmp_path / "skills"]).skills
    assert skill.resources == ("ref.md", "same.md")


# -- the Nexus API and hooks ----------------------------------------------------------------


def test_skills_come_from_the_configured_folders(skills_dir: Path, make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus([skills_dir])
    assert [s.name for s in list_skills(nx)] == ["csv-tools", "pdf"]
    assert [p.path for p in skill_problems(nx)] == [str((skills_dir / "broken" / "SKILL.md").absolute())]


def test_config_skill_folders_resolve_against_the_config_file(skills_dir: Path, tmp_path: Path) -> None:
    config = write(tmp_path / "nexus.yaml", "skills: [./skills]\nplugins:\n  active: []\n")
    with Nexus.from_config(str(config)) as nx:
        assert [s.name for s in list_skills(nx)] == ["csv-tools", "pdf"]


def test_nexus_skill_loaded_fires_when_a_skill_is_activated(skills_dir: Path,
                                                            make_nexus: Callable[..., Nexus]) -> None:
    recorder = Recorder()
    nx = make_nexus([skills_dir], plugins=[recorder])
    skill = activate_skill(nx, "pdf")
    assert [s.name for s in recorder.loaded] == ["pdf"]
    assert recorder.loaded[0] == skill and skill.path == str((skills_dir / "pdf").absolute())
    activate_skill(nx, "pdf")  # already active: not loaded again
    assert len(recorder.loaded) == 1


def test_nexus_skill_deactivate_fires_when_a_skill_is_deactivated(skills_dir: Path,
                                                                  make_nexus: Callable[..., Nexus]) -> None:
    recorder = Recorder()
    nx = make_nexus([skills_dir], plugins=[recorder])
    activate_skill(nx, "pdf")
    assert deactivate_skill(nx, "pdf") is True
    assert recorder.deactivated == ["pdf"]
    assert deactivate_skill(nx, "pdf") is False  # not active: nothing fires
    assert recorder.deactivated == ["pdf"]
    activate_skill(nx, "pdf")  # and it can be activated again
    assert len(recorder.loaded) == 2


def test_active_skills_lists_them_in_activation_order_with_their_folders(
        skills_dir: Path, make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus([skills_dir])
    assert active_skills(nx) == []
    activate_skill(nx, "pdf")
    activate_skill(nx, "csv-tools")
    assert [(s.name, s.path) for s in active_skills(nx)] == [
        ("pdf", str((skills_dir / "pdf").absolute())), ("csv-tools", str((skills_dir / "csv").absolute()))]
    assert [r for r in active_skills(nx)[0].resources if r.endswith(".py")] == ["scripts/fill.py"]
    deactivate_skill(nx, "pdf")
    assert [s.name for s in active_skills(nx)] == ["csv-tools"]


def test_activating_an_unknown_skill_names_the_available_ones(skills_dir: Path,
                                                              make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus([skills_dir])
    with pytest.raises(UnknownSkillError, match="unknown skill 'nope'; available skills: csv-tools, pdf"):
        activate_skill(nx, "nope")


def test_skill_state_is_per_nexus(skills_dir: Path, make_nexus: Callable[..., Nexus]) -> None:
    one, two = make_nexus([skills_dir]), make_nexus([skills_dir])
    activate_skill(one, "pdf")
    assert [s.name for s in active_skills(one)] == ["pdf"]
    assert active_skills(two) == []
    assert skill_set(one) is skill_set(one) and skill_set(one) is not skill_set(two)


def test_an_observer_that_raises_does_not_undo_the_activation(skills_dir: Path,
                                                              make_nexus: Callable[..., Nexus]) -> None:
    class Grumpy:
        @hookimpl
        def nexus_skill_loaded(self, skill: SkillContent) -> None:
            raise RuntimeError("no")

    nx = make_nexus([skills_dir], plugins=[Grumpy()])
    activate_skill(nx, "pdf")
    assert [s.name for s in active_skills(nx)] == ["pdf"]


def test_activation_reads_the_file_again_and_refresh_finds_new_skills(
        skills_dir: Path, make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus([skills_dir])
    assert len(list_skills(nx)) == 2
    write(skills_dir / "csv" / "SKILL.md", CSV.replace("csv module", "csv module, edited"))
    assert "edited" in activate_skill(nx, "csv-tools").body
    write(skills_dir / "new" / "SKILL.md", "---\nname: new\n---\nnew\n")
    assert len(list_skills(nx)) == 2  # discovery is cached until refreshed
    skill_set(nx).refresh()
    assert [s.name for s in list_skills(nx)] == ["csv-tools", "new", "pdf"]


def test_the_skills_prompt_lists_names_and_descriptions(skills_dir: Path,
                                                        make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus([skills_dir])
    prompt = skills_prompt(nx)
    assert "- csv-tools\n" in prompt + "\n"
    assert "- pdf: Fill in and read PDF forms." in prompt
    assert "`skill` tool" in prompt
    assert skill_set(nx).prompt() == prompt
    assert "broken" not in prompt
    assert skills_prompt(make_nexus([])) == ""


# -- the skill tool -------------------------------------------------------------------------


def test_the_skill_tool_activates_a_skill_and_returns_its_body_and_resources(
        skills_dir: Path, make_nexus: Callable[..., Nexus]) -> None:
    recorder = Recorder()
    nx = make_nexus([skills_dir], plugins=[recorder])
    assert nx.tool("skill").plugin == "nexus.skills"
    result = nx.invoke("skill", {"name": "pdf"})
    assert not result.is_error
    assert "Use `scripts/fill.py` to fill a form." in result.output
    assert "- scripts/fill.py" in result.output and "- reference.md" in result.output
    assert str((skills_dir / "pdf").absolute()) in result.output
    assert result.output_structured["resources"] == ["reference.md", "scripts/fill.py"]
    assert result.output_structured["path"] == str((skills_dir / "pdf").absolute())
    assert [s.name for s in recorder.loaded] == ["pdf"]  # through nx.hook, like any activation
    assert [s.name for s in active_skills(nx)] == ["pdf"]


def test_the_skill_tool_lists_the_skills_in_its_description(skills_dir: Path,
                                                            make_nexus: Callable[..., Nexus]) -> None:
    description = make_nexus([skills_dir]).tool("skill").description
    assert "- pdf: Fill in and read PDF forms." in description and "- csv-tools" in description
    assert "No skills are installed." in make_nexus([]).tool("skill").description


def test_the_skill_tool_with_an_unknown_name_is_an_error_the_model_can_read(
        skills_dir: Path, make_nexus: Callable[..., Nexus]) -> None:
    result = make_nexus([skills_dir]).invoke("skill", {"name": "nope"})
    assert result.is_error and result.error_kind == "failure"
    assert "unknown skill 'nope'; available skills: csv-tools, pdf" in result.error


def test_the_skill_tool_reports_a_skill_that_broke_on_disk(skills_dir: Path,
                                                           make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus([skills_dir])
    list_skills(nx)
    write(skills_dir / "pdf" / "SKILL.md", "no front matter any more\n")
    result = nx.invoke("skill", {"name": "pdf"})
    assert result.is_error and "cannot be loaded" in result.error and "no front matter" in result.error


def test_the_skill_tool_validates_its_arguments(skills_dir: Path, make_nexus: Callable[..., Nexus]) -> None:
    result = make_nexus([skills_dir]).invoke("skill", {})
    assert result.error_kind == "invalid_arguments"


# -- nexus skills ---------------------------------------------------------------------------


def test_nexus_skills_lists_them_and_reports_broken_files_on_stderr(
        skills_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path / "nexus.yaml", "skills: [./skills]\nplugins:\n  active: [nexus.skills]\n")
    assert cli_main(["--trust-config", "--config", str(config), "skills"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("csv-tools") and str((skills_dir / "csv").absolute()) in lines[0]
    assert lines[1].startswith("pdf") and "Fill in and read PDF forms." in lines[1]
    assert "broken" in err and f"{(skills_dir / 'broken' / 'SKILL.md').absolute()}:3:" in err
    assert "broken" not in out


def test_nexus_skills_json(skills_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    config = write(tmp_path / "nexus.yaml", "skills: [./skills]\nplugins:\n  active: []\n")
    assert cli_main(["--trust-config", "--config", str(config), "skills", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in data["skills"]] == ["csv-tools", "pdf"]
    assert data["problems"][0]["line"] == 3


def test_nexus_skills_with_none_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path / "nexus.yaml", "skills: [./empty]\nplugins:\n  active: []\n")
    assert cli_main(["--trust-config", "--config", str(config), "skills"]) == 0
    assert "no skills found in:" in capsys.readouterr().out
