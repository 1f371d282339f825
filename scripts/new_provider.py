"""Scaffold a new container-cloud provider from corral's provider kit.

    python scripts/new_provider.py NAME [--root DIR]

writes, under the repository ``DIR`` (default: this one):

* ``src/corral/providers/NAME/``: a provider built on the kit, for a container cloud with a
  plain REST API (list offers, create a machine, list, read and delete machines): its
  settings (``CORRAL_NAME_*`` through :mod:`corral.providers.common.env_settings`, the API key
  through :mod:`corral.providers.common.credentials`), its API client
  (:class:`corral.providers.http.ProviderHTTP`), what a machine is created with (the one
  delivery format and the node bootstrap), its node's boot (the one boot path of
  :mod:`corral.agent.boot`) and the provider (create-or-adopt by launch key, a listing cache,
  :class:`corral.errors.MaybeLaunched` when a create's outcome is unknown);
* ``tests/providers/NAME/``: a fake of that API on loopback that runs each machine's command
  as a local "container" (the agent for real), its fixtures and the shared contract suite
  (``tests/providers/contract.py``) against it;
* the registry line in ``src/corral/providers/registry.py``.

The generated code runs and its contract suite passes as generated; what is left to the
provider's author is the cloud itself: its real paths and bodies in ``api.py`` and
``bootstrap.py``, its status words, and its published OpenAPI document in ``contracts/`` with
the fake bound to it (see ``docs/providers.md``, "A new provider"). The import-layering
checks (``scripts/lint_imports.py``) cover the new folder without any list being touched.
Nothing is overwritten: an existing folder or registry entry is an error.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parent.parent
NAME_RE = re.compile(r"^[a-z][a-z0-9]{1,23}$")
REGISTRY = "src/corral/providers/registry.py"
_REGISTRY_END = '    "pool": "corral.providers.pool:PoolProvider",\n'

#: the templates: ``provider_template/src/*.tmpl`` go to the provider's folder,
#: ``provider_template/tests/*.tmpl`` to its test folder (``string.Template``: ``$name``,
#: ``${Cls}``, ``$NAME``, ``$Title``)
TEMPLATES = Path(__file__).resolve().parent / "provider_template"


def render(text: str, name: str) -> str:
    cls = name.capitalize()
    return Template(text).substitute(name=name, Cls=cls, NAME=name.upper(), Title=cls)


def files(name: str) -> dict[str, str]:
    """What the scaffold writes, by path relative to the repository."""
    where = {"src": f"src/corral/providers/{name}", "tests": f"tests/providers/{name}"}
    out = {}
    for template in sorted(TEMPLATES.glob("*/*.py.tmpl")):
        rel = f"{where[template.parent.name]}/{template.name.removesuffix('.tmpl')}"
        out[rel] = render(template.read_text(), name)
    return out


def scaffold(name: str, root: Path) -> list[Path]:
    """Write the new provider ``name`` under ``root``; the paths written (registry included).
    SystemExit with one line if ``name`` is no provider name or is taken."""
    if not NAME_RE.match(name):
        raise SystemExit(f"new_provider: {name!r} is not a provider name (a-z, 0-9, 2-24 long)")
    registry = root / REGISTRY
    text = registry.read_text()
    if f'"{name}":' in text or (root / f"src/corral/providers/{name}").exists():
        raise SystemExit(f"new_provider: provider {name!r} exists already")
    if _REGISTRY_END not in text:
        raise SystemExit(f"new_provider: {REGISTRY} has no provider list to add {name!r} to")
    written = []
    for rel, content in files(name).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
    line = f'    "{name}": "corral.providers.{name}:{name.capitalize()}Provider",\n'
    registry.write_text(text.replace(_REGISTRY_END, _REGISTRY_END + line))
    return [*written, registry]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the provider's name (lower case letters and digits)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    written = scaffold(args.name, root)
    for path in written:
        print(path.relative_to(root))
    tidy(written[:-1], root)
    return 0


def tidy(paths: list[Path], root: Path) -> None:
    """Sort the new files' imports (their order depends on the provider's name) and format
    them with ruff, when it is installed."""
    ruff = shutil.which("ruff")
    if ruff is None:
        print("new_provider: ruff is not installed: run `ruff check --fix` on the new files")
        return
    names = [str(p) for p in paths]
    subprocess.run([ruff, "check", "--fix", "--select", "I", "-q", *names], cwd=root, check=False)
    subprocess.run([ruff, "format", "-q", *names], cwd=root, check=False)


if __name__ == "__main__":
    sys.exit(main())
