"""YAML built to exhaust the loader (alias bombs, deep nesting, huge files) is refused fast,
with one located line, before anything is built from it."""

import time

import pytest

from corral.errors import SpecError
from corral.spec import load_spec
from corral.spec.yamlsrc import MAX_DEPTH, MAX_SPEC_BYTES, MAX_VALUES

from .helpers import fail, load, one

pytestmark = pytest.mark.timeout(30)


def alias_bomb(levels: int, width: int = 9) -> str:
    """``levels`` anchors, each a list of ``width`` aliases of the one before."""
    rows = [f"  a0: &a0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        rows.append(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "name: x\nrun: y\nenv:\n" + "\n".join(rows) + "\n"


def refused_within(seconds: float, text: str, overrides: tuple[str, ...] = ()) -> dict:
    start = time.monotonic()
    err = fail(text, overrides)
    assert time.monotonic() - start < seconds
    assert len(err.errors) == 1 and "\n" not in str(err)
    return err.errors[0]


def test_an_alias_bomb_is_refused_at_once_naming_the_bound():
    err = refused_within(2.0, alias_bomb(9))
    assert err["message"] == (
        f"the document holds more than {MAX_VALUES:,} values once its aliases (*name) are expanded"
    )
    assert err["line"] == 9  # a6, the first anchor whose aliases cross the bound


def test_an_alias_bomb_in_a_set_value_is_refused_at_once():
    rows = ["&b0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        rows.append(f"&b{i} [" + ", ".join([f"*b{i - 1}"] * 9) + "]")
    bomb = "[" + ", ".join(rows) + "]"
    err = refused_within(2.0, "name: x\nrun: y\n", (f"setup={bomb}",))
    assert err["file"] == "--set" and err["field"] == "setup"
    assert err["message"].startswith("the value is refused: the document holds more than")


def test_aliases_within_the_bound_still_work():
    text = "name: x\nenv: &e {A: '1'}\nstages:\n  - {name: a, run: b, env: *e}\n"
    assert load(text).stage_list()[0].env == {"A": "1"}


def test_nesting_one_past_the_bound_is_refused_naming_the_bound():
    depth = MAX_DEPTH + 1  # far below any parser's own limit: corral's bound is what refuses it
    err = refused_within(2.0, "name: x\nrun: y\nsetup: " + "[" * depth + "]" * depth + "\n")
    assert err == {
        "file": "corral.yaml",
        "line": 3,
        "field": "",
        "message": f"lists and mappings nested more than {MAX_DEPTH} deep",
    }


def test_nesting_deeper_than_the_bound_is_refused_not_a_crash():
    depth = 50_000  # crashed the interpreter (libyaml's composer recurses) before the bound
    err = refused_within(2.0, "name: x\nrun: y\nsetup: " + "[" * depth + "]" * depth + "\n")
    # the promise: one clean line at the nesting's line. Which refuses it first, corral's bound
    # or the parser's own (PyYAML 6.0.4's libyaml stops at 1,000 levels while scanning ahead),
    # is the parser's business, and so is its wording.
    assert (err["file"], err["line"], err["field"]) == ("corral.yaml", 3, "")
    assert err["message"]


def test_an_integer_too_long_to_convert_is_a_located_error():
    err = one("name: x\nrun: y\nresources:\n  cpus: 1" + "0" * 5000 + "\n")
    assert (err["line"], err["message"]) == (4, "an integer of 5,001 digits is too long")


def test_a_50_mb_spec_file_is_refused_before_it_is_read(tmp_path):
    spec = tmp_path / "corral.yaml"
    with spec.open("wb") as handle:
        handle.write(b"name: x\nrun: y\n")
        handle.truncate(50 * 1024 * 1024)
    start = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    assert time.monotonic() - start < 1.0
    assert str(info.value) == (
        f"{spec}: the spec is 52,428,800 bytes, more than the 1,048,576 bytes (1 MiB) a spec "
        "may hold"
    )


def test_spec_text_over_the_limit_is_refused_counting_utf8_bytes():
    padding = "# " + "é" * (MAX_SPEC_BYTES // 2) + "\n"  # fewer characters than the limit
    err = refused_within(1.0, "name: x\nrun: y\n" + padding)
    assert err["message"].startswith(f"the spec is {MAX_SPEC_BYTES + 18:,} bytes, more than")


def test_a_spec_just_under_the_limit_loads():
    text = "name: x\nrun: y\n"
    text += "#" * (MAX_SPEC_BYTES - len(text) - 1) + "\n"
    assert load(text).name == "x"


def test_a_set_value_over_the_limit_is_refused():
    err = refused_within(1.0, "name: x\nrun: y\n", ("run=" + "y" * (MAX_SPEC_BYTES + 1),))
    assert err["message"] == (
        "the value is refused: it is 1,048,577 bytes, more than 1,048,576 (1 MiB)"
    )
