"""Agent distributions: a package that ships a config and depends on the plugins it names, so
that `pip install ./acme-agent` gives a command `acme-agent` that is the whole `nexus` command
line with that config (docs/distributions.md).

Two halves. `nexus init NAME` writes such a package (`plan_distribution` checks the name and
the plugins, `render_distribution` makes its files). The installed package declares itself in
the entry-point group `nexus.distributions` (entry name: the distribution's name; value: its
import package, which holds `nexus.yaml`), and its console script calls
`nexus_core.cli.run_distribution(name)`, which finds it with `find_distribution`.

The installed config is trusted because it is installed: it is read from the package, as its
code is, never from the working folder; a `./nexus.yaml` there or `$NEXUS_CONFIG` is not read
(the command line says so when one is there), and `--config` is refused.
"""

from __future__ import annotations

import difflib
import keyword
import re
import sys
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path

import attrs

#: the entry-point group an installed distribution declares itself in
DISTRIBUTIONS_GROUP = "nexus.distributions"
#: the config's file name inside the distribution's package (the file tools protect every
#: `nexus.yaml` in a workspace, so an editable install's config there is protected too)
CONFIG_RESOURCE = "nexus.yaml"

#: PEP 508's rule for a distribution name (what pip and PyPI accept)
_VALID_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)

#: the first-party plugins and the distributions that give them, for plugins not installed here
FIRST_PARTY = {
    "nexus.skills": "nexus-rt-core",
    "nexus.tool.todo": "nexus-rt-core",
    "nexus.tool.question": "nexus-rt-core",
    "nexus.tool.shell": "nexus-rt-tool-shell",
    "nexus.tool.file": "nexus-rt-tool-file",
    "nexus.tool.code_exec": "nexus-rt-tool-code-exec",
    "nexus.tool.web": "nexus-rt-tool-web",
    "nexus.mcp.client": "nexus-rt-mcp",
    "nexus.agent": "nexus-rt-agent",
    "nexus.provider.openai": "nexus-rt-provider-openai",
    "nexus.provider.anthropic": "nexus-rt-provider-anthropic",
    "nexus.provider.gemini": "nexus-rt-provider-gemini",
}
#: always in a distribution: the core's own plugins
CORE_PLUGINS = ("nexus.skills", "nexus.tool.todo", "nexus.tool.question")
#: the plugins a distribution runs when `nexus init` is given no `--plugin` (the model's
#: provider is added to them)
DEFAULT_PLUGINS = ("nexus.agent", "nexus.tool.shell", "nexus.tool.file", "nexus.tool.code_exec", "nexus.tool.web",
                   "nexus.mcp.client")
DEFAULT_MODEL = "openai:gpt-4.1"


class DistributionError(ValueError):
    """`nexus init` cannot make the package asked for; the message says what to change."""


@attrs.frozen
class InstalledDistribution:
    """A distribution found in `nexus.distributions`: its name, version, import package and the
    path of its installed config."""

    name: str
    version: str
    package: str
    config: str


def find_distribution(name: str) -> InstalledDistribution | None:
    """The installed distribution called `name` (as its entry point names it), or None;
    DistributionError when its package cannot be imported."""
    for ep in metadata.entry_points(group=DISTRIBUTIONS_GROUP):
        if ep.name == name:
            import importlib.resources

            package = ep.module
            try:
                config = importlib.resources.files(package).joinpath(CONFIG_RESOURCE)
            except Exception as exc:  # noqa: BLE001 (whatever its import raised, said plainly)
                from ._plugins import describe_exception

                raise DistributionError(f"the package {package!r} of the distribution {name!r} cannot be imported: "
                                        f"{describe_exception(exc)}; install it again") from None
            version = ep.dist.version if ep.dist is not None else "?"
            return InstalledDistribution(name, version, package, str(config))
    return None


# -- nexus init -------------------------------------------------------------------------------------


@attrs.frozen
class DistributionPlan:
    """What `nexus init` writes: the folder, names, dependencies and the config's text."""

    folder: Path
    name: str
    package: str
    #: requirement strings, sorted: nexus-rt-core first, then the plugins' distributions
    dependencies: tuple[str, ...]
    plugins: tuple[str, ...]
    model: str | None
    config_text: str
    #: how the README names the folder (`./acme-agent`, as the command was given)
    shown: str


def import_name(name: str) -> str:
    """`acme-agent` -> `acme_agent`: the package's import name (PEP 503 normalisation, `_`)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def check_name(name: str) -> str:
    """The import name for distribution name `name`, or DistributionError saying why it cannot
    be one."""
    if not _VALID_NAME.match(name):
        raise DistributionError(
            f"{name!r} is not a valid distribution name: letters, digits, '-', '_' and '.', starting and ending "
            "with a letter or digit (e.g. acme-agent)")
    package = import_name(name)
    if not package.isidentifier() or keyword.iskeyword(package):
        raise DistributionError(f"{name!r} makes the import name {package!r}, which is not a Python identifier; "
                                "start it with a letter (e.g. acme-agent)")
    if package == "nexus" or package.startswith("nexus_") or package in sys.stdlib_module_names:
        raise DistributionError(f"{name!r} would install the module {package!r}, which is "
                                f"{'one of Nexus' if package.startswith('nexus') else 'in the standard library'}'s; "
                                "choose another name")
    # a name or module someone else's package has here: installing this one would replace it
    # (an agent distribution made again under its own name is fine)
    ours = {ep.module.split(".")[0] for ep in metadata.entry_points(group=DISTRIBUTIONS_GROUP)}
    try:
        other = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        pass
    else:
        if not any(ep.group == DISTRIBUTIONS_GROUP for ep in other.entry_points):
            raise DistributionError(f"{name!r} is the name of a distribution installed here ({other.metadata['Name']} "
                                    f"{other.version}); installing yours would replace it: choose another name")
    import importlib.util

    if package not in ours and importlib.util.find_spec(package) is not None:
        raise DistributionError(f"{name!r} would install the module {package!r}, and one of that name is "
                                "importable here already; choose another name")
    return package


def _installed_plugins() -> dict[str, tuple[str, str]]:
    """plugin id -> (distribution, version), for every installed plugin."""
    from ._plugins import ENTRY_POINT_GROUP

    found: dict[str, tuple[str, str]] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.dist is not None:
            found.setdefault(ep.name, (ep.dist.metadata["Name"], ep.dist.version))
    return found


def _core_version() -> str:
    from . import __version__

    return __version__


def requirements(plugins: Iterable[str]) -> list[str]:
    """The requirement strings for the distributions that give `plugins` (the version installed
    here as the least), nexus-rt-core first; DistributionError for a plugin nobody gives."""
    installed = _installed_plugins()
    wanted: dict[str, str] = {"nexus-rt-core": _core_version()}
    for plugin in plugins:
        if plugin in installed:
            dist, version = installed[plugin]
        elif plugin in FIRST_PARTY:
            dist, version = FIRST_PARTY[plugin], _core_version()
        else:
            known = sorted(set(installed) | set(FIRST_PARTY))
            close = difflib.get_close_matches(plugin, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise DistributionError(f"--plugin {plugin}: no installed plugin is called {plugin!r}{hint}; install "
                                    "the package that gives it first (`nexus plugins` lists what is installed)")
        wanted.setdefault(dist, version)
    core = f"nexus-rt-core>={wanted.pop('nexus-rt-core')}"
    return [core, *(f"{dist}>={version}" for dist, version in sorted(wanted.items()))]


def _provider_plugin(model: str) -> str | None:
    provider = model.split(":", 1)[0]
    plugin = f"nexus.provider.{provider}"
    return plugin if plugin in FIRST_PARTY or plugin in _installed_plugins() else None


def _generated_config(name: str, model: str, plugins: Sequence[str]) -> str:
    active = "\n".join(f"    - {p}" for p in plugins)
    return (f"# {name}'s config: installed with it, so trusted as its code is (a ./nexus.yaml in the\n"
            f"# working folder is not read). The workspace is the folder {name} runs in (or --workspace).\n"
            f"# Change it here, then reinstall. Every key: docs/configuration.md.\n"
            f"model: {model}                 # --model on chat and ask wins\n"
            f"plugins:\n"
            f"  active:                             # what {name} runs; its dependencies give them\n"
            f"{active}\n")


def plan_distribution(path: str, *, plugins: Sequence[str] = (), model: str | None = None,
                      config_file: str | None = None) -> DistributionPlan:
    """Check what `nexus init PATH` was asked for and work out what it writes. PATH's last part
    is the distribution's name; DistributionError says what is wrong (nothing is written)."""
    from ._config import ConfigError, decode_config, load_config, read_config_bytes

    folder = Path(path)
    name = folder.name
    package = check_name(name)
    if folder.exists() or folder.is_symlink():
        raise DistributionError(f"{path} exists already; nexus init writes a new folder (choose another name, or "
                                "remove it)")
    if config_file is not None:
        if model is not None:
            raise DistributionError(f"--model goes without --config: {config_file} is shipped as it is (set "
                                    "`model:` in it)")
        try:
            config_text = decode_config(read_config_bytes(config_file, config_file), config_file)
            cfg = load_config(config_file, text=config_text)
        except ConfigError as exc:
            raise DistributionError("; ".join(exc.problems)) from None
        if cfg.active is not None and plugins:
            raise DistributionError(f"--plugin goes without a config that lists plugins.active ({config_file} "
                                    "does): the config chooses the plugins")
        chosen = list(cfg.active) if cfg.active is not None else list(plugins or DEFAULT_PLUGINS)
        chosen += [p for p in cfg.plugin_sections if p not in chosen]
        model = cfg.model
    else:
        model = model or DEFAULT_MODEL
        from ._config import split_model

        try:
            split_model(model)
        except ValueError as exc:
            raise DistributionError(f"--model {model}: {exc}") from None
        chosen = list(plugins or DEFAULT_PLUGINS)
    if model is not None:
        provider = _provider_plugin(model)
        if provider is None and not plugins:
            raise DistributionError(f"--model {model}: no installed plugin gives the provider "
                                    f"{model.split(':', 1)[0]!r}; name the one that does with --plugin")
        if provider is not None and provider not in chosen:
            chosen.append(provider)
    chosen = [*CORE_PLUGINS, *(p for p in dict.fromkeys(chosen) if p not in CORE_PLUGINS)]
    dependencies = tuple(requirements(chosen))
    if config_file is None:
        config_text = _generated_config(name, model or DEFAULT_MODEL, chosen)
    shown = path if folder.is_absolute() or path.startswith(("./", "../")) else f"./{path}"
    return DistributionPlan(folder, name, package, dependencies, tuple(chosen), model, config_text, shown)


def render_distribution(plan: DistributionPlan) -> dict[str, str]:
    """The files of the package, by path relative to its folder."""
    name, package = plan.name, plan.package
    deps = "".join(f'    "{d}",\n' for d in plan.dependencies)
    pyproject = f"""\
[build-system]
requires = ["hatchling>=1.20"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "0.1.0"
description = "{name}: a Nexus agent distribution (made by nexus init)"
readme = "README.md"
requires-python = ">=3.11"
dependencies = [
{deps}]

# `{name}` is the whole nexus command line with this distribution's config
[project.scripts]
{name} = "{package}.__main__:main"

# how Nexus finds the installed config: the package that holds {CONFIG_RESOURCE}
[project.entry-points."{DISTRIBUTIONS_GROUP}"]
{name} = "{package}"

[tool.hatch.build.targets.wheel]
packages = ["src/{package}"]
"""
    init = f'"""{name}: a Nexus agent distribution. Its config is {CONFIG_RESOURCE}, beside this file."""\n'
    main = f'''\
"""`{name}` (and `python -m {package}`): the nexus command line with {name}'s installed config."""

from nexus_core.cli import run_distribution


def main() -> None:
    run_distribution("{name}")


if __name__ == "__main__":
    main()
'''
    plugins = "\n".join(f"- `{p}`" for p in plan.plugins)
    readme = f"""\
# {name}

A Nexus agent distribution: one install gives the command `{name}`, which is the whole `nexus`
command line with the config this package ships (`src/{package}/{CONFIG_RESOURCE}`). It was made
by `nexus init` (docs/distributions.md in the Nexus repository).

## Install

Nexus is not on PyPI yet, so pip takes its packages from the wheels a Nexus checkout builds
(`./scripts/build-wheels` puts them in its `dist/`). From the folder `nexus init` ran in:

```sh
pip install --find-links dist {plan.shown}
```

## Run

```sh
{name} tools                 # the tools it gives a model
{name} ask "What is in this folder?"
{name} chat                  # a conversation (Ctrl-D ends it)
{name} mcp serve             # its tools to an MCP client, over stdio
```

The workspace is the folder `{name}` runs in (or `--workspace DIR`). Its config is read from the
installed package, never from the working folder: a `./nexus.yaml` there is not read (it says so),
nor is `$NEXUS_CONFIG`, and `--config` is refused (`nexus --config FILE` runs another config). To
change the config, edit `src/{package}/{CONFIG_RESOURCE}` and install the package again.

## Plugins

{plugins}
"""
    return {
        "pyproject.toml": pyproject,
        "README.md": readme,
        f"src/{package}/__init__.py": init,
        f"src/{package}/__main__.py": main,
        f"src/{package}/{CONFIG_RESOURCE}": plan.config_text,
        f"src/{package}/py.typed": "",
    }


def write_distribution(plan: DistributionPlan) -> list[Path]:
    """Write the package's files into its new folder; returns them. The folder is made here, so
    an existing one (checked by `plan_distribution`, and again now) is never written into."""
    files = render_distribution(plan)
    plan.folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        plan.folder.mkdir()
    except FileExistsError:
        raise DistributionError(f"{plan.folder} exists already; nexus init writes a new folder") from None
    written = []
    for relative, text in files.items():
        target = plan.folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written
