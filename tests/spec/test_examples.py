import json
from pathlib import Path

import pytest
import yaml

from corral.errors import NotFound
from corral.spec import JobSpec, Stage, load_spec, spec_hash
from corral.spec.job import STOP_KEYS

from .helpers import EXAMPLES, load

ALL = ["minimal.yaml", "full.yaml", "pipeline.yaml"]


@pytest.mark.parametrize("name", ALL)
def test_example_specs_load(name):
    spec = load_spec(EXAMPLES / name)
    assert spec.workdir == EXAMPLES.resolve()
    assert spec.stage_list()


def test_minimal_spec_runs_one_main_stage_with_all_gpus_on_every_node_and_no_gpu_by_default():
    spec = load_spec(EXAMPLES / "minimal.yaml")
    assert spec.stage_list() == [Stage(name="main", run=spec.run, gpus="all", nodes="all")]
    assert (spec.resources.gpus.type, spec.resources.gpus.min, spec.resources.gpus.max) == (
        None,
        0,
        0,
    )
    assert spec.resources.spot == "auto"
    assert spec.recovery.max_preemption_restarts == 10
    assert spec.checkpoints.keep_last == 3
    assert spec.notify.webhooks == []


def test_full_example_sets_every_top_level_section():
    raw = yaml.safe_load((EXAMPLES / "full.yaml").read_text())
    # stages stand for run, and for the fields that go with run (set on the stages instead)
    missing = set(JobSpec.model_fields) - set(raw) - {"run", "progress", "resume_args", *STOP_KEYS}
    assert not missing


def test_full_example_values_are_normalised():
    spec = load_spec(EXAMPLES / "full.yaml")
    assert spec.env == {
        "HF_HOME": "/cache/hf",
        "STEPS": "20000",
        "MIXED_PRECISION": "true",
        "VERSION": "1.10",
    }
    assert spec.resources.gpus.model_dump() == {"type": "A100", "min": 1, "max": 2}
    assert spec.resources.memory == 128.0 and spec.resources.disk == 500.0
    assert spec.stages[1].needs == ["prepare"]
    assert spec.stages[1].env == {"OMP_NUM_THREADS": "8"}
    assert spec.budget.warn_at == pytest.approx(0.8)
    assert spec.limits.max_runtime == 12 * 3600 and spec.limits.idle_timeout == 1800
    assert spec.notify.webhooks[0].progress_interval == 300
    assert spec.notify.webhooks[1].events == ["*"]
    assert [str(a) for a in spec.eval.acceptance] == ["wer_clean <= 0.08", "cer_clean < 0.03"]
    assert spec.eval.acceptance[0].passes(0.05) and not spec.eval.acceptance[1].passes(0.03)
    assert spec.recovery.strategy == "next-cheapest"


def test_pipeline_example_partitions_eight_gpus_between_parallel_stages():
    spec = load_spec(EXAMPLES / "pipeline.yaml")
    assert str(spec.resources.gpus) == "L40S:8"
    by_name = {s.name: s for s in spec.stage_list()}
    assert by_name["detection"].gpus == [0, 1, 2, 3]
    assert by_name["recognition"].gpus == [4, 5, 6, 7]
    assert by_name["lm"].gpus == 0
    assert by_name["evaluate"].gpus == 1
    assert by_name["evaluate"].needs == ["detection", "recognition", "lm"]


@pytest.mark.parametrize("name", ALL)
def test_model_dump_round_trips_through_model_validate(name):
    spec = load_spec(EXAMPLES / name)
    stored = json.loads(json.dumps(spec.model_dump(mode="json")))
    again = JobSpec.model_validate(stored)
    assert again == spec
    assert spec_hash(again) == spec_hash(spec)


def test_spec_hash_changes_with_the_spec_and_not_with_formatting():
    a = load("name: x\nrun: echo hi\n")
    b = load("# a comment\nrun:   echo hi\nname: x\n")
    c = load("name: x\nrun: echo bye\n")
    assert spec_hash(a) == spec_hash(b)
    assert spec_hash(a) != spec_hash(c)
    assert len(spec_hash(a)) == 64


def test_workdir_resolves_against_the_spec_files_directory(tmp_path: Path):
    (tmp_path / "proj").mkdir()
    spec_file = tmp_path / "proj" / "corral.yaml"
    spec_file.write_text("name: x\nrun: y\nworkdir: ../code\ncheckpoints: {storage: store}\n")
    spec = load_spec(spec_file)
    assert spec.workdir == (tmp_path / "code").resolve()
    assert spec.checkpoints.storage == str((tmp_path / "proj" / "store").resolve())


def test_a_directory_means_its_corral_yaml(tmp_path: Path):
    (tmp_path / "corral.yaml").write_text("name: x\nrun: y\n")
    assert load_spec(tmp_path).name == "x"


def test_a_missing_spec_file_is_not_found_naming_the_path(tmp_path: Path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(NotFound) as info:
        load_spec(missing)
    assert str(info.value) == f"spec file not found: {missing}"


def test_absolute_workdir_is_kept(tmp_path: Path):
    spec = load(f"name: x\nrun: y\nworkdir: {tmp_path}\n")
    assert spec.workdir == tmp_path
