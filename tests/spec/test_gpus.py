import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from corral.spec import GpuRequest, parse_gpu_request, parse_stage_gpus


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        ("L40S:8", ("L40S", 8, 8)),
        ("l40s:8", ("L40S", 8, 8)),
        ("8", (None, 8, 8)),
        (8, (None, 8, 8)),
        (0, (None, 0, 0)),
        ("A100:1..2", ("A100", 1, 2)),
        ("any:1", (None, 1, 1)),
        ("ANY:0..4", (None, 0, 4)),
        ("L40S", ("L40S", 1, 1)),
        ("h100-sxm:4", ("H100-SXM", 4, 4)),
    ],
)
def test_gpu_request_forms_parse_to_type_min_max(form, expected):
    req = GpuRequest.model_validate(form)
    assert (req.type, req.min, req.max) == expected


@pytest.mark.parametrize(
    ("form", "why"),
    [
        ("L40S:0..x", "'0..x' is not a count"),
        ("L40S:3..1", "range 3..1 is empty"),
        (":4", "type before ':' is missing"),
        ("L40S:-1", "'-1' is not a count"),
        (-1, "cannot be negative"),
        ("", "empty"),
        ("L4 0:1", "not a GPU type"),
        (True, "request true"),
        (1.5, "request 1.5"),
    ],
)
def test_bad_gpu_requests_name_the_problem_and_the_accepted_forms(form, why):
    with pytest.raises(ValueError) as info:
        parse_gpu_request(form)
    assert why in str(info.value)
    assert "accepted forms: 'L40S:8', '8', 8, 'A100:1..2'" in str(info.value)


def test_gpu_request_dict_form_round_trips():
    req = GpuRequest.model_validate("A100:1..2")
    assert GpuRequest.model_validate(req.model_dump(mode="json")) == req


def test_gpu_request_dict_form_checks_min_not_over_max():
    with pytest.raises(ValidationError, match=r"min \(3\) is more than max \(1\)"):
        GpuRequest.model_validate({"type": "A100", "min": 3, "max": 1})


@given(
    st.one_of(st.none(), st.sampled_from(["L40S", "A100", "H100", "RTX4090", "A10G"])),
    st.integers(min_value=0, max_value=32),
    st.integers(min_value=0, max_value=32),  # max <= 64 GPUs per machine
)
def test_gpu_request_text_round_trips(gpu_type, low, extra):
    req = GpuRequest(type=gpu_type, min=low, max=low + extra)
    assert GpuRequest.model_validate(str(req)) == req


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (2, 2), ("3", 3), ("all", "all"), ("ALL", "all"), ([0, 1], [0, 1])],
)
def test_stage_gpus_accept_count_indices_or_all(value, expected):
    assert parse_stage_gpus(value) == expected


@pytest.mark.parametrize("bad", [-1, "L40S:2", [], [0, -1], [0, "a"], [True], True, 1.5, None])
def test_stage_gpus_reject_other_forms(bad):
    with pytest.raises(ValueError):
        parse_stage_gpus(bad)
