"""Skill helpers: the .py files of an active skill import as `skills.<name>` in a script; after
the skill is deactivated the import is rejected; run_code's description lists the helpers.

Skills come from nexus_core.skills (discovery, activation, `active_skills`) and the `skill`
tool of the `nexus.skills` plugin.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from host_watch import HostWatch

from nexus_core import Nexus, ToolDef
from nexus_core.testing import NexusFactory, assert_error, assert_ok

skills_api = pytest.importorskip("nexus_core.skills", reason="nexus_core.skills (the skills API) is not there yet")

CE = "nexus.tool.code_exec"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    write(root / "math-helpers" / "SKILL.md", """\
        ---
        name: math-helpers
        description: Arithmetic helpers for run_code scripts.
        ---
        Use skills.math_helpers in run_code.
        """)
    write(root / "math-helpers" / "helpers.py", """\
        def double(x):
            return 2 * x

        def ratio(a, b):
            return a / b
        """)
    write(root / "math-helpers" / "more.py", """\
        import tools

        def triple(x):
            return 3 * x

        def shout(text):
            return tools.echo(text=text.upper()).output
        """)
    write(root / "math-helpers" / "test_helpers.py", "raise RuntimeError('test files are not helpers')\n")
    write(root / "text-tools" / "SKILL.md", "---\nname: text-tools\n---\nText helpers.\n")
    write(root / "text-tools" / "text.py", "def words(s):\n    return s.split()\n")
    write(root / "no-code" / "SKILL.md", "---\nname: no-code\n---\nInstructions only.\n")
    return root


ECHO = ToolDef(name="echo", handler=lambda arguments: arguments["text"],
               input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


@pytest.fixture
def nx(nexus_factory: NexusFactory, skills_dir: Path) -> Nexus:
    return nexus_factory(plugins=[CE, "nexus.skills"], tools=[ECHO],
                         config={"skills": [str(skills_dir)], "plugins": {CE: {"timeout_seconds": 60}}})


def run(nx: Nexus, script: str) -> Any:
    return nx.invoke("run_code", {"script": textwrap.dedent(script)})


USES_MATH = """\
    import skills.math_helpers as h
    from skills import math_helpers

    def run(ctx):
        return [h.double(21), math_helpers.triple(2), math_helpers.shout("hi")]
    """


def test_an_active_skills_py_files_import_as_skills_name(nx: Nexus) -> None:
    skills_api.activate_skill(nx, "math-helpers")
    result = assert_ok(run(nx, USES_MATH))
    assert result.output_structured["result"] == [42, 6, "HI"]


def test_a_skill_that_is_not_active_cannot_be_imported(nx: Nexus) -> None:
    result = assert_error(run(nx, USES_MATH))
    assert result.error.startswith("script rejected: line 1: skill 'math_helpers' is not active (active skills: none)")


def test_after_deactivation_the_import_is_rejected(nx: Nexus) -> None:
    skills_api.activate_skill(nx, "math-helpers")
    assert_ok(run(nx, USES_MATH))
    assert skills_api.deactivate_skill(nx, "math-helpers")
    assert_error(run(nx, USES_MATH), "script rejected: line 1: skill 'math_helpers' is not active")


def test_the_description_lists_the_helpers_of_active_skills_only(nx: Nexus) -> None:
    assert "skills.math_helpers" not in nx.tool("run_code").description
    skills_api.activate_skill(nx, "math-helpers")
    skills_api.activate_skill(nx, "no-code")
    description = nx.tool("run_code").description
    assert "Skill helpers: skills.math_helpers." in description
    assert "skills.no_code" not in description  # a skill without .py files has no helpers
    skills_api.deactivate_skill(nx, "math-helpers")
    assert "skills.math_helpers" not in nx.tool("run_code").description


def test_a_skill_activated_through_the_skill_tool_is_importable(nx: Nexus) -> None:
    assert_ok(nx.invoke("skill", {"name": "math-helpers"}))
    assert assert_ok(run(nx, USES_MATH)).output_structured["result"][0] == 42


def test_two_active_skills_are_each_their_own_module(nx: Nexus) -> None:
    skills_api.activate_skill(nx, "math-helpers")
    skills_api.activate_skill(nx, "text-tools")
    result = assert_ok(run(nx, """\
        import skills.math_helpers as m
        import skills.text_tools as t

        def run(ctx):
            return {"n": m.double(len(t.words("a b c"))), "t_has_double": hasattr(t, "double")}
        """))
    assert result.output_structured["result"] == {"n": 6, "t_has_double": False}


def test_test_files_of_a_skill_are_not_loaded(nx: Nexus) -> None:
    """test_helpers.py raises when executed; the script runs, so it was left out."""
    skills_api.activate_skill(nx, "math-helpers")
    assert_ok(run(nx, "import skills.math_helpers as h\n\ndef run(ctx):\n    return h.double(1)\n"))


def test_an_error_inside_a_helper_names_the_scripts_line(nx: Nexus) -> None:
    skills_api.activate_skill(nx, "math-helpers")
    result = assert_error(run(nx, """\
        import skills.math_helpers as h

        def run(ctx):
            return h.ratio(1, 0)
        """))
    assert result.error == "runtime error: line 4: ZeroDivisionError: division by zero"


def test_an_edited_helper_is_used_by_the_next_run(nx: Nexus, skills_dir: Path) -> None:
    skills_api.activate_skill(nx, "math-helpers")
    script = "import skills.math_helpers as h\n\ndef run(ctx):\n    return h.double(5)\n"
    assert assert_ok(run(nx, script)).output_structured["result"] == 10
    write(skills_dir / "math-helpers" / "helpers.py", "def double(x):\n    return x + x + 1\n")
    assert assert_ok(run(nx, script)).output_structured["result"] == 11


def test_a_broken_helper_breaks_only_the_scripts_that_import_it(nx: Nexus, skills_dir: Path) -> None:
    """Helpers load when imported: an active skill whose .py file cannot load here (a library
    that is not installed, a CLI script) must not take every other script down with it."""
    write(skills_dir / "broken" / "SKILL.md", "---\nname: broken\n---\nShips a script that needs a missing library.\n")
    write(skills_dir / "broken" / "cli.py", "import library_that_is_not_installed\n")
    skills_api.skill_set(nx).refresh()
    skills_api.activate_skill(nx, "math-helpers")
    skills_api.activate_skill(nx, "broken")
    assert assert_ok(run(nx, USES_MATH)).output_structured["result"][0] == 42
    assert_ok(run(nx, "def run(ctx):\n    return 1\n"))
    result = assert_error(run(nx, "import skills.broken\n\ndef run(ctx):\n    return 1\n"))
    assert result.error == "runtime error: line 1: ModuleNotFoundError: No module named 'library_that_is_not_installed'"


# -- helpers that try to hand the host's files to scripts (issue 11) ------------------------------


@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "host" / "secret.py"
    write(secret, "PASSWORD = 'hunter2-of-the-host'\n")
    secret.chmod(0o600)
    return secret


def helper_skill(skills_dir: Path, name: str) -> Path:
    folder = skills_dir / name
    write(folder / "SKILL.md", f"---\nname: {name}\n---\nHelpers.\n")
    return folder


IMPORT_IT = """\
    import skills.{module} as h

    def run(ctx):
        return sorted(n for n in dir(h) if not n.startswith("_"))
    """


def test_a_helper_that_is_a_symlink_out_of_the_skill_is_refused(nx: Nexus, skills_dir: Path,
                                                                 host_secret: Path) -> None:
    """The host reads helpers as itself (root here) and hands them to every script: a link to a
    file outside the skill's folder is not followed (the read tool refuses the same link)."""
    folder = helper_skill(skills_dir, "leaky")
    write(folder / "fine.py", "def ok():\n    return 1\n")
    (folder / "secret.py").symlink_to(host_secret)
    skills_api.skill_set(nx).refresh()
    skills_api.activate_skill(nx, "leaky")
    with HostWatch() as watch:
        result = assert_error(run(nx, IMPORT_IT.format(module="leaky")))
    watch.assert_host_fine()
    assert result.error.endswith("ImportError: skills.leaky: helper 'secret.py' is a symbolic link; helpers must "
                                 "be files in the skill's folder"), result.error
    assert "hunter2" not in result.output
    # a script that does not import it still runs
    assert_ok(run(nx, "def run(ctx):\n    return 1\n"))


def test_a_helper_too_large_or_too_many_is_refused_with_the_rule(nx: Nexus, skills_dir: Path) -> None:
    from nexus_tool_code_exec.host.skill_helpers import MAX_HELPER_BYTES, MAX_HELPER_FILES

    big = helper_skill(skills_dir, "big")
    write(big / "huge.py", "X = 1\n" + "#" * MAX_HELPER_BYTES + "\n")
    many = helper_skill(skills_dir, "many")
    for i in range(MAX_HELPER_FILES + 1):
        write(many / f"m{i}.py", f"V{i} = {i}\n")
    skills_api.skill_set(nx).refresh()
    skills_api.activate_skill(nx, "big")
    skills_api.activate_skill(nx, "many")
    result = assert_error(run(nx, IMPORT_IT.format(module="big")))
    assert f"ImportError: skills.big: helper 'huge.py' is {MAX_HELPER_BYTES + 7} bytes, more than the " \
           f"{MAX_HELPER_BYTES} a helper may be" in result.error
    result = assert_error(run(nx, IMPORT_IT.format(module="many")))
    assert f"ImportError: skills.many: {MAX_HELPER_FILES + 1} helper files, more than the {MAX_HELPER_FILES} " \
           "a skill may have" in result.error


def test_a_fifo_among_the_helpers_does_not_hang_the_host(nx: Nexus, skills_dir: Path) -> None:
    folder = helper_skill(skills_dir, "piped")
    os.mkfifo(folder / "pipe.py")
    skills_api.skill_set(nx).refresh()
    skills_api.activate_skill(nx, "piped")
    with HostWatch() as watch:  # opening a FIFO for reading would wait for a writer for ever
        result = assert_error(run(nx, IMPORT_IT.format(module="piped")))
    watch.assert_host_fine()
    assert "ImportError: skills.piped: helper 'pipe.py' is not a regular file" in result.error
