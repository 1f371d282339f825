"""Text that a shell command or an environment variable cannot hold (a NUL byte) is refused by
validation, naming the field and never showing the value."""

import pytest

from .helpers import fail, one

COMMAND = "holds a NUL byte (\\0) at position {}: a shell command cannot hold one"
ENV = "holds a NUL byte (\\0) at position {}: an environment variable cannot hold one"


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ('name: x\nrun: "python\\0 train.py"\n', 2, "run", COMMAND.format(6)),
        ('name: x\nrun: y\nsetup: [make, "pip\\0"]\n', 3, "setup[1]", COMMAND.format(3)),
        ('name: x\nrun: y\nsetup: "\\0"\n', 3, "setup[0]", COMMAND.format(0)),
        ('name: x\nstages:\n  - {name: a, run: "b\\0"}\n', 3, "stages[0].run", COMMAND.format(1)),
        ('name: x\nrun: y\nenv: {TOKEN: "s3\\0cret"}\n', 3, "env.TOKEN", ENV.format(2)),
        (
            'name: x\nstages:\n  - {name: a, run: b, env: {K: "\\0"}}\n',
            3,
            "stages[0].env.K",
            ENV.format(0),
        ),
    ],
)
def test_a_nul_byte_in_a_command_or_env_value_is_refused_naming_the_field(
    text, line, field, message
):
    err = one(text)
    assert (err["line"], err["field"], err["message"]) == (line, field, message)
    assert "cret" not in str(fail(text))


def test_a_nul_byte_given_by_set_is_refused_too():
    err = one("name: x\nrun: y\n", ['env.A="a\\0b"'])
    assert (err["file"], err["field"], err["message"]) == ("--set", "env.A", ENV.format(1))
    err = one("name: x\nrun: y\n", ["env.A=a\0b"])  # a raw NUL: YAML refuses it first
    assert err["message"] == (
        "the value is not valid YAML: unacceptable character #x0000: control characters are "
        "not allowed"
    )


def test_a_raw_nul_byte_in_the_file_is_one_located_line():
    err = one("name: x\nrun: y\nsetup: [a\0b]\n")
    assert (err["line"], err["message"]) == (
        3,
        "invalid YAML: unacceptable character #x0000: control characters are not allowed",
    )
