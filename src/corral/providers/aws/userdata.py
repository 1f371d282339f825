"""What an EC2 instance boots with: the node contribution of the AWS provider (what its
machines need from the agent plan), and the user-data script that installs corral and starts
``corral agent`` with the plan the controller built.

The plan, the agent token and the job's environment travel in one payload (JSON, gzip,
base64) inside the script, between ``CORRAL_PAYLOAD`` heredoc markers; on the instance
:mod:`corral.providers.aws.boot` decodes it, writes the plan (mode 0600) and starts the agent
with the token in its environment only. The payload is encoded, not encrypted: anyone allowed
``ec2:DescribeInstanceAttribute`` on the instance, or any process on it that can reach the
instance metadata service, can read it (the same holds for any EC2 user-data). The script
never prints it and the bootstrap log never holds it.

User-data is limited to 16 KB before base64; a plan that does not fit is :class:`BadInput`.
"""

from __future__ import annotations

import base64
import gzip
import json
import shlex
import textwrap

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral import __version__
from corral.errors import BadInput
from corral.providers.base import NodeProfile
from corral.wire.plan import AgentPlan

MARKER = "CORRAL_PAYLOAD"
MAX_USER_DATA = 16 * 1024
#: the spot-notice node hook (:mod:`corral.providers.aws.notices`)
NOTICE_HOOK = "corral.providers.aws.notices:NoticeHook"
#: a cloud machine whose controller went away powers itself off this long after its job ended
DEFAULT_CONTROLLER_TIMEOUT_S = 3600.0
SHUTDOWN_COMMAND = "shutdown -h now"
BOOTSTRAP_LOG = "/var/log/corral-bootstrap.log"


class MachinePayload(BaseModel):
    """Everything the instance needs, decoded by ``corral.providers.aws.boot``."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    key: str
    root: str = Field(description="Directory corral owns on the instance.")
    data_mount: str | None = Field(None, description="Mount point of the data volume, if any.")
    plan: AgentPlan
    token: str
    env: dict[str, str] = Field(default_factory=dict)


def node_profile(
    run_id: str,
    *,
    port: int,
    spot: bool,
    data_mount: str | None = None,
    max_grace_s: float = 90.0,
) -> NodeProfile:
    """What an EC2 instance needs from the plan of ``run_id``: the agent listens on ``port``
    on every interface (the security group admits only the controller), powers the machine
    off when its controller is gone (instance-initiated shutdown is ``terminate``), polls for
    spot notices on a spot instance, and stops within the two-minute notice. With a data
    volume, checkpoints live on it. The agent keeps its state under the payload's root
    (``--state-dir``, set by :mod:`corral.providers.aws.boot`)."""
    return NodeProfile(
        host="0.0.0.0",
        port=port,
        checkpoint_dir=f"{data_mount}/{run_id}/checkpoints" if data_mount else None,
        max_grace_seconds=max_grace_s,
        controller_timeout_s=DEFAULT_CONTROLLER_TIMEOUT_S,
        shutdown_command=SHUTDOWN_COMMAND,
        node_hooks=[NOTICE_HOOK] if spot else [],
    )


def encode_payload(payload: MachinePayload) -> str:
    raw = payload.model_dump_json().encode()
    packed = base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode()
    return "\n".join(textwrap.wrap(packed, 76))


def decode_payload(text: str) -> MachinePayload:
    """The payload from its encoded text (whitespace ignored); :class:`BadInput` if broken."""
    try:
        raw = gzip.decompress(base64.b64decode("".join(text.split()), validate=True))
        return MachinePayload.model_validate(json.loads(raw))
    except (ValueError, OSError, ValidationError) as exc:
        raise BadInput(f"corral bootstrap payload is unreadable ({type(exc).__name__})") from None


def extract_payload(user_data: str) -> MachinePayload:
    """The payload inside a user-data script written by :func:`user_data`."""
    start = user_data.find(f"<<'{MARKER}'\n")
    if start < 0:
        raise BadInput("this user-data was not written by corral (no payload)")
    body = user_data[user_data.index("\n", start) + 1 :]
    end = body.find(f"\n{MARKER}\n")
    if end < 0:
        raise BadInput("corral user-data is truncated (payload not terminated)")
    return decode_payload(body[:end])


def _mount_script(volume_id: str, mount: str) -> str:
    serial = volume_id.replace("-", "")
    return f"""\
# the run's data volume: Nitro names it by serial, older types by the attach device
DEV=""
for _ in $(seq 1 120); do
  for d in /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{serial} /dev/sdf /dev/xvdf; do
    if [ -b "$d" ]; then DEV="$d"; break 2; fi
  done
  sleep 5
done
if [ -z "$DEV" ]; then echo "corral: data volume {volume_id} never appeared"; false; fi
blkid "$DEV" >/dev/null 2>&1 || mkfs.ext4 -q -L corral-data "$DEV"
install -d -m 0755 {mount}
mountpoint -q {mount} || mount "$DEV" {mount}
"""


def user_data(payload: MachinePayload, *, install: str, volume_id: str | None = None) -> str:
    """The bash script the instance runs once at first boot. :class:`BadInput` if it would
    exceed EC2's 16 KB limit."""
    plan = payload.plan
    root = shlex.quote(payload.root)
    mount = ""
    if volume_id and payload.data_mount:
        mount = _mount_script(volume_id, shlex.quote(payload.data_mount))
    script = f"""\
#!/bin/bash
# corral {__version__} bootstrap: {payload.key} (run {plan.run_id}, attempt {plan.attempt})
set -euo pipefail
umask 077
exec >>{BOOTSTRAP_LOG} 2>&1
trap 'echo "corral: bootstrap failed at line $LINENO; powering off"; {SHUTDOWN_COMMAND}' ERR
ROOT={root}
install -d -m 0700 "$ROOT" "$ROOT/agent"
{mount}if [ ! -x "$ROOT/venv/bin/python" ]; then
  python3 -m venv "$ROOT/venv" || {{ apt-get update -q && apt-get install -y -q python3-venv \\
    && python3 -m venv "$ROOT/venv"; }}
fi
"$ROOT/venv/bin/python" -m pip install --quiet --upgrade pip
"$ROOT/venv/bin/python" -m pip install --quiet {shlex.quote(install)}
cat > "$ROOT/bootstrap.b64" <<'{MARKER}'
{encode_payload(payload)}
{MARKER}
"$ROOT/venv/bin/python" -m corral.providers.aws.boot --payload "$ROOT/bootstrap.b64"
"""
    size = len(script.encode())
    if size > MAX_USER_DATA:
        raise BadInput(
            f"the agent plan is too large for EC2 user-data ({size} bytes, limit "
            f"{MAX_USER_DATA}): shorten the job's env, setup or stages"
        )
    return script
