"""Check corral's imports: the contracts of ``pyproject.toml`` (``[tool.importlinter]``) and
the two that keep the providers' folders apart, built here from the folders under
``corral/providers/`` so that a new provider's folder is covered without anyone touching a
list:

* a provider is one folder: no provider's folder imports another's (independence);
* core code never imports a provider's folder: every package and module of corral but
  ``corral.providers`` and ``corral.testing`` (test support, which plays the providers'
  machines) is forbidden to import any provider's folder or ``corral.testing``.

A provider's folder is a folder under ``corral/providers/`` that holds Python files, but
for the shared ones (``SHARED``). The corral checked is the one Python imports (the first
on ``PYTHONPATH``), as with ``lint-imports``. ``scripts/test.sh`` runs this in its place::

    python scripts/lint_imports.py [--show]

``--show`` prints the contracts built here (INI, as import-linter reads them) and checks
nothing. The exit code is import-linter's: 0 when every contract is kept.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"

#: what ``corral/providers/`` holds besides the providers' folders: what they share
SHARED = frozenset({"common", "base", "registry", "http"})
#: corral's packages that may import a provider's folder: the providers themselves and the
#: test support that plays their machines (nothing in the product imports it: a contract)
NOT_CORE = frozenset({"providers", "testing"})


def corral_dir() -> Path:
    """The folder of the ``corral`` package Python imports (not imported: found)."""
    spec = importlib.util.find_spec("corral")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("lint_imports: the corral package cannot be found (PYTHONPATH?)")
    return Path(next(iter(spec.submodule_search_locations)))


def _holds_python(path: Path) -> bool:
    return path.is_dir() and any(path.glob("*.py"))


def provider_folders(providers_dir: Path) -> list[str]:
    """The providers' folders under ``providers_dir`` (``corral/providers/``), by name."""
    return sorted(
        p.name for p in providers_dir.iterdir() if p.name not in SHARED and _holds_python(p)
    )


def core_modules(package_dir: Path) -> list[str]:
    """corral's packages and modules that are neither providers nor test support."""
    names = {p.stem for p in package_dir.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in package_dir.iterdir() if _holds_python(p)}
    return sorted(names - NOT_CORE)


def provider_contracts(package_dir: Path) -> dict[str, dict[str, list[str] | str]]:
    """The two contracts over the providers' folders, by id."""
    providers = [f"corral.providers.{n}" for n in provider_folders(package_dir / "providers")]
    return {
        "providers-independent": {
            "name": "a provider is one folder: no provider imports another provider's folder "
            "(the folders found under corral/providers/)",
            "type": "independence",
            "modules": providers,
        },
        "core-imports-no-provider": {
            "name": "core code never imports a provider's folder (it asks the registry for "
            "capabilities): every corral package but providers and testing",
            "type": "forbidden",
            "source_modules": [f"corral.{n}" for n in core_modules(package_dir)],
            "forbidden_modules": [*providers, "corral.testing"],
        },
    }


def as_ini(contracts: dict[str, dict[str, list[str] | str]]) -> str:
    """The contracts as an import-linter INI file, with ``pyproject.toml``'s session
    options (the root package and whether external packages count)."""
    session = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    lines = ["[importlinter]"]
    for key, value in session.items():
        if key != "contracts":
            lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else value}")
    for cid, options in contracts.items():
        lines += ["", f"[importlinter:contract:{cid}]"]
        for key, value in options.items():
            if isinstance(value, list):
                lines.append(f"{key} =" + "".join(f"\n    {v}" for v in value))
            else:
                lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ini = as_ini(provider_contracts(corral_dir()))
    if argv == ["--show"]:
        print(ini, end="")
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        from importlinter.cli import lint_imports
    except ImportError:
        print(
            "lint_imports: import-linter is not installed (pip install -e '.[dev]')",
            file=sys.stderr,
        )
        return 2

    with tempfile.TemporaryDirectory(prefix="corral-lint-") as tmp:
        generated = Path(tmp) / "providers.ini"
        generated.write_text(ini)
        return lint_imports(config_filenames=(str(PYPROJECT), str(generated)), no_cache=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
