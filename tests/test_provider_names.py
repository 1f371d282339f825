"""Core code never names a provider: it asks for capabilities. A registered provider's name in
code or in a string literal of control/, agent/, cli/, store/, spec/, wire/ (or service/) fails
this test; a comment or a docstring that explains a capability may name one."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

import corral
from corral.providers.registry import provider_names

SRC = Path(corral.__file__).parent
CORE = ("control", "agent", "cli", "store", "spec", "wire", "service")


def core_modules() -> list[Path]:
    return sorted(p for pkg in CORE if (SRC / pkg).is_dir() for p in (SRC / pkg).rglob("*.py"))


def _docstring_lines(source: str) -> set[int]:
    """Lines of string tokens that are docstrings: the first statement of a module, class or
    function body."""
    import ast

    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            first = body[0] if body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def named_providers(source: str, names: list[str]) -> list[tuple[int, str]]:
    """(line, token) of each code or string-literal token naming one of ``names`` (comments
    and docstrings do not count)."""
    pattern = re.compile(
        r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, names)) + r")(?![A-Za-z0-9])", re.I
    )
    docstrings = _docstring_lines(source)
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
            continue
        if tok.type == tokenize.STRING and tok.start[0] in docstrings:
            continue
        if (
            tok.type in (tokenize.NAME, tokenize.STRING)
            or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1)
        ) and pattern.search(tok.string):
            found.append((tok.start[0], tok.string))
    return found


def test_the_registry_knows_the_providers_this_test_looks_for() -> None:
    assert {"local", "aws"} <= set(provider_names())


def test_the_check_catches_code_and_literals_but_not_comments_or_docstrings() -> None:
    source = (
        '"""Runs on aws or local machines (a docstring may explain)."""\n'
        "# a comment about runpod is fine\n"
        "path = local_dir  # an ordinary word in code is fine too\n"
        'if name == "aws":\n'
        "    from corral.providers.local import provider\n"
        'x = f"{y} runpod"\n'
    )
    hits = provider_mentions(source)
    assert sorted({line for line, _ in hits}) == [4, 5, 6]


#: provider names that are also ordinary words ("a local path", "fake GPUs", "a connection
#: pool"): they count only as a whole string ("local") or in an import of the provider
#: (corral.providers.local)
ORDINARY_WORDS = {"local", "fake", "pool"}


def imports_a_provider(source: str, names: list[str]) -> list[tuple[int, str]]:
    """(line, module) of each import of a provider's folder."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[:2] == ["corral", "providers"] and len(parts) > 2 and parts[2] in names:
                found.append((node.lineno, module))
    return found


def ordinary_word_named(source: str, names: set[str]) -> list[tuple[int, str]]:
    """String literals that are exactly one of ``names`` (``"local"``, say)."""
    return [
        (line, text)
        for line, text in named_providers(source, sorted(names))
        if text[:1] in "'\"" and text.strip("'\"").lower() in names
    ]


def provider_mentions(source: str) -> list[tuple[int, str]]:
    names = provider_names()
    distinctive = [n for n in names if n not in ORDINARY_WORDS]
    hits = named_providers(source, distinctive) if distinctive else []
    hits += ordinary_word_named(source, ORDINARY_WORDS & set(names))
    return hits + imports_a_provider(source, names)


#: whole strings equal to an ordinary-word provider name that do not name the provider: the
#: `corral pool` command group (the worker pool's front door) and the pool's name in its
#: queue-length webhook
NOT_A_PROVIDER = {("cli/app.py", '"pool"'), ("service/pool.py", '"pool"')}


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_core_modules_name_no_provider(path: Path) -> None:
    where = str(path.relative_to(SRC))
    hits = [h for h in provider_mentions(path.read_text()) if (where, h[1]) not in NOT_A_PROVIDER]
    assert hits == [], f"{path.relative_to(SRC)} names a provider: {hits}"
