"""Files the host later runs: every way to make the file tools write one must fail (issue 21, item 1).

A write to `.git/config` adding `core.fsmonitor = <payload>` runs the payload at the person's next
`git status`; so do `.git/hooks/*`, a `core.hooksPath`, `.envrc` (direnv), `.vscode/`, and the
`nexus.yaml` the CLI loads. Each attack names such a file another way (a symlink, `..`, case, a
rename, apply_patch's headers, a hard link) and must fail: the workspace is byte for byte what it
was (no file, no folder made), and a real `git status` afterwards runs nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nexus_core import ConfigError, Nexus
from nexus_core.testing import NexusFactory, assert_error, assert_ok

pytestmark = pytest.mark.usefixtures("opener")  # every attempt against both ways of opening

ALLOW_HINT = "A person can allow it with plugins.nexus.tool.file.allow_protected"
GIT_RULE = 'git runs the programs its config and hooks name: rule "**/.git", built in'
GIT = shutil.which("git")


def payload(workspace: Path) -> str:
    """A command that leaves a mark where the test looks: what an attacker's config would run."""
    return f"touch {workspace / 'PWNED'}"


@pytest.fixture
def repo(nexus_workspace: Path) -> Path:
    """The workspace as a real git repository (with a commit, so git status has work to do)."""
    if GIT is None:
        pytest.skip("git is not installed")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"], ["config", "user.name", "t"]):
        subprocess.run([GIT, *args], cwd=nexus_workspace, check=True, env=env, timeout=60)
    (nexus_workspace / "notes.txt").write_text("notes\n")
    subprocess.run([GIT, "add", "notes.txt"], cwd=nexus_workspace, check=True, env=env, timeout=60)
    subprocess.run([GIT, "commit", "-qm", "first"], cwd=nexus_workspace, check=True, env=env, timeout=60)
    return nexus_workspace


def tree(root: Path) -> dict[str, bytes | str]:
    """Every path below `root`: a file's bytes, a symlink's target, "dir" for a folder."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = "-> " + os.readlink(path)
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = path.read_bytes()
    return found


def git_status_runs_nothing(workspace: Path) -> None:
    """The person's next `git status` (and the hook a commit would run) leaves no mark."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run([GIT or "git", "status"], cwd=workspace, env=env, capture_output=True, timeout=60, check=False)
    subprocess.run([GIT or "git", "commit", "-qam", "x", "--allow-empty"], cwd=workspace, env=env,
                   capture_output=True, timeout=60, check=False)
    assert not (workspace / "PWNED").exists(), "git ran what the attack wrote"


def refused(files: Nexus, workspace: Path, tool: str, arguments: dict[str, Any], *, names: str = "") -> str:
    """The call must fail, name the path, the rule and the key, and change nothing at all."""
    before = tree(workspace)
    result = assert_error(files.invoke(tool, arguments), kind="failure")
    error = result.error or ""
    assert " is protected" in error and error.endswith(ALLOW_HINT), error
    if names:
        assert names in error, error
    assert tree(workspace) == before, "the workspace changed"
    return error


# -- the issue's attacks, one per form ----------------------------------------------------------


def test_the_fsmonitor_write_of_the_issue_is_refused(files: Nexus, repo: Path) -> None:
    config = (repo / ".git" / "config").read_text()
    error = refused(files, repo, "write", {
        "path": ".git/config", "content": config + f"[core]\n\tfsmonitor = {payload(repo)}\n"})
    assert error == f".git/config is protected ({GIT_RULE}); nothing was changed. {ALLOW_HINT}"
    git_status_runs_nothing(repo)


def test_a_hook_is_refused(files: Nexus, repo: Path) -> None:
    refused(files, repo, "write", {"path": ".git/hooks/pre-commit", "content": f"#!/bin/sh\n{payload(repo)}\n"})
    refused(files, repo, "write", {"path": ".git/hooks/new/x", "content": "x"})  # no folder made in .git either
    git_status_runs_nothing(repo)


def test_core_hooks_path_through_an_edit_of_git_config_is_refused(files: Nexus, repo: Path) -> None:
    (repo / "hooks").mkdir()
    (repo / "hooks" / "pre-commit").write_text(f"#!/bin/sh\n{payload(repo)}\n")
    (repo / "hooks" / "pre-commit").chmod(0o755)
    refused(files, repo, "edit", {"path": ".git/config", "old_string": "[core]",
                                  "new_string": "[core]\n\thooksPath = hooks"})
    refused(files, repo, "apply_patch", {"patch": "*** Begin Patch\n*** Update File: .git/config\n@@\n [core]\n"
                                                  "+\thooksPath = hooks\n*** End Patch"})
    git_status_runs_nothing(repo)


def test_a_symlink_to_git_is_refused(files: Nexus, repo: Path) -> None:
    (repo / "link").symlink_to(".git")
    refused(files, repo, "write", {"path": "link/config", "content": "[core]\n\tfsmonitor = x\n"},
            names="link/config (which is .git/config) is protected")
    refused(files, repo, "edit", {"path": "link/config", "old_string": "[core]", "new_string": "[core]\n\tx = y"})
    # a folder that does not exist yet in .git is not made through the link either
    refused(files, repo, "write", {"path": "link/hooks2/pre-commit", "content": "x"},
            names="the folder .git/hooks2 would be made for it")
    refused(files, repo, "apply_patch", {"patch": "*** Begin Patch\n*** Add File: link/new/x\n+x\n*** End Patch"})
    # and a symlink as the last component, to a file in .git
    (repo / "cfg").symlink_to(".git/config")
    refused(files, repo, "write", {"path": "cfg", "content": "x"}, names="cfg (which is .git/config)")
    git_status_runs_nothing(repo)


@pytest.mark.parametrize("path", ["./.git/../.git/config", ".git//config", "sub/../.git/config", ".git/./config"])
def test_dot_and_dot_dot_are_refused(files: Nexus, repo: Path, path: str) -> None:
    refused(files, repo, "write", {"path": path, "content": "x"}, names=".git/config is protected")


def test_an_absolute_path_is_refused(files: Nexus, repo: Path) -> None:
    refused(files, repo, "write", {"path": str(repo / ".git" / "config"), "content": "x"})


@pytest.mark.parametrize("path", [".GIT/config", ".Git/hooks/pre-commit", ".g\u200cit/config", "\ufeff.git/config",
                                  ".vſcode/settings.json", ".ENVRC", "NEXUS.YAML"])
def test_case_and_unicode_forms_are_refused_everywhere(files: Nexus, repo: Path, path: str) -> None:
    # Decided: names are compared as case-insensitive filesystems compare them (case folded, NFC,
    # without what HFS+ ignores) on every system. On this case-sensitive filesystem `.GIT/config`
    # is another file, and harmless; refusing it costs nothing, while on macOS, Windows, vfat or
    # a casefold folder it *is* .git/config.
    refused(files, repo, "write", {"path": path, "content": "x"})


def test_apply_patch_adding_a_hook_is_refused(files: Nexus, repo: Path) -> None:
    error = refused(files, repo, "apply_patch", {"patch": "*** Begin Patch\n*** Add File: notes2.txt\n+fine\n"
                                                          "*** Add File: .git/hooks/x\n+#!/bin/sh\n+echo\n"
                                                          "*** End Patch"})
    assert error.startswith(".git/hooks/x is protected"), error
    assert not (repo / "notes2.txt").exists()  # all or nothing


def test_moving_a_harmless_file_onto_a_protected_name_is_refused(files: Nexus, repo: Path) -> None:
    refused(files, repo, "apply_patch", {"patch": "*** Begin Patch\n*** Update File: notes.txt\n*** Move to: .envrc\n"
                                                  f"@@\n-notes\n+{payload(repo)}\n*** End Patch"},
            names=".envrc is protected (direnv runs it")
    refused(files, repo, "apply_patch", {"patch": "*** Begin Patch\n*** Update File: notes.txt\n"
                                                  "*** Move to: .git/hooks/post-checkout\n"
                                                  "@@\n-notes\n+x\n*** End Patch"})


def test_moving_or_deleting_a_protected_file_is_refused(files: Nexus, repo: Path) -> None:
    refused(files, repo, "apply_patch", {"patch": "*** Begin Patch\n*** Delete File: .git/config\n*** End Patch"})
    refused(files, repo, "apply_patch", {"patch": "*** Begin Patch\n*** Update File: .git/HEAD\n*** Move to: head\n"
                                                  "@@\n ref: refs/heads/master\n*** End Patch"})


def test_the_nexus_config_the_cli_discovers_is_refused(files: Nexus, nexus_workspace: Path) -> None:
    server = "plugins:\n  nexus.mcp.client:\n    servers:\n      x: {command: sh, args: [-c, 'touch PWNED'], start: eager}\n"
    error = refused(files, nexus_workspace, "write", {"path": "nexus.yaml", "content": server})
    assert 'rule "**/nexus.yaml", built in' in error and "the nexus command line loads it" in error
    refused(files, nexus_workspace, "write", {"path": "sub/nexus.yaml", "content": server})  # `cd sub; nexus tools`


@pytest.mark.parametrize("path", [".envrc", "sub/.envrc", ".vscode/tasks.json", ".vscode/", ".idea/workspace.xml",
                                  ".devcontainer/devcontainer.json", ".devcontainer.json", ".hg/hgrc",
                                  ".jj/repo/config.toml", ".pre-commit-config.yaml", ".husky/pre-commit",
                                  ".direnv/bin/git", "vendor/lib/.git/config"])
def test_every_built_in_rule_holds(files: Nexus, nexus_workspace: Path, path: str) -> None:
    refused(files, nexus_workspace, "write", {"path": path, "content": "x"})


def test_a_worktree_git_file_is_refused(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / ".git").write_text("gitdir: /somewhere/.git/worktrees/w\n")
    refused(files, nexus_workspace, "write", {"path": ".git", "content": "gitdir: evil\n"})
    refused(files, nexus_workspace, "edit", {"path": ".git", "old_string": "somewhere", "new_string": "evil"})


def test_a_hard_link_cannot_carry_a_write_into_git(files: Nexus, repo: Path) -> None:
    config = repo / ".git" / "config"
    before = config.read_bytes()
    os.link(config, repo / "innocent.txt")
    assert_ok(files.invoke("write", {"path": "innocent.txt", "content": "[core]\n\tfsmonitor = x\n"}))
    assert_ok(files.invoke("edit", {"path": "innocent.txt", "old_string": "fsmonitor = x",
                                    "new_string": f"fsmonitor = {payload(repo)}"}))
    # every write replaces the name's directory entry: the other name keeps the old file
    assert config.read_bytes() == before and os.stat(config).st_nlink == 1
    git_status_runs_nothing(repo)


# -- what the repository and the config redirect to ---------------------------------------------


def test_an_existing_hooks_path_in_the_workspace_is_protected(files: Nexus, repo: Path) -> None:
    subprocess.run([GIT or "git", "config", "core.hooksPath", ".githooks"], cwd=repo, check=True, timeout=60)
    error = refused(files, repo, "write", {"path": ".githooks/pre-commit", "content": f"#!/bin/sh\n{payload(repo)}\n"})
    assert 'git runs the hooks in the folder core.hooksPath names: rule ".githooks", core.hooksPath' in error
    subprocess.run([GIT or "git", "config", "--unset", "core.hooksPath"], cwd=repo, check=True, timeout=60)
    assert_ok(files.invoke("write", {"path": ".githooks/pre-commit", "content": "# no longer a hook\n"}))


def test_a_dot_git_symlink_protects_the_folder_it_names(files: Nexus, repo: Path) -> None:
    (repo / ".git").rename(repo / "gitstore")
    (repo / ".git").symlink_to("gitstore")
    refused(files, repo, "write", {"path": "gitstore/config", "content": "x"}, names="where .git points")
    git_status_runs_nothing(repo)


def test_the_loaded_config_file_is_protected(nexus_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = nexus_workspace / "agent.yaml"
    config.write_text("workspace: .\nskills: []\nplugins:\n  active: [nexus.tool.file]\n")
    monkeypatch.chdir(nexus_workspace)
    with Nexus.from_config("agent.yaml") as nx:
        error = refused(nx, nexus_workspace, "write", {"path": "agent.yaml", "content": "plugins: {active: []}\n"})
        assert 'rule "agent.yaml", the loaded config' in error
        (nexus_workspace / "alias.yaml").symlink_to("agent.yaml")
        refused(nx, nexus_workspace, "write", {"path": "alias.yaml", "content": "x"})


# -- configuring it ------------------------------------------------------------------------------


def test_protected_paths_add_rules_and_allow_protected_lifts_them(nexus_factory: NexusFactory,
                                                                  nexus_workspace: Path) -> None:
    nx = nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {
        "protected_paths": ["Makefile", "**/*.sh"], "allow_protected": [".vscode", "**/.envrc"]}}})
    error = refused(nx, nexus_workspace, "write", {"path": "Makefile", "content": "all:\n"})
    assert 'rule "Makefile", plugins.nexus.tool.file.protected_paths[0]' in error
    refused(nx, nexus_workspace, "write", {"path": "scripts/build.sh", "content": "x"})
    assert_ok(nx.invoke("write", {"path": "sub/Makefile", "content": "all:\n"}))  # the root's only
    assert_ok(nx.invoke("write", {"path": ".vscode/settings.json", "content": "{}\n"}))
    assert_ok(nx.invoke("write", {"path": "deep/er/.envrc", "content": "use nix\n"}))
    refused(nx, nexus_workspace, "write", {"path": "sub/.vscode/tasks.json", "content": "{}"})  # the root's only
    refused(nx, nexus_workspace, "write", {"path": ".git/config", "content": "x"})


def test_reading_a_protected_file_works(files: Nexus, repo: Path) -> None:
    assert "[core]" in assert_ok(files.invoke("read", {"path": ".git/config"})).output_structured["content"]
    assert_ok(files.invoke("grep", {"pattern": "core", "path": ".git"}))


@pytest.mark.parametrize("key", ["protected_paths", "allow_protected"])
def test_a_bad_pattern_is_a_config_error_naming_the_key(nexus_factory: NexusFactory, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"plugins\.nexus\.tool\.file\.{key}\[1\]: '/etc/x': patterns are "
                                          "matched against paths relative to the workspace"):
        nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {key: ["ok", "/etc/x"]}}})
    with pytest.raises(ConfigError, match=rf"plugins\.nexus\.tool\.file\.{key}\[0\]: .*brace depth limit"):
        nexus_factory(plugins=["nexus.tool.file"],
                      config={"plugins": {"nexus.tool.file": {key: ["{" * 9 + "x" + "}" * 9]}}})


def test_nexus_doctor_lists_the_protected_paths(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {
        "protected_paths": ["Makefile"], "allow_protected": [".vscode"]}}})
    line = next(line for line in nx.plugin("nexus.tool.file").nexus_doctor() if line.startswith("protected paths:"))
    assert line == ("protected paths: on, 13 rules (12 built in; 1 from protected_paths); write, edit and "
                    "apply_patch refuse to change them; 1 allowed by allow_protected (.vscode)")
