from .helpers import fail, load, one

HEAD = "name: x\nresources: {gpus: 'L40S:4'}\nstages:\n"


def stages(body: str) -> str:
    return HEAD + body


def test_dangling_needs_suggests_the_closest_stage():
    err = one(
        stages("  - name: train\n    run: a\n  - name: eval\n    run: b\n    needs: [trian]\n")
    )
    assert err == {
        "file": "corral.yaml",
        "line": 8,
        "field": "stages[1].needs[0]",
        "message": "unknown stage 'trian' (did you mean 'train'?)",
    }


def test_needs_accepts_a_single_name():
    spec = load(stages("  - {name: a, run: x}\n  - {name: b, run: y, needs: a}\n"))
    assert spec.stages[1].needs == ["a"]


def test_a_stage_needing_itself_is_an_error():
    err = one(stages("  - name: a\n    run: x\n    needs: [a]\n"))
    assert err["message"] == "stage 'a' needs itself" and err["field"] == "stages[0].needs[0]"


def test_a_cycle_is_named_in_dependency_order():
    body = (
        "  - {name: a, run: x, needs: [c]}\n"
        "  - {name: b, run: x, needs: [a]}\n"
        "  - {name: c, run: x, needs: [b]}\n"
        "  - {name: d, run: x, needs: [a]}\n"
    )
    err = one(stages(body))
    assert err["message"] == "dependency cycle: a -> c -> b -> a"
    assert (err["field"], err["line"]) == ("stages[0].needs", 4)


def test_two_separate_cycles_are_both_reported():
    body = (
        "  - {name: a, run: x, needs: [b]}\n"
        "  - {name: b, run: x, needs: [a]}\n"
        "  - {name: c, run: x, needs: [d]}\n"
        "  - {name: d, run: x, needs: [c]}\n"
    )
    messages = [e["message"] for e in fail(stages(body)).errors]
    assert messages == ["dependency cycle: a -> b -> a", "dependency cycle: c -> d -> c"]


def test_a_diamond_is_not_a_cycle():
    body = (
        "  - {name: a, run: x}\n"
        "  - {name: b, run: x, needs: a}\n"
        "  - {name: c, run: x, needs: a}\n"
        "  - {name: d, run: x, needs: [b, c]}\n"
    )
    assert [s.name for s in load(stages(body)).stage_list()] == ["a", "b", "c", "d"]


def test_duplicate_stage_names_are_errors():
    err = one(stages("  - {name: a, run: x}\n  - {name: a, run: y}\n"))
    assert (err["field"], err["line"]) == ("stages[1].name", 5)
    assert err["message"] == "duplicate stage name 'a' (see stages[0])"


def test_gpu_index_out_of_range_names_the_stage_and_index():
    err = one(stages("  - name: train\n    run: x\n    gpus: [2, 3, 4]\n"))
    assert err["field"] == "stages[0].gpus[2]"
    assert err["message"].startswith("stage 'train': GPU index 4 is out of range")


def test_duplicated_gpu_index_is_an_error():
    err = one(stages("  - name: train\n    run: x\n    gpus: [1, 1]\n"))
    assert err["message"] == "stage 'train': GPU index 1 is listed twice"


def test_gpu_count_over_the_resources_maximum_is_an_error():
    err = one(stages("  - name: train\n    run: x\n    gpus: 5\n"))
    assert err["message"] == "stage 'train' asks for 5 GPUs but resources.gpus gives at most 4"


def test_indices_are_checked_against_the_maximum_of_a_range():
    spec = load(
        "name: x\nresources: {gpus: 'A100:1..2'}\nstages:\n  - {name: a, run: x, gpus: [1]}\n"
    )
    assert spec.stages[0].gpus == [1]


def test_stage_gpus_without_resource_gpus_are_an_error_but_all_is_fine():
    text = "name: x\nstages:\n  - {name: a, run: x, gpus: 1}\n  - {name: b, run: x, gpus: all}\n"
    err = one(text)
    assert err["message"] == "stage 'a' asks for GPUs but resources.gpus asks for none"


def test_stages_get_no_gpu_unless_they_ask():
    spec = load(stages("  - {name: a, run: x}\n"))
    assert spec.stages[0].gpus == 0


def test_bad_stage_gpu_form_is_an_error():
    err = one(stages("  - {name: a, run: x, gpus: 'L40S:2'}\n"))
    assert err["field"] == "stages[0].gpus" and "invalid stage GPUs 'L40S:2'" in err["message"]


def test_stage_list_returns_the_stages_as_given():
    spec = load(stages("  - {name: b, run: x}\n  - {name: a, run: y, needs: b, env: {K: 1}}\n"))
    assert [(s.name, s.needs, s.env) for s in spec.stage_list()] == [
        ("b", [], {}),
        ("a", ["b"], {"K": "1"}),
    ]


def test_a_bad_needs_is_reported_with_the_other_errors_in_one_run():
    text = """\
name: x
resources: {cpus: many}
stages:
  - name: train
    run: python train.py
  - name: eval
    run: python eval.py
    needs: [trian]
    gpus: lots
"""
    assert str(fail(text)).splitlines() == [
        "corral.yaml:2: resources.cpus: expected a number, got 'many'",
        "corral.yaml:8: stages[1].needs[0]: unknown stage 'trian' (did you mean 'train'?)",
        "corral.yaml:9: stages[1].gpus: invalid stage GPUs 'lots' (expected a count such as 2, "
        "a list of GPU indices such as [0, 1], or 'all')",
    ]


def test_graph_errors_as_written_are_not_repeated_and_skip_unusable_stages():
    text = """\
name: x
resources: {cpus: many}
stages:
  - 5
  - {name: a, run: b, needs: [a, 7, c]}
  - {name: c, run: d, needs: a}
  - {name: c, run: e}
"""
    lines = str(fail(text)).splitlines()
    assert lines[1:] == [
        "corral.yaml:4: stages[0]: expected a mapping, got 5",
        "corral.yaml:5: stages[1].needs: dependency cycle: a -> c -> a",
        "corral.yaml:5: stages[1].needs[0]: stage 'a' needs itself",
        "corral.yaml:5: stages[1].needs[1]: expected a string, got 7",
        "corral.yaml:7: stages[3].name: duplicate stage name 'c' (see stages[2])",
    ]


def test_a_chain_of_thousands_of_stages_is_checked_without_recursion():
    rows = [f"  - {{name: s{i}, run: r, needs: [s{i + 1}]}}" for i in range(3000)]
    rows.append("  - {name: s3000, run: r, needs: [s0]}")
    err = one("name: x\nstages:\n" + "\n".join(rows) + "\n")
    assert err["message"].startswith("dependency cycle: s0 -> s1 -> s2 -> ")


def test_one_service_at_most_is_served_at_the_root():
    body = (
        "  - {name: ui, run: x, service: {ports: [8000], root: true}}\n"
        "  - {name: api, run: y, service: {ports: [8001], root: true}}\n"
        "  - {name: docs, run: z, service: {ports: [8002]}}\n"
    )
    err = one(stages(body))
    assert err["field"] == "stages[1].service.root"
    assert err["message"] == "only one service can be served at the root; 'ui' is already"
    spec = load(stages(body.replace("root: true}}\n  - {name: api", "}}\n  - {name: api")))
    assert [s.service.root for s in spec.stages if s.service] == [False, True, False]
