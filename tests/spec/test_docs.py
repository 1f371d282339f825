import importlib.util
from pathlib import Path

from corral.spec import RECOVERY_STRATEGIES, JobSpec
from corral.spec.models import Recovery
from corral.spec.schema import literal_values

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_spec_docs", ROOT / "scripts" / "gen_spec_docs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_spec_reference_is_up_to_date():
    expected = _generator().render()
    actual = (ROOT / "docs" / "spec.md").read_text()
    assert actual == expected, "docs/spec.md is stale: run python scripts/gen_spec_docs.py"


def test_every_spec_field_has_a_description():
    gen = _generator()
    for _, model in gen._sections(JobSpec, ""):
        for key, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{key} has no description"


def test_reference_lists_every_section_and_key():
    text = (ROOT / "docs" / "spec.md").read_text()
    for section in ("`resources`", "`stages[]`", "`notify.webhooks[]`", "`trackers[]`", "`eval`"):
        assert f"## {section}" in text
    for key in ("max_preemption_restarts", "progress_interval", "fail_run_on_reject", "warn_at"):
        assert f"| `{key}` |" in text


def test_recovery_strategy_names_match_the_exported_list():
    annotation = Recovery.model_fields["strategy"].annotation
    assert tuple(literal_values(annotation)) == RECOVERY_STRATEGIES
