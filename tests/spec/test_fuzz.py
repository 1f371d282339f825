"""Property-based fuzz of the spec loader and ``--set``: whatever the input, the result is a
valid :class:`JobSpec` or a bad-input error (exit 2) whose every problem is one printable
line; never another exception, never a hang. Each test prints a one-line summary of counts.

Inputs: arbitrary text and bytes, specs generated from the models' own schema (right keys,
wrong and right values) then dumped to YAML and mutated (cut, hostile YAML inserted), and
``--set`` overrides over real and made-up key paths with hostile values.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.errors import EXIT_BAD_INPUT, BadInput, SpecError
from corral.spec import JobSpec, canonical_json, load_spec, load_spec_text, spec_to_yaml
from corral.spec.report import format_error
from corral.spec.schema import dict_value, field_annotation, list_item, model_of

#: Longest any one example may take; a slower one counts as a hang.
HANG_S = 5.0
FUZZ = settings(
    max_examples=150,
    deadline=None,  # timed below, against HANG_S, so a busy machine does not make it flaky
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
pytestmark = pytest.mark.timeout(120)

# Characters that broke or could break parsers, shells and terminals.
HOSTILE_CHARS = ["\x00", "\udcff", "\ud800", "\t", "\r", "\x85", "\u2028", "\ufeff", "é", "\x1b"]
HOSTILE_YAML = [
    "&a [*a]",
    "*undefined",
    "<<: *a",
    "!!python/object/apply:os.system ['echo pwned']",
    "!!binary ZZZ",
    "? [a, b]\n: c",
    "{",
    "'unterminated",
    '"\\0"',
    "[" * 100,
    "1" * 5000,
    "%YAML 1.1\n---",
    "---\n---",
    "1e999",
    "0x" + "f" * 40,
    "-.inf",
    ".nan",
    "~",
]
PLAUSIBLE = [
    "L40S:8",
    "A100:1..2",
    "any:1",
    "all",
    "90s",
    "1h30m",
    "32GB",
    "512Gi",
    "90%",
    "s3://bucket/prefix",
    "file:///tmp/x",
    "https://example.com/hook",
    "cer_clean <= 0.03",
    "train",
    "eval",
    "HF_TOKEN",
    "run.finished",
    "*",
    "python train.py",
    "outputs/**",
    "../up",
    "~/home",
]

text = st.text(alphabet=st.one_of(st.characters(), st.sampled_from(HOSTILE_CHARS)), max_size=30)
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.sampled_from(PLAUSIBLE),
    text,
)
junk = st.recursive(
    scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


def for_annotation(annotation: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values shaped like ``annotation`` (a spec model, list, mapping or leaf), or junk."""
    model = model_of(annotation)
    if model is not None and depth < 4:
        fields = {
            key: for_annotation(field_annotation(model, key), depth + 1)
            for key in model.model_fields
        }
        shaped: st.SearchStrategy[Any] = st.fixed_dictionaries({}, optional=fields)
    elif list_item(annotation) is not None and depth < 4:
        shaped = st.lists(for_annotation(list_item(annotation), depth + 1), max_size=3)
    elif dict_value(annotation) is not None:
        shaped = st.dictionaries(
            st.one_of(st.sampled_from(["A", "B_2", "HF_TOKEN"]), text),
            for_annotation(dict_value(annotation), depth + 1),
            max_size=3,
        )
    else:
        shaped = scalar
    return st.one_of(shaped, shaped, shaped, junk)


def _paths(annotation: Any, prefix: str = "", depth: int = 0) -> Iterator[str]:
    model = model_of(annotation)
    if model is None or depth > 3:
        return
    for key in model.model_fields:
        path = f"{prefix}{key}"
        yield path
        child = field_annotation(model, key)
        if list_item(child) is not None and model_of(list_item(child)) is not None:
            yield from _paths(list_item(child), f"{path}.0.", depth + 1)
        yield from _paths(child, f"{path}.", depth + 1)


KEY_PATHS = [*sorted(set(_paths(JobSpec))), "stages.train.run", "stages.v1.eval.run", "env.X"]


@st.composite
def mutated_yaml(draw: st.DrawFn) -> str:
    """A generated spec as YAML, sometimes cut short or with hostile YAML spliced in."""
    data = draw(for_annotation(JobSpec))
    if isinstance(data, dict) and draw(st.booleans()):  # half of them valid at the top
        data = {"name": "x", "run": "python train.py", **data}
        data.pop("stages" if "run" in data and "stages" in data else "", None)
    source = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    how = draw(st.sampled_from(["as is", "as is", "cut", "splice", "char"]))
    at = draw(st.integers(min_value=0, max_value=len(source)))
    if how == "cut":
        return source[:at]
    if how == "splice":
        return source[:at] + draw(st.sampled_from(HOSTILE_YAML)) + source[at:]
    if how == "char":
        return source[:at] + draw(st.sampled_from(HOSTILE_CHARS)) + source[at:]
    return source


override = st.one_of(
    st.builds(
        lambda key, value: f"{key}={value}",
        st.one_of(
            st.sampled_from(KEY_PATHS),
            st.sampled_from(KEY_PATHS).map(str.upper),
            st.builds(
                str.__add__,
                st.sampled_from(["env.", "stages.0.env.", "stages.train."]),
                st.one_of(text, st.sampled_from(HOSTILE_CHARS)),
            ),
            text,
        ),
        st.one_of(
            st.sampled_from(PLAUSIBLE),
            st.sampled_from(["1", "8", "0.5", "true", "[a, b]", "{A: b}", "''"]),
            st.sampled_from(HOSTILE_YAML),
            text,
            scalar.map(str),
        ),
    ),
    text,
)
BASES = [
    "name: hello\nrun: python train.py\n",
    "name: x\nresources: {gpus: 'L40S:2'}\nstages:\n  - {name: train, run: a, gpus: 2}\n"
    "  - {name: v1.eval, run: b, needs: train}\n",
]


class Tally:
    """Counts outcomes of one fuzz test and checks each against the contract."""

    def __init__(self, name: str):
        self.name = name
        self.counts: Counter[str] = Counter()

    def check(self, call: Callable[[], JobSpec]) -> None:
        self.counts["inputs"] += 1
        start = time.monotonic()
        try:
            spec = call()
        except SpecError as err:
            self.counts["refused"] += 1
            lines = str(err).split("\n")
            assert err.exit_code == EXIT_BAD_INPUT
            assert err.errors and len(lines) == len(err.errors), str(err)
            assert lines == [format_error(e) for e in err.errors]
            assert all(line.isprintable() and line.strip() for line in lines), lines
        except BadInput as err:
            self.counts["refused"] += 1
            assert err.exit_code == EXIT_BAD_INPUT
            assert "\n" not in str(err) and str(err).isprintable()
        except Exception:
            self.counts["tracebacks"] += 1
            raise
        else:
            self.counts["valid"] += 1
            assert isinstance(spec, JobSpec)
            canonical_json(spec)  # what launch stores and `validate --json` prints
            spec_to_yaml(spec)
        finally:
            if time.monotonic() - start > HANG_S:
                self.counts["hangs"] += 1
        assert self.counts["hangs"] == 0, f"an input took more than {HANG_S}s"

    def summary(self) -> str:
        keys = ("inputs", "valid", "refused", "tracebacks", "hangs")
        return f"{self.name}: " + ", ".join(f"{k} {self.counts[k]}" for k in keys)


@pytest.fixture
def tally(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Iterator[Tally]:
    counts = Tally(request.node.name)
    yield counts
    with capsys.disabled():
        print(f"\n[fuzz] {counts.summary()}")


def test_any_text_loads_or_is_refused_in_one_line_each(tally: Tally) -> None:
    @FUZZ
    @given(st.one_of(text, st.text(max_size=300)))
    def run(source: str) -> None:
        tally.check(lambda: load_spec_text(source, source="corral.yaml"))

    run()


def test_schema_shaped_and_mutated_specs_load_or_are_refused(tally: Tally, tmp_path: Path) -> None:
    @settings(FUZZ, max_examples=200)
    @given(mutated_yaml())
    def run(source: str) -> None:
        tally.check(lambda: load_spec_text(source, source="corral.yaml", base_dir=tmp_path))

    run()


def test_any_bytes_in_a_spec_file_load_or_are_refused(tally: Tally, tmp_path: Path) -> None:
    spec = tmp_path / "corral.yaml"

    @settings(FUZZ, max_examples=100)
    @given(
        st.one_of(
            st.binary(max_size=200),
            mutated_yaml().map(lambda s: s.encode("utf-8", "surrogatepass")),
        )
    )
    def run(raw: bytes) -> None:
        spec.write_bytes(raw)
        tally.check(lambda: load_spec(spec))

    run()


def test_any_set_overrides_apply_or_are_refused(tally: Tally, tmp_path: Path) -> None:
    @settings(FUZZ, max_examples=300)
    @given(st.sampled_from(BASES), st.lists(override, min_size=1, max_size=2))
    def run(base: str, overrides: list[str]) -> None:
        tally.check(lambda: load_spec_text(base, base_dir=tmp_path, overrides=overrides))

    run()
