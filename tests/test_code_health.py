"""The code-health scripts scripts/test.sh runs: dead code in src/ fails the gate, named by file
and line (scripts/dead_code.py); a long module is only a warning (scripts/module_sizes.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


MODULE = """
    import atexit


    def dead():
        return 1


    def used_here():
        return 2


    def used_by_a_test():
        return 3


    @atexit.register
    def registered():
        pass


    class Dead:
        pass


    class Kept:
        pass


    def after_raise():
        raise ValueError
        return 4


    VALUE = used_here() + after_raise()
"""


def test_dead_code_is_named_and_what_is_used_registered_or_whitelisted_is_not(
    tmp_path: Path,
) -> None:
    root = _tree(
        tmp_path,
        {
            "src/pkg/mod.py": MODULE,
            "tests/test_mod.py": """
                from pkg.mod import used_by_a_test


                def test_it():
                    assert used_by_a_test() == 3
            """,
            "scripts/dead_code_whitelist.py": "Kept  # the reason it stays\n",
        },
    )
    done = _run("dead_code.py", "--root", str(root))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "src/pkg/mod.py:4: unused function 'dead'",
        "src/pkg/mod.py:21: unused class 'Dead'",
        "src/pkg/mod.py:31: unreachable code after 'raise'",
    ]
    assert "dead code: 3 found" in done.stderr


def test_a_tree_without_dead_code_passes(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"src/pkg/mod.py": "def used():\n    return 1\n\n\nVALUE = used()\n"})
    done = _run("dead_code.py", "--root", str(root))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_modules_over_the_limit_are_a_warning_longest_first_never_a_failure(
    tmp_path: Path,
) -> None:
    root = _tree(
        tmp_path,
        {
            "src/pkg/short.py": "x = 1\n" * 10,
            "src/pkg/long.py": "x = 1\n" * 11,
            "src/pkg/longer.py": "x = 1\n" * 40,
        },
    )
    done = _run("module_sizes.py", "--root", str(root), "--limit", "10")
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "warning: 2 modules over 10 lines (split them when next changed):",
        "     40 src/pkg/longer.py",
        "     11 src/pkg/long.py",
    ]
    assert _run("module_sizes.py", "--root", str(root), "--limit", "40").stdout == ""
