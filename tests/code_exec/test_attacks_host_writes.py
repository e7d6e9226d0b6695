"""Issue 21's first attack, end to end: a run_code script whose `shell` calls a gate vetoes tries
to make the host run its code later by writing the files the host's programs run.

The range's gate vetoes shell and bash; the script then goes for the file tools: `.git/config`
with `core.fsmonitor = <payload>` (run by the person's next `git status`), a hook, a
`core.hooksPath` redirection, `.envrc`, and the `nexus.yaml` the CLI would load. Every write must
be refused with the protected-path message, the repository must be as it was, and a real `git
status` and commit afterwards must run nothing. (tests/file/test_attacks_host_files.py has every
form of naming such a file; this checks the path from a sandboxed script to the tools.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from attack_helpers import Range

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
              pytest.mark.usefixtures("unharmed")]

GIT = shutil.which("git")
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.fixture
def repo(rng: Range) -> Iterator[Path]:
    """The range's workspace as a git repository, for this test only."""
    if GIT is None:
        pytest.skip("git is not installed")
    workspace = Path(rng.nx.config.workspace)
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"], ["config", "user.name", "t"]):
        subprocess.run([GIT, *args], cwd=workspace, check=True, env=GIT_ENV, timeout=60)
    yield workspace
    for name in os.listdir(workspace):
        path = workspace / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


SCRIPT = '''\
import tools

MARK = {mark!r}


def attempt(fn):
    try:
        fn()
        return "written"
    except tools.ToolVetoed as exc:
        return f"vetoed: {{exc}}"
    except tools.ToolFailed as exc:
        return f"failed: {{exc}}"


def run(ctx):
    found = {{"shell": attempt(lambda: tools.shell(command="git config core.fsmonitor 'touch " + MARK + "'"))}}
    config = tools.read(path=".git/config").content
    found["fsmonitor"] = attempt(lambda: tools.write(
        path=".git/config", content=config + "[core]\\n\\tfsmonitor = touch " + MARK + "\\n"))
    found["hook"] = attempt(lambda: tools.write(path=".git/hooks/pre-commit", content="#!/bin/sh\\ntouch " + MARK + "\\n"))
    found["hooks_path"] = attempt(lambda: tools.edit(path=".git/config", old_string="[core]",
                                                     new_string="[core]\\n\\thooksPath = .h"))
    found["envrc"] = attempt(lambda: tools.apply_patch(patch="*** Begin Patch\\n*** Add File: .envrc\\n+touch " + MARK
                                                            + "\\n*** End Patch"))
    found["nexus_yaml"] = attempt(lambda: tools.write(path="nexus.yaml", content="plugins: {{active: []}}\\n"))
    return found
'''


def test_a_script_whose_shell_is_vetoed_cannot_write_git_config(rng: Range, repo: Path) -> None:
    mark = repo / "PWNED"
    before = {p: p.read_bytes() for p in (repo / ".git").rglob("*") if p.is_file()}
    result = rng.run(SCRIPT.format(mark=str(mark)))
    assert not result.is_error, result.error
    found = result.output_structured["result"]
    assert found["shell"] == "vetoed: shell: vetoed: no shell for scripts on the range", found
    for attack in ("fsmonitor", "hook", "hooks_path", "envrc", "nexus_yaml"):
        assert found[attack].startswith("failed: ") and " is protected" in found[attack], (attack, found)
        assert found[attack].endswith("A person can allow it with plugins.nexus.tool.file.allow_protected"), found
    assert found["fsmonitor"].startswith('failed: write: .git/config is protected (git runs the programs its config '
                                         'and hooks name: rule "**/.git", built in)'), json.dumps(found, indent=1)
    # the repository is as it was, and what the person runs next runs nothing of the script's
    assert {p: p.read_bytes() for p in (repo / ".git").rglob("*") if p.is_file()} == before
    assert not (repo / ".envrc").exists() and not (repo / "nexus.yaml").exists()
    subprocess.run([GIT or "git", "status"], cwd=repo, env=GIT_ENV, capture_output=True, timeout=60, check=False)
    subprocess.run([GIT or "git", "commit", "-q", "--allow-empty", "-m", "x"], cwd=repo, env=GIT_ENV,
                   capture_output=True, timeout=60, check=False)
    assert not mark.exists(), "git ran what the script wrote"
