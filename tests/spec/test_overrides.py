import pytest

from .helpers import fail, load, one

PIPE = """\
name: x
resources: {gpus: 'L40S:4'}
stages:
  - name: train
    run: python train.py
    gpus: 2
  - name: v1.eval
    run: python eval.py
    needs: train
"""


def test_override_resources_gpus_is_parsed_like_the_file():
    spec = load("name: x\nrun: y\n", ["resources.gpus=L40S:2"])
    assert str(spec.resources.gpus) == "L40S:2"


def test_override_number_budget_and_duration():
    spec = load("name: x\nrun: y\n", ["budget.max_cost_usd=20", "limits.max_runtime=2h"])
    assert spec.budget.max_cost_usd == 20.0
    assert spec.limits.max_runtime == 7200.0


def test_override_env_keeps_the_text_as_typed():
    spec = load("name: x\nrun: y\nenv: {A: a}\n", ["env.STEPS=100", "env.V=1.10", "env.E="])
    assert spec.env == {"A": "a", "STEPS": "100", "V": "1.10", "E": ""}


def test_override_a_stage_by_name_and_by_index():
    spec = load(PIPE, ["stages.train.run=python x.py", "stages.1.run=python y.py"])
    assert [s.run for s in spec.stages] == ["python x.py", "python y.py"]


def test_override_a_stage_whose_name_has_dots():
    spec = load(PIPE, ["stages.v1.eval.gpus=1"])
    assert spec.stages[1].gpus == 1


def test_override_with_a_yaml_list_and_null():
    spec = load(
        "name: x\nrun: y\nbudget: {max_cost_usd: 5}\n",
        ["resources.regions=[us-east-1, eu-west-1]", "budget.max_cost_usd=null"],
    )
    assert spec.resources.regions == ["us-east-1", "eu-west-1"]
    assert spec.budget.max_cost_usd is None


def test_override_text_field_keeps_numbers_as_text():
    assert load("name: x\nrun: y\n", ["run=007"]).run == "007"


def test_later_overrides_win():
    spec = load("name: x\nrun: y\n", ["budget.max_cost_usd=1", "budget.max_cost_usd=2"])
    assert spec.budget.max_cost_usd == 2.0


@pytest.mark.parametrize(
    ("override", "field", "message"),
    [
        (
            "resorces.gpus=2",
            "resorces.gpus",
            "unknown key 'resorces' in the top level (did you mean 'resources'?)",
        ),
        (
            "resources.gpu=2",
            "resources.gpu",
            "unknown key 'gpu' in resources (did you mean 'gpus'?)",
        ),
        (
            "stages.trian.run=x",
            "stages.trian.run",
            "stages has no item named 'trian' (did you mean 'train'?)",
        ),
        ("stages.5.run=x", "stages.5.run", "stages has no item 5 (it has 2)"),
        (
            "stages.train.rn=x",
            "stages.train.rn",
            "unknown key 'rn' in stages.0 (did you mean 'run'?)",
        ),
        ("env.A.B=1", "env.A.B", "'A' in env is a single value, it has no key 'B'"),
        ("resources.gpus.min=1", "resources.gpus.min", "resources.gpus is a single value"),
        ("name.x=1", "name.x", "name is a single value, it has no key 'x'"),
    ],
)
def test_bad_override_paths_are_errors_with_suggestions(override, field, message):
    err = one(PIPE, [override])
    assert (err["file"], err["line"], err["field"]) == ("--set", None, field)
    assert err["message"].startswith(message)


def test_stage_override_on_a_run_spec_is_an_error():
    err = one("name: x\nrun: y\n", ["stages.train.run=x"])
    assert err["message"] == "stages is not set in the spec"


@pytest.mark.parametrize("bad", ["resources.gpus", "=3", "a..b=1", ".x=1"])
def test_malformed_overrides_are_named(bad):
    err = one("name: x\nrun: y\n", [bad])
    assert err["message"] == (
        f"malformed override '{bad}' (expected KEY.PATH=VALUE, e.g. resources.gpus=L40S:2)"
    )


def test_every_bad_override_is_reported():
    err = fail("name: x\nrun: y\n", ["nope", "resorces.x=1"])
    assert len(err.errors) == 2


def test_invalid_override_values_are_reported_as_coming_from_set():
    err = one(PIPE, ["resources.gpus=L40S:0..x"])
    assert (err["file"], err["line"], err["field"]) == ("--set", None, "resources.gpus")
    assert str(fail(PIPE, ["resources.gpus=L40S:0..x"])).startswith("--set: resources.gpus: ")


def test_errors_caused_by_an_override_elsewhere_keep_their_file_lines():
    err = one(PIPE, ["resources.gpus=L40S:1"])
    assert (err["file"], err["line"], err["field"]) == ("corral.yaml", 6, "stages[0].gpus")


def test_override_value_that_is_not_yaml_is_an_error():
    err = one("name: x\nrun: y\n", ["resources.regions=[a, b"])
    assert err["message"].startswith("the value is not valid YAML")


# Python keeps a command-line byte that is not UTF-8 as a lone surrogate ('\udcff' for 0xff).
@pytest.mark.parametrize(
    ("override", "field", "message"),
    [
        ("\udcffkey=1", "", "the key '\\xffkey' is not UTF-8 text"),
        ("env.\udcff=1", "", "the key 'env.\\xff' is not UTF-8 text"),
        (
            "env.A=ab\udcff",
            "env.A",
            "the value is not UTF-8 text ('\\xff' at position 2 cannot be decoded)",
        ),
        (
            "run=\ud800",
            "run",
            "the value is not UTF-8 text ('\\ud800' at position 0 cannot be decoded)",
        ),
    ],
)
def test_a_key_or_value_that_is_not_utf8_is_one_bad_input_line(override, field, message):
    err = fail("name: x\nrun: y\n", [override])
    assert err.exit_code == 2 and str(err).isprintable()
    assert err.errors == [{"file": "--set", "line": None, "field": field, "message": message}]
