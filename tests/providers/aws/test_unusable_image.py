"""An image whose python is older than 3.11 cannot run corral's node: the machine says why on
its console once and powers off, the attempt fails with that reason, and no other machine is
launched on that image (the run fails at once instead of booting the same failure per
attempt). The image's python is played by a stand-in that answers 3.10."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import BadInput
from corral.providers.aws.settings import DLAMI_NAME, DLAMI_PARAMETER
from corral.providers.aws.userdata import unusable_image_reason
from corral.providers.base import InstanceState
from corral.testing.aws import LocalMachineRunner
from support.waiting import wait_until

from ..contract import new_key
from .test_provider import A10G, bootstrap, wait_status


def old_python(tmp_path: Path) -> Path:
    """A python3 that is 3.10 (all the bootstrap asks it before giving up)."""
    bin_dir = tmp_path / "image-bin"
    bin_dir.mkdir()
    py = bin_dir / "python3"
    py.write_text("#!/bin/sh\necho 3.10\n")
    py.chmod(0o755)
    return py


def test_the_default_image_is_the_ubuntu_24_04_deep_learning_base_ami() -> None:
    assert "ubuntu-24.04" in DLAMI_PARAMETER and DLAMI_PARAMETER.startswith("/aws/service/")
    assert "(Ubuntu 24.04)" in DLAMI_NAME and "22.04" not in DLAMI_PARAMETER + DLAMI_NAME


def test_an_image_with_python_3_10_fails_the_attempt_with_why_and_is_not_launched_again(
    make_provider, aws, owner, corral_home, tmp_path
):
    runner = LocalMachineRunner(corral_home, python=str(old_python(tmp_path)))
    p = make_provider(machine_runner=runner)
    offers = [o for o in p.offers(A10G.model_copy(update={"spot": False}))]
    key = new_key()
    inst = p.launch(offers[0], bootstrap(tmp_path, key), key)
    wait_status(p, inst, {InstanceState.PROVISIONING, InstanceState.RUNNING})  # boots it
    wait_until(lambda: "bootstrap failed" in (runner.console(inst.instance_id) or ""), 30, 0.1)
    console = runner.console(inst.instance_id) or ""
    assert console.count("is older than 3.11") == 1, console
    assert "corral: bootstrap failed (exit 78): python3 3.10 is older than 3.11" in console
    aws.power_off(inst.instance_id)  # the machine's `shutdown -h now`, played
    st = p.status(inst)
    assert st.state == InstanceState.FAILED
    assert st.detail.startswith("the image cannot run corral: python3 3.10 is older than 3.11")
    assert "python3 3.10 is older than 3.11" in p.logs(inst)  # what the controller keeps
    # the next attempt launches nothing: one line saying why and what to set
    image = aws.image_id()
    again = new_key()
    with pytest.raises(BadInput) as exc:
        p.launch(offers[-1], bootstrap(tmp_path, again), again)
    assert exc.value.message.startswith(f"aws: image {image} cannot run corral (python3 3.10 ")
    assert "CORRAL_AWS_IMAGE_ID" in exc.value.message and "\n" not in exc.value.message
    assert aws.live_instances(owner) == []
    # a restarted controller (a new provider on the same CORRAL_HOME) refuses it as well
    restarted = make_provider(machine_runner=runner)
    third = new_key()
    with pytest.raises(BadInput, match=f"aws: image {image} cannot run corral"):
        restarted.launch(offers[-1], bootstrap(tmp_path, third), third)
    assert aws.live_instances(owner) == []
    # another image (CORRAL_AWS_IMAGE_ID) is not refused for it; nor is that one elsewhere
    assert restarted.unusable_images.get("us-east-1", "ami-0123456789abcdef0") is None
    assert restarted.unusable_images.get("eu-west-1", image) is None


def test_a_machine_that_powered_off_for_another_reason_is_only_terminated(
    make_provider, aws, tmp_path
):
    p = make_provider(machine_runner=None)
    key = new_key()
    inst = p.launch(next(o for o in p.offers(A10G) if not o.spot), bootstrap(tmp_path, key), key)
    aws.power_off(inst.instance_id)
    st = p.status(inst)
    assert st.state == InstanceState.TERMINATED and "powered itself off" in st.detail
    again = new_key()
    assert p.launch(inst.offer, bootstrap(tmp_path, again), again).instance_id


def test_the_console_line_is_read_back_only_when_it_says_the_image_is_unusable() -> None:
    line = "corral: bootstrap failed (exit 78): python3 3.9 is older than 3.11: x; powering off"
    assert unusable_image_reason(f"boot\n{line}\nmore") == "python3 3.9 is older than 3.11: x"
    other = "corral: bootstrap failed (exit 1): at line 40, see /var/log/x; powering off"
    assert unusable_image_reason(other) is None and unusable_image_reason("") is None


def test_refusals_are_kept_in_a_file_an_unreadable_one_counting_as_none(tmp_path: Path) -> None:
    from corral.providers.aws.image_refusals import FILE, ImageRefusals

    refusals = ImageRefusals(tmp_path / "aws")
    assert refusals.get("us-east-1", "ami-1") is None  # no file yet
    refusals.refuse("us-east-1", "ami-1", "python3 3.10 is older than 3.11")
    again = ImageRefusals(tmp_path / "aws")  # another process reading the same CORRAL_HOME
    assert again.get("us-east-1", "ami-1") == "python3 3.10 is older than 3.11"
    assert again.get("us-west-2", "ami-1") is None
    (tmp_path / "aws" / FILE).write_text("{not json")
    assert again.get("us-east-1", "ami-1") is None
    again.refuse("us-east-1", "ami-2", "python3 3.9 is older than 3.11")
    assert ImageRefusals(tmp_path / "aws").get("us-east-1", "ami-2").startswith("python3 3.9")
