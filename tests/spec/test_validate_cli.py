import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from corral.cli.validate import validate
from corral.errors import CorralError

from .helpers import EXAMPLES


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``validate`` the way the real app does: CorralError -> stderr + its exit code."""
    app = typer.Typer()
    app.command("validate")(validate)

    @app.callback()
    def main() -> None:
        """A group, so the command is called by name."""

    command = typer.main.get_command(app)
    try:
        command.main(args, prog_name="corral", standalone_mode=False)
        code = 0
    except CorralError as err:
        print(str(err), file=sys.stderr)
        code = err.exit_code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_validate_prints_the_resolved_spec_as_yaml(capsys):
    code, out, _ = run_cli(["validate", str(EXAMPLES / "pipeline.yaml")], capsys)
    assert code == 0
    data = yaml.safe_load(out)
    assert data["resources"]["gpus"] == {"type": "L40S", "min": 8, "max": 8}
    assert data["workdir"] == str(EXAMPLES.resolve())
    assert data["recovery"]["max_preemption_restarts"] == 10


def test_validate_json_applies_overrides(capsys):
    args = ["validate", str(EXAMPLES / "minimal.yaml"), "--json", "--set", "resources.gpus=A100:2"]
    args += ["--set", "budget.max_cost_usd=20"]
    code, out, _ = run_cli(args, capsys)
    assert code == 0
    data = json.loads(out)
    assert data["resources"]["gpus"] == {"type": "A100", "min": 2, "max": 2}
    assert data["budget"]["max_cost_usd"] == 20.0


def test_validate_reports_each_problem_on_its_own_line_and_exits_2(tmp_path: Path, capsys):
    spec = tmp_path / "corral.yaml"
    spec.write_text("name: x\nresorces: {}\nrun: y\nlimits: {max_runtime: 10x}\n")
    code, out, err = run_cli(["validate", str(spec)], capsys)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"{spec}:2: unknown key 'resorces' (did you mean 'resources'?)"
    assert lines[1].startswith(f"{spec}:4: limits.max_runtime: invalid duration '10x'")
    assert len(lines) == 2


def test_validate_dag_errors_after_the_keys_are_right(tmp_path: Path, capsys):
    spec = tmp_path / "corral.yaml"
    spec.write_text(
        "name: x\nstages:\n  - {name: train, run: b}\n  - {name: e, run: b, needs: [trian]}\n"
    )
    code, _, err = run_cli(["validate", str(spec)], capsys)
    assert code == 2
    assert err.strip() == (
        f"{spec}:4: stages[1].needs[0]: unknown stage 'trian' (did you mean 'train'?)"
    )


def test_validate_missing_file_exits_not_found(tmp_path: Path, capsys):
    code, _, err = run_cli(["validate", str(tmp_path / "nope.yaml")], capsys)
    assert code == 3 and "nope.yaml" in err


def test_validate_bad_override_exits_2(capsys):
    code, _, err = run_cli(["validate", str(EXAMPLES / "minimal.yaml"), "--set", "oops"], capsys)
    assert code == 2 and "malformed override 'oops'" in err


def test_validate_works_through_the_typer_cli_runner():
    app = typer.Typer()
    app.command("validate")(validate)
    result = CliRunner().invoke(app, [str(EXAMPLES / "minimal.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "hello"


def test_importing_the_command_does_not_import_the_spec_package():
    code = "import sys, corral.cli.validate; print('corral.spec' in sys.modules, 'pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_an_undecodable_set_key_exits_2_with_one_line(tmp_path: Path):
    import corral

    spec = tmp_path / "corral.yaml"
    spec.write_text("name: x\nrun: y\n")
    env = {**os.environ, "PYTHONPATH": str(Path(corral.__file__).parents[1])}
    argv = [sys.executable, "-m", "corral.cli", "validate", str(spec), "--set", b"env.\xff=1"]
    done = subprocess.run(argv, capture_output=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().strip() == "error: --set: the key 'env.\\xff' is not UTF-8 text"
