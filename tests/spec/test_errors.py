import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import SpecError

from .helpers import fail, load, one


def test_unknown_top_level_key_suggests_the_closest_key_with_its_line():
    err = one("name: x\nrun: y\nresorces:\n  gpus: 2\n")
    assert err == {
        "file": "corral.yaml",
        "line": 3,
        "field": "",
        "message": "unknown key 'resorces' (did you mean 'resources'?)",
    }


def test_unknown_nested_key_names_its_section_and_suggests():
    err = fail("name: x\nrun: y\nresources:\n  cpus: 4\n  gpu: L40S:1\n")
    assert str(err) == "corral.yaml:5: resources: unknown key 'gpu' (did you mean 'gpus'?)"


def test_unknown_key_in_a_stage_and_a_webhook_are_located():
    text = """\
name: x
stages:
  - name: a
    run: b
    neds: [c]
notify:
  webhooks:
    - url: https://example.com/hook
      evnts: ['*']
"""
    lines = str(fail(text)).splitlines()
    assert lines == [
        "corral.yaml:5: stages[0]: unknown key 'neds' (did you mean 'needs'?)",
        "corral.yaml:9: notify.webhooks[0]: unknown key 'evnts' (did you mean 'events'?)",
    ]


def test_unknown_key_without_a_close_match_has_no_suggestion():
    err = one("name: x\nrun: y\nzzzz: 1\n")
    assert err["message"] == "unknown key 'zzzz'"


def test_wrong_types_name_expected_and_got():
    text = "name: x\nrun: y\nresources:\n  cpus: eight\nbudget: {max_cost_usd: [1]}\n"
    assert str(fail(text)).splitlines() == [
        "corral.yaml:4: resources.cpus: expected a number, got 'eight'",
        "corral.yaml:5: budget.max_cost_usd: expected a number, got a list",
    ]


def test_a_section_given_as_a_scalar_is_a_type_error():
    assert one("name: x\nrun: y\nresources: 5\n")["message"] == "expected a mapping, got 5"
    assert one("name: x\nstages: {a: 1}\n")["message"] == "expected a list, got a mapping"


def test_booleans_are_not_numbers():
    assert one("name: x\nrun: y\nresources: {cpus: true}\n")["message"] == (
        "expected a number, got true"
    )


def test_literal_values_suggest_the_closest_choice():
    err = one("name: x\nrun: y\nrecovery: {strategy: next-cheapst}\n")
    assert err["field"] == "recovery.strategy"
    assert "did you mean 'next-cheapest'?" in err["message"]


@pytest.mark.parametrize("name", ["Bad", "has space", "-lead", "", "x" * 64, "ünï"])
def test_bad_job_names_are_rejected_with_the_rule(name):
    err = one(f"name: '{name}'\nrun: y\n")
    assert err["field"] == "name" and "lower-case letters" in err["message"]


def test_name_of_63_characters_is_fine():
    assert load(f"name: {'a' * 63}\nrun: y\n").name == "a" * 63


def test_missing_name_points_at_the_top():
    err = one("run: y\n")
    assert (err["line"], err["field"], err["message"]) == (1, "", "missing required key 'name'")


def test_missing_stage_run_points_at_the_stage():
    err = one("name: x\nstages:\n  - name: a\n    gpus: 0\n")
    assert (err["line"], err["field"], err["message"]) == (
        3,
        "stages[0]",
        "missing required key 'run'",
    )


def test_run_and_stages_together_is_an_error():
    err = one("name: x\nrun: y\nstages:\n  - {name: a, run: b}\n")
    assert (err["line"], err["field"]) == (2, "run")
    assert "not both" in err["message"]


def test_neither_run_nor_stages_is_an_error():
    err = one("name: x\nenv: {A: b}\n")
    assert "give either `run`" in err["message"]


def test_empty_stages_and_empty_run_are_errors():
    assert one("name: x\nstages: []\n")["message"] == "must not be empty"
    assert one("name: x\nrun: ''\n")["message"] == "must not be empty"


def test_secrets_given_as_a_mapping_are_rejected_without_echoing_the_value():
    err = fail("name: x\nrun: y\nsecrets:\n  HF_TOKEN: hf_abcdefSECRET\n")
    assert "corral secret set NAME" in str(err)
    assert "hf_abcdefSECRET" not in str(err) and "hf_abcdefSECRET" not in repr(err.errors)


def test_secret_items_with_values_are_rejected_without_echoing_them():
    err = fail("name: x\nrun: y\nsecrets:\n  - HF_TOKEN=sk-SECRET\n  - {WANDB: sk-OTHER}\n")
    text = str(err)
    assert [e["field"] for e in err.errors] == ["secrets[0]", "secrets[1]"]
    assert [e["line"] for e in err.errors] == [4, 5]
    assert "sk-SECRET" not in text and "sk-OTHER" not in text
    assert "corral secret set NAME" in text


def test_secret_names_are_kept():
    assert load("name: x\nrun: y\nsecrets: [HF_TOKEN, _X1]\n").secrets == ["HF_TOKEN", "_X1"]


def test_wrong_env_values_are_never_shown():
    err = one("name: x\nrun: y\nenv:\n  TOKEN: [sk-SECRET]\n")
    assert err["field"] == "env.TOKEN" and "sk-SECRET" not in str(err)


def test_env_keys_must_be_variable_names():
    err = one("name: x\nrun: y\nenv:\n  'BAD-NAME': 1\n")
    assert "invalid environment variable name 'BAD-NAME'" in err["message"]


def test_env_numbers_and_booleans_become_strings_as_written():
    spec = load("name: x\nrun: y\nenv: {A: 1, B: 1.10, C: true, D: text}\n")
    assert spec.env == {"A": "1", "B": "1.10", "C": "true", "D": "text"}


def test_setup_string_is_one_command():
    assert load("name: x\nrun: y\nsetup: pip install -e .\n").setup == ["pip install -e ."]


@pytest.mark.parametrize("bad", ["-5m", "10x", "1h30", "0"])
def test_bad_durations_are_errors_naming_the_field(bad):
    err = one(f"name: x\nrun: y\nlimits:\n  max_runtime: '{bad}'\n")
    assert err["field"] == "limits.max_runtime" and err["line"] == 4
    assert "duration" in err["message"]


def test_bad_gpu_request_in_resources_is_located():
    err = one("name: x\nrun: y\nresources:\n  gpus: 'L40S:3..1'\n")
    assert err["line"] == 4 and err["field"] == "resources.gpus"
    assert "invalid GPU request 'L40S:3..1'" in err["message"]


@pytest.mark.parametrize("expr", ["wer ~ 3", "cer <=", "<= 0.1", "cer <= abc", "cer <= inf"])
def test_bad_acceptance_expressions_are_named(expr):
    err = one(f"name: x\nrun: y\neval:\n  report: r.json\n  acceptance:\n    - '{expr}'\n")
    assert err["field"] == "eval.acceptance[0]" and err["line"] == 6
    assert f"invalid acceptance expression '{expr}'" in err["message"]


def test_acceptance_needs_a_report():
    err = one("name: x\nrun: y\neval:\n  acceptance: ['cer < 1']\n")
    assert err["field"] == "eval.acceptance" and "eval.report" in err["message"]


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("gs://bucket/x", "unsupported storage scheme 'gs://'"),
        ("http://host/x", "unsupported storage scheme 'http://'"),
        ("file://relative", "needs an absolute path"),
        ("s3://B/x", "invalid S3 bucket name 'B'"),
        ("s3:///x", "'s3:///x' names no bucket and R2_BUCKET_NAME is not set"),
    ],
)
def test_bad_storage_uris_are_errors(uri, why, monkeypatch):
    monkeypatch.delenv("R2_BUCKET_NAME", raising=False)
    err = one(f"name: x\nrun: y\ncheckpoints:\n  storage: '{uri}'\n")
    assert err["field"] == "checkpoints.storage" and why in err["message"]


def test_good_storage_uris_are_kept():
    spec = load(
        "name: x\nrun: y\ncheckpoints: {storage: 's3://my-bucket/runs'}\n"
        "artifacts: {storage: 'file:///data/out'}\n"
    )
    assert spec.checkpoints.storage == "s3://my-bucket/runs"
    assert spec.artifacts.storage == "file:///data/out"


def test_a_storage_uri_without_a_bucket_takes_the_io_net_guides_r2_bucket(monkeypatch):
    """IO.net's guide sets R2_BUCKET_NAME beside the R2 keys: ``s3:///prefix`` names that bucket,
    resolved where the spec is read, so the controller and the machine see the whole URI."""
    monkeypatch.setenv("R2_BUCKET_NAME", "team-ckpts")
    spec = load("name: x\nrun: y\ncheckpoints: {storage: 's3:///runs/a'}\n")
    assert spec.checkpoints.storage == "s3://team-ckpts/runs/a"
    monkeypatch.setenv("R2_BUCKET_NAME", "Bad_Name")
    err = one("name: x\nrun: y\ncheckpoints: {storage: 's3:///runs'}\n")
    assert (
        err["field"] == "checkpoints.storage"
        and "invalid S3 bucket name 'Bad_Name'" in err["message"]
    )


def test_paths_in_workdir_must_stay_inside():
    err = fail(
        "name: x\nrun: y\ncheckpoints: {dir: /abs}\nartifacts: {paths: ['../out', 'ok/**']}\n"
    )
    assert [e["field"] for e in err.errors] == ["checkpoints.dir", "artifacts.paths[0]"]


def test_keep_best_needs_a_metric():
    err = one("name: x\nrun: y\ncheckpoints: {keep_best: 2}\n")
    assert err["field"] == "checkpoints.keep_best" and "metric" in err["message"]


def test_bounds_are_reported_with_the_value():
    err = fail(
        "name: x\nrun: y\nbudget: {max_cost_usd: 0, warn_at: 150%}\ncheckpoints: {keep_last: 0}\n"
    )
    assert [e["message"] for e in err.errors] == [
        "must be > 0, got 0",
        "must be <= 1, got '150%'",
        "must be >= 1, got 0",
    ]


def test_warn_at_accepts_a_percentage():
    assert load("name: x\nrun: y\nbudget: {warn_at: 75%}\n").budget.warn_at == 0.75


def test_webhook_url_events_and_secret_are_checked():
    text = """\
name: x
run: y
notify:
  webhooks:
    - url: ftp://example.com
      events: [run.finshed]
      secret: not-a-name
"""
    err = fail(text)
    by_field = {e["field"]: e for e in err.errors}
    assert set(by_field) == {
        "notify.webhooks[0].url",
        "notify.webhooks[0].events[0]",
        "notify.webhooks[0].secret",
    }
    assert "did you mean 'run.finished'?" in by_field["notify.webhooks[0].events[0]"]["message"]
    assert "not-a-name" not in str(err)


def test_invalid_yaml_reports_the_yaml_line():
    err = one("name: x\nrun: y\nenv: {A: [1, 2}\n")
    assert err["line"] == 3 and err["message"].startswith("invalid YAML:")


def test_duplicate_keys_are_errors():
    err = one("name: x\nrun: y\nname: z\n")
    assert err["line"] == 3 and err["message"] == "duplicate key 'name' (first at line 1)"


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "the spec is empty"), ("- a\n", "expected a mapping of keys at the top, got a list")],
)
def test_empty_or_non_mapping_spec_is_an_error(text, message):
    assert one(text)["message"].startswith(message)


def test_every_problem_is_one_line_in_file_order():
    text = """\
name: Bad
resources: {cpus: -1}
run: y
limits: {idle_timeout: 10x}
"""
    err = fail(text)
    assert isinstance(err, SpecError) and err.exit_code == 2
    lines = str(err).splitlines()
    assert len(lines) == 3 == len(err.errors)
    assert [line.split(":")[1] for line in lines] == ["1", "2", "4"]
    assert err.fields["errors"] == err.errors


_KEYS = st.sampled_from(
    [
        "name",
        "run",
        "stages",
        "resources",
        "gpus",
        "needs",
        "env",
        "secrets",
        "setup",
        "limits",
        "checkpoints",
        "storage",
        "keep_best",
        "budget",
        "warn_at",
        "notify",
        "webhooks",
        "x",
    ]
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 10),
    st.floats(),
    st.text(max_size=6),
    st.sampled_from(["L40S:2", "all", "1h", "90%", "s3://b", "a <= 1", "train", ""]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.one_of(_KEYS, st.integers(0, 2)), inner)
    ),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(_KEYS, _VALUES, max_size=6),
    st.lists(st.sampled_from(["name=x", "stages.0.run=x", "env.A=1", "run", "x.y=1"]), max_size=2),
)
def test_any_yaml_mapping_either_loads_or_raises_one_spec_error(data, overrides):
    try:
        load(yaml.safe_dump(data), overrides)
    except SpecError as err:
        assert err.errors and all(
            set(e) == {"file", "line", "field", "message"} for e in err.errors
        )
        assert len(str(err).splitlines()) == len(err.errors)


def test_recursive_aliases_are_errors_not_crashes():
    err = one("name: x\nrun: y\nsetup: &a [*a]\n")
    assert err["message"] == "alias *a is used inside its own anchor &a"


@pytest.mark.parametrize("loader", ["SafeLoader", "CSafeLoader"])
def test_pure_python_and_libyaml_parsers_give_the_same_lines_and_env_text(loader, monkeypatch):
    from corral.spec import yamlsrc

    if not hasattr(yaml, loader):
        pytest.skip("PyYAML built without libyaml")
    monkeypatch.setattr(yamlsrc, "_LOADER", getattr(yaml, loader))
    assert load("name: x\nrun: y\nenv: {V: 1.10, B: yes}\n").env == {"V": "1.10", "B": "yes"}
    err = one("name: x\nrun: y\n\nlimits:\n  max_runtime: 10x\n")
    assert (err["line"], err["field"]) == (5, "limits.max_runtime")
    assert one("name: x\nrun: [y\n")["message"].startswith("invalid YAML")


def test_control_characters_in_the_spec_keep_each_error_on_one_line():
    """A value with a newline, a record separator or a line separator is shown escaped: the
    message stays one line per error (str.splitlines breaks at all of those)."""
    for bad in ("\x1e", "a\nb", "x\u2028y", "tab\there", "\x85"):
        with pytest.raises(SpecError) as caught:
            load(yaml.safe_dump({"name": bad, "run": "true"}))
        text = str(caught.value)
        assert len(text.splitlines()) == len(caught.value.errors) == 1, text
        assert caught.value.errors[0]["message"].startswith("invalid name")


def test_spec_text_holding_undecodable_bytes_is_a_located_error_not_a_crash():
    err = one("name: x\nrun: 'a\udcffb'\n")
    assert (err["line"], err["message"]) == (2, "not UTF-8 text: '\\xff' cannot be decoded")


@pytest.mark.parametrize("loader", ["SafeLoader", "CSafeLoader"])
def test_invalid_yaml_is_reported_where_the_construct_began(loader, monkeypatch):
    from corral.spec import yamlsrc

    if not hasattr(yaml, loader):
        pytest.skip("PyYAML built without libyaml")
    monkeypatch.setattr(yamlsrc, "_LOADER", getattr(yaml, loader))
    err = one('name: x\nrun: y\nsetup: "make\nenv: {}\nlimits: {}\n')
    assert err["line"] == 3  # the unterminated quote, not the end of the file (line 6)
    assert err["message"] == (
        "invalid YAML: in a quoted scalar begun here: found unexpected end of stream (at line 6)"
    )
    err = one("name: x\nrun: [a,\n  b\nenv: {}\n")
    assert err["line"] == 2
    assert err["message"].startswith("invalid YAML: in a flow sequence begun here: ")
    assert err["message"].endswith(" (at line 4)")
