"""The checks cover what they say, derived, not listed: mypy checks every module of corral
(but for the exemptions below, a list that may only shrink), and the import contracts over
the providers' folders (scripts/lint_imports.py) are built from the folders under
corral/providers/, which are the providers the registry knows."""

from __future__ import annotations

import importlib.util
import io
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from mypy.config_parser import parse_config_file
from mypy.find_sources import create_source_list
from mypy.options import Options

import corral
from corral.providers import registry

ROOT = Path(__file__).resolve().parent.parent
SRC = Path(corral.__file__).parent


def _lint_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lint_imports", ROOT / "scripts/lint_imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lint_imports = _lint_script()

# --- mypy -------------------------------------------------------------------------------------

#: The packages whose type errors mypy does not report yet, with the reason. This list may
#: only shrink: type a package, then take it off here and off [tool.mypy.overrides].
MYPY_EXEMPT: dict[str, str] = {}


def _mypy_options() -> Options:
    options = Options()
    out = io.StringIO()
    parse_config_file(options, lambda: None, str(ROOT / "pyproject.toml"), out, out)
    assert out.getvalue() == "", out.getvalue()
    return options


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exempt_package(module: str) -> str | None:
    return next((p for p in MYPY_EXEMPT if module == p or module.startswith(p + ".")), None)


def test_mypy_checks_every_module_of_corral() -> None:
    options = _mypy_options()
    checked = {s.module for s in create_source_list(options.files, options)}
    on_disk = {_module_name(p) for p in SRC.rglob("*.py")}
    assert on_disk - checked == set()
    assert "corral.store.store" in checked


def test_mypy_reports_the_errors_of_every_module_but_the_exempt_packages() -> None:
    options = _mypy_options()
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        ignored = options.clone_for_module(module).ignore_errors
        assert ignored == (_exempt_package(module) is not None), module


def test_the_mypy_exemptions_are_those_listed_here_each_with_its_reason() -> None:
    options = _mypy_options()
    configured = {
        pattern.removesuffix(".*")
        for pattern, overrides in options.per_module_options.items()
        if overrides.get("ignore_errors")
    }
    assert configured <= set(MYPY_EXEMPT), "an exemption added: the list may only shrink"
    assert set(MYPY_EXEMPT) <= configured, "typed at last: take it off MYPY_EXEMPT too"
    assert all(reason.strip() for reason in MYPY_EXEMPT.values())


def test_every_registered_provider_is_typed_unless_exempt() -> None:
    options = _mypy_options()
    checked = {s.module for s in create_source_list(options.files, options)}
    for name in _builtin_providers():
        module = registry._PROVIDERS[name].partition(":")[0]
        assert module in checked, name
        exempt = _exempt_package(module) is not None
        assert options.clone_for_module(module).ignore_errors == exempt, name


# --- import contracts over the providers' folders ------------------------------------------


def _builtin_providers() -> list[str]:
    return sorted(registry._PROVIDERS)


def _folder_of(target: str) -> str:
    parts = target.partition(":")[0].split(".")
    assert parts[:2] == ["corral", "providers"] and len(parts) > 2, target
    return parts[2]


def test_the_providers_folders_are_the_registered_providers() -> None:
    folders = lint_imports.provider_folders(SRC / "providers")
    registered = sorted({_folder_of(t) for t in registry._PROVIDERS.values()})
    assert folders == registered


def test_both_provider_contracts_list_every_provider_folder() -> None:
    contracts = lint_imports.provider_contracts(SRC)
    providers = [f"corral.providers.{_folder_of(t)}" for t in registry._PROVIDERS.values()]
    independent = contracts["providers-independent"]["modules"]
    forbidden = contracts["core-imports-no-provider"]["forbidden_modules"]
    assert sorted(independent) == sorted(set(providers))
    assert set(providers) <= set(forbidden)
    core = contracts["core-imports-no-provider"]["source_modules"]
    assert {"corral.control", "corral.store", "corral.sdk", "corral.wire"} <= set(core)
    assert not {"corral.providers", "corral.testing"} & set(core)


@pytest.fixture(scope="module")
def corral_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of corral's sources, to add a module to (each test its own change, undone)."""
    src = tmp_path_factory.mktemp("tree") / "src"
    shutil.copytree(SRC, src / "corral", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/lint_imports.py")],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _added(src: Path, relative: str, text: str) -> Path:
    path = src / "corral" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_copy_of_corral_keeps_every_contract(corral_copy: Path) -> None:
    result = _lint(corral_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_from_salad_into_runpod_is_caught(corral_copy: Path) -> None:
    leak = _added(corral_copy, "providers/runpod/leak.py", "from corral.providers import salad\n")
    try:
        result = _lint(corral_copy)
    finally:
        leak.unlink()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "corral.providers.runpod.leak -> corral.providers.salad" in result.stdout


def test_a_new_provider_folder_is_kept_apart_without_touching_a_list(corral_copy: Path) -> None:
    new = corral_copy / "corral/providers/newcloud"
    _added(corral_copy, "providers/newcloud/__init__.py", "from corral.providers import aws\n")
    try:
        result = _lint(corral_copy)
    finally:
        shutil.rmtree(new)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "corral.providers.newcloud -> corral.providers.aws" in result.stdout


def test_core_code_importing_a_new_provider_folder_is_caught(corral_copy: Path) -> None:
    new = corral_copy / "corral/providers/newcloud"
    _added(corral_copy, "providers/newcloud/__init__.py", "")
    user = _added(corral_copy, "control/newcloud_use.py", "import corral.providers.newcloud\n")
    try:
        result = _lint(corral_copy)
    finally:
        shutil.rmtree(new)
        user.unlink()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "corral.control.newcloud_use -> corral.providers.newcloud" in result.stdout


# --- what docs/architecture.md says of them -------------------------------------------------


def test_the_architecture_doc_counts_the_contracts_there_are() -> None:
    text = " ".join((ROOT / "docs/architecture.md").read_text().split())
    said = re.search(
        r"(\d+) contracts: the (\d+) of `pyproject.toml` \(`\[tool.importlinter\]`\) and (\d+) "
        r"built from the folders",
        text,
    )
    assert said is not None, "docs/architecture.md no longer says how many contracts there are"
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    built = lint_imports.provider_contracts(SRC)
    in_pyproject = len(declared["contracts"])
    assert [int(n) for n in said.groups()] == [in_pyproject + len(built), in_pyproject, len(built)]
