"""Config and SKILL.md front matter written to hurt the host: an alias bomb, a recursive alias,
deep nesting, a huge file, bytes that are not text. Each must be a clear error naming the file and
line, while the process that reads it stays small.

Each attempt is read in a child process (a real `python`, with the packages of this checkout)
under a 1 GiB address-space limit, which reports its own peak memory and CPU time: a loader that
expanded the aliases would die of MemoryError there instead of taking the test runner down.
The bounds are generous (a bomb left unchecked needs gigabytes and many seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nexus_core import ConfigError
from nexus_core._config import load_config
from nexus_core._config import MAX_CONFIG_BYTES
from nexus_core._yaml import MAX_YAML_DEPTH, MAX_YAML_VALUES
from nexus_core.skills import MAX_FRONT_MATTER_BYTES, MAX_SKILL_BYTES, discover_skills, load_skill

#: the classic "billion laughs" in YAML: 9 levels of 9 aliases each, 9**9 strings once expanded,
#: in under 400 bytes
BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi"))

#: the same through merge keys: each mapping merges the one before twice
MERGE_BOMB = "a0: &a0 {k0: x, k1: x, k2: x, k3: x, k4: x, k5: x, k6: x, k7: x, k8: x}\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)) + "m:\n  <<: *a8\n"

# Reads one config or SKILL.md (argv: kind, path) in this interpreter, limited to 1 GiB of address
# space, and prints what happened with the peak memory and CPU time it took.
READER = textwrap.dedent("""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from nexus_core import ConfigError
    from nexus_core._config import load_config
    from nexus_core.skills import SkillError, load_skill
    kind, path = sys.argv[1], sys.argv[2]
    try:
        if kind == "config":
            load_config(path)
        elif kind == "skill":
            load_skill(path)
        outcome = "loaded"
    except (ConfigError, SkillError) as exc:
        outcome = str(exc)
    except BaseException as exc:
        outcome = f"{type(exc).__name__}: {exc}"[:500]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"outcome": outcome, "peak_mib": usage.ru_maxrss / 1024,
                      "cpu_seconds": usage.ru_utime + usage.ru_stime}))
""")


def read_in_child(kind: str, path: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", READER, kind, str(path)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What reading a small, good config costs the same child: the yardstick for the attacks."""
    path = tmp_path_factory.mktemp("baseline") / "nexus.yaml"
    path.write_text("workspace: .\nskills: []\n")
    report = read_in_child("config", path)
    assert report["outcome"] == "loaded"
    return report


def assert_bounded(report: dict[str, Any], baseline: dict[str, Any]) -> None:
    """The attempt cost the child at most 100 MiB and 10 CPU seconds more than a small config."""
    grew = report["peak_mib"] - baseline["peak_mib"]
    assert grew < 100, f"reading it took {grew:.0f} MiB more than a small config: {report}"
    spent = report["cpu_seconds"] - baseline["cpu_seconds"]
    assert spent < 10, f"reading it took {spent:.1f} CPU seconds more than a small config: {report}"


def test_the_bomb_is_small_and_huge() -> None:
    assert len(BOMB) < 400 and BOMB.count("*") == 8 * 9


def test_an_alias_bomb_in_the_config_is_an_error_naming_file_and_line(tmp_path: Path,
                                                                     baseline: dict[str, Any]) -> None:
    path = tmp_path / "nexus.yaml"
    path.write_text(BOMB)
    report = read_in_child("config", path)
    # the first mapping to pass the bound: f stands for 9**6 strings (line 6)
    assert report["outcome"] == (f"{path}:6: aliases expand this value to more than {MAX_YAML_VALUES} values, "
                                 "the most Nexus reads from one YAML document (an alias bomb?)")
    assert_bounded(report, baseline)


def test_a_merge_key_bomb_is_refused_too(tmp_path: Path, baseline: dict[str, Any]) -> None:
    path = tmp_path / "nexus.yaml"
    path.write_text(MERGE_BOMB)
    report = read_in_child("config", path)
    assert report["outcome"].startswith(f"{path}:") and "alias bomb" in report["outcome"]
    assert_bounded(report, baseline)


def test_a_recursive_alias_is_an_error_not_a_recursion_crash(tmp_path: Path) -> None:
    path = tmp_path / "nexus.yaml"
    path.write_text("workspace: .\nplugins: &p\n  nexus.tool.shell: *p\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [(f"{path}:2: this list or mapping holds an alias to itself "
                                    "(a recursive alias), which cannot be expanded")]


@pytest.mark.parametrize("style", ["flow", "block"])
def test_nesting_deeper_than_the_bound_is_an_error_with_its_line(tmp_path: Path, style: str) -> None:
    depth = 5000 if style == "flow" else 200
    path = tmp_path / "nexus.yaml"
    if style == "flow":
        path.write_text("workspace: .\nplugins:\n  x: " + "[" * depth + "]" * depth + "\n")
    else:
        path.write_text("workspace: .\nplugins:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(depth)))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [problem] = info.value.problems
    assert f"nest more than {MAX_YAML_DEPTH} levels deep here" in problem
    line = int(problem.split(":")[1])
    assert line == (3 if style == "flow" else MAX_YAML_DEPTH + 1)  # k62, the 65th level counting the top


def test_nesting_made_deep_by_aliases_is_refused(tmp_path: Path) -> None:
    """Each level alone is shallow; the aliases stack them past the bound."""
    levels = ["l0: &l0 [x]"] + [f"l{i}: &l{i} [[[[*l{i - 1}]]]]" for i in range(1, 40)]
    path = tmp_path / "nexus.yaml"
    path.write_text("\n".join(levels) + "\n")
    with pytest.raises(ConfigError, match=f"nest more than {MAX_YAML_DEPTH} levels deep"):
        load_config(path)


def test_a_config_file_past_the_size_cap_is_refused_unread(tmp_path: Path, baseline: dict[str, Any]) -> None:
    path = tmp_path / "nexus.yaml"
    with open(path, "w") as f:  # 64 MiB of comments: valid YAML, only too big
        f.write("workspace: .\n")
        f.writelines(("#" * 1023 + "\n") * 64 for _ in range(1 << 10))
    report = read_in_child("config", path)
    assert report["outcome"] == (f"{path}: the config file is larger than {MAX_CONFIG_BYTES} bytes "
                                 f"({MAX_CONFIG_BYTES >> 10} KiB), the most Nexus reads; is it the right file?")
    assert_bounded(report, baseline)


def test_a_config_that_is_not_utf8_is_an_error_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "nexus.yaml"
    path.write_bytes(b"workspace: .\nskills: [caf\xe9]\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [f"{path}:2: the config is not UTF-8 text (byte 0xe9 at offset 25: invalid continuation byte); save it as UTF-8"]


def test_an_integer_too_long_to_convert_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "nexus.yaml"
    path.write_text("plugins:\n  nexus.tool.shell:\n    timeout_seconds: " + "9" * 5000 + "\n")
    with pytest.raises(ConfigError, match=f"{path}:1: a value cannot be read: Exceeds the limit"):
        load_config(path)


# -- SKILL.md front matter: a skill may be a download ---------------------------------------------


def skill_file(folder: Path, front: str, body: str = "Use it.\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "SKILL.md"
    path.write_text(f"---\n{front}---\n{body}")
    return path


def test_an_alias_bomb_in_front_matter_is_a_skill_problem(tmp_path: Path, baseline: dict[str, Any]) -> None:
    path = skill_file(tmp_path / "bomb", "name: bomb\n" + BOMB)
    report = read_in_child("skill", path)
    # the front matter starts on the file's line 2; `f` is its 7th line
    assert report["outcome"] == (f"{path}:8: the front matter's YAML: aliases expand this value to more than "
                                 f"{MAX_YAML_VALUES} values, the most Nexus reads from one YAML document "
                                 "(an alias bomb?)")
    assert_bounded(report, baseline)


def test_a_bomb_among_good_skills_leaves_the_good_ones_loading(tmp_path: Path) -> None:
    skill_file(tmp_path / "skills" / "good", "name: good\ndescription: fine\n")
    skill_file(tmp_path / "skills" / "bomb", "name: bomb\n" + BOMB)
    skill_file(tmp_path / "skills" / "loop", "name: loop\nmeta: &m {again: *m}\n")
    scan = discover_skills([tmp_path / "skills"])
    assert [s.name for s in scan.skills] == ["good"]
    assert sorted((Path(p.path).parent.name, p.line) for p in scan.problems) == [("bomb", 8), ("loop", 3)]
    assert all("the front matter's YAML:" in p.message for p in scan.problems)


def test_front_matter_past_its_cap_is_refused(tmp_path: Path) -> None:
    filler = "".join(f"k{i}: {'x' * 60}\n" for i in range(MAX_FRONT_MATTER_BYTES // 60))
    path = skill_file(tmp_path / "big", "name: big\n" + filler)
    with pytest.raises(ValueError) as info:
        load_skill(path)
    assert str(info.value) == (f"{path}:1: the front matter is larger than {MAX_FRONT_MATTER_BYTES} bytes "
                               f"({MAX_FRONT_MATTER_BYTES >> 10} KiB), the most a SKILL.md may hold there")


def test_a_skill_file_past_its_cap_is_refused_unread(tmp_path: Path, baseline: dict[str, Any]) -> None:
    path = skill_file(tmp_path / "huge", "name: huge\n", body="")
    with open(path, "a") as f:  # 64 MiB of body
        f.writelines(("x" * 1023 + "\n") * 64 for _ in range(1 << 10))
    report = read_in_child("skill", path)
    assert report["outcome"] == (f"{path}: the file is larger than {MAX_SKILL_BYTES} bytes "
                                 f"({MAX_SKILL_BYTES >> 20} MiB), the most a SKILL.md may be; move long "
                                 "material to resource files beside it")
    assert_bounded(report, baseline)
