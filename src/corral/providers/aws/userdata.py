"""What an EC2 instance boots with: the node contribution of the AWS provider (what its
machines need from the agent plan), and the user-data script that makes sure this corral runs
there (the node bootstrap: the controller's own wheel through the run's storage, else the same
version from an index) and starts ``corral agent`` with the plan the controller built.

The plan, the agent token and the job's environment travel in one payload (JSON, gzip,
base64) inside the script, between ``CORRAL_PAYLOAD`` heredoc markers; on the instance
:mod:`corral.providers.aws.boot` decodes it, writes the plan (mode 0600) and starts the agent
with the token in its environment only. The payload is encoded, not encrypted: anyone allowed
``ec2:DescribeInstanceAttribute`` on the instance, or any process on it that can reach the
instance metadata service, can read it (the same holds for any EC2 user-data). The script
never prints it and the bootstrap log never holds it.

User-data is limited to 16 KB before base64; a plan that does not fit is :class:`BadInput`.

The script's own output goes to the bootstrap log; the console (what cloud-init prints,
``get_console_output``) gets one line when the bootstrap starts and one when it fails. When the
node bootstrap says the image cannot run corral (exit :data:`IMAGE_UNUSABLE_EXIT`: its python
is older than 3.11), that line carries its reason (:func:`unusable_image_reason` reads it back)
and the machine powers off: the provider fails the attempt with that reason and launches no
other machine on that image.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import shlex
import textwrap

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral import __version__
from corral.errors import BadInput
from corral.providers.base import NodeProfile
from corral.providers.common.wheel import ENV_INSTALL, bootstrap_script
from corral.wire.plan import AgentPlan

MARKER = "CORRAL_PAYLOAD"
MAX_USER_DATA = 16 * 1024
#: the spot-notice node hook (:mod:`corral.providers.aws.notices`)
NOTICE_HOOK = "corral.providers.aws.notices:NoticeHook"
#: a cloud machine whose controller went away powers itself off this long after its job ended
DEFAULT_CONTROLLER_TIMEOUT_S = 3600.0
SHUTDOWN_COMMAND = "shutdown -h now"
BOOTSTRAP_LOG = "/var/log/corral-bootstrap.log"
#: the node bootstrap's exit status when the image cannot run corral (EX_CONFIG)
IMAGE_UNUSABLE_EXIT = 78
_UNUSABLE_RE = re.compile(
    rf"^corral: bootstrap failed \(exit {IMAGE_UNUSABLE_EXIT}\): (?P<why>.+?); powering off\s*$",
    re.M,
)


def unusable_image_reason(console: str) -> str | None:
    """Why the image cannot run corral, from a machine's console output (None if it does not
    say so)."""
    m = _UNUSABLE_RE.search(console or "")
    return m["why"].strip() if m else None


class NamedMount(BaseModel):
    """A named volume (``spec.volumes``) the instance mounts before the agent starts."""

    model_config = ConfigDict(extra="forbid")

    volume_id: str
    device: str
    path: str


class MachinePayload(BaseModel):
    """Everything the instance needs, decoded by ``corral.providers.aws.boot``."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    key: str
    root: str = Field(description="Directory corral owns on the instance.")
    data_mount: str | None = Field(None, description="Mount point of the data volume, if any.")
    mounts: list[NamedMount] = Field(
        default_factory=list, description="Named volumes, mounted at their paths."
    )
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
    root: str = "/opt/corral",
) -> NodeProfile:
    """What an EC2 instance needs from the plan of ``run_id``: the agent listens on ``port``
    on every interface (the security group admits only the controller), powers the machine
    off when its controller is gone (instance-initiated shutdown is ``terminate``), polls for
    spot notices on a spot instance, and stops within the two-minute notice. With a data
    volume, checkpoints live on it. The agent keeps its state under the payload's root
    (``--state-dir``, set by :mod:`corral.providers.aws.boot`), and the job's code is shipped
    to ``<root>/runs/<run id>/work``. A job with ``image:`` runs in it through the AMI's
    docker (see corral.wire.container)."""
    return NodeProfile(
        host="0.0.0.0",
        port=port,
        checkpoint_dir=f"{data_mount}/{run_id}/checkpoints" if data_mount else None,
        max_grace_seconds=max_grace_s,
        controller_timeout_s=DEFAULT_CONTROLLER_TIMEOUT_S,
        shutdown_command=SHUTDOWN_COMMAND,
        node_hooks=[NOTICE_HOOK] if spot else [],
        workdir=f"{root.rstrip('/')}/runs/{run_id}/work",
        install_corral=True,
        container_engine="docker",  # the Deep Learning AMI's, with the NVIDIA toolkit
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


def _named_mount_script(m: NamedMount) -> str:
    """Wait for a named volume (attached once the instance runs), format it if blank, mount
    it at its path."""
    serial = m.volume_id.replace("-", "")
    alt = m.device.replace("/dev/sd", "/dev/xvd")
    path = shlex.quote(m.path)
    return f"""\
# named volume {m.volume_id}
DEV=""
for _ in $(seq 1 120); do
  for d in /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{serial} {m.device} {alt}; do
    if [ -b "$d" ]; then DEV="$d"; break 2; fi
  done
  sleep 5
done
if [ -z "$DEV" ]; then echo "corral: volume {m.volume_id} never appeared"; false; fi
blkid "$DEV" >/dev/null 2>&1 || mkfs.ext4 -q "$DEV"
install -d -m 0755 {path}
mountpoint -q {path} || mount "$DEV" {path}
"""


def user_data(
    payload: MachinePayload,
    *,
    install: str | None = None,
    volume_id: str | None = None,
    install_env: dict[str, str] | None = None,
) -> str:
    """The bash script the instance runs once at first boot: the node bootstrap
    (:mod:`corral.providers.common.wheel`: this corral's version from the controller's wheel,
    or from an index) then :mod:`corral.providers.aws.boot`. ``install``: a pip requirement
    that installs corral instead (``CORRAL_AWS_INSTALL``, an advanced override).
    :class:`BadInput` if it would exceed EC2's 16 KB limit."""
    plan = payload.plan
    root = shlex.quote(payload.root)
    mount = ""
    if volume_id and payload.data_mount:
        data = shlex.quote(payload.data_mount)
        # a test host has no block device: the mount point is a directory of its root
        mount = (
            f'if [ -n "$NODE" ]; then install -d -m 0755 "$NODE"{data}; else\n'
            + _mount_script(volume_id, data)
            + "fi\n"
        )
    for named in payload.mounts:  # a test host has no block device for them either
        path = shlex.quote(named.path)
        mount += (
            f'if [ -n "$NODE" ]; then install -d -m 0755 "$NODE"{path}; else\n'
            + _named_mount_script(named)
            + "fi\n"
        )
    variables = {"CORRAL_VERSION": __version__}
    variables.update(install_env or {})
    if install:
        variables[ENV_INSTALL] = install
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(variables.items()))
    script = f"""\
#!/bin/bash
# corral {__version__} bootstrap: {payload.key} (run {plan.run_id}, attempt {plan.attempt})
# (CORRAL_NODE_ROOT, CORRAL_SHUTDOWN_COMMAND: set only by a test host playing the instance)
set -euo pipefail
umask 077
NODE="${{CORRAL_NODE_ROOT:-}}"
LOG="$NODE"{BOOTSTRAP_LOG}
mkdir -p "$(dirname "$LOG")"
exec 3>&1 >>"$LOG" 2>&1  # fd 3: the console; the rest: the bootstrap log
echo "corral: bootstrap of {payload.key} started (log: {BOOTSTRAP_LOG})" >&3
failed() {{
  local rc=$1 line=$2 why=""
  if [ "$rc" = {IMAGE_UNUSABLE_EXIT} ]; then
    why="$(grep '^corral bootstrap: ' "$LOG" | tail -n 1 | cut -c 19-)"
  fi
  local msg="corral: bootstrap failed (exit $rc): ${{why:-at line $line, see {BOOTSTRAP_LOG}}}; powering off"
  echo "$msg"
  echo "$msg" >&3
  ${{CORRAL_SHUTDOWN_COMMAND-{SHUTDOWN_COMMAND}}}
}}
trap 'failed $? $LINENO' ERR
ROOT="$NODE"{root}
install -d -m 0700 "$ROOT" "$ROOT/agent"
{mount}cat > "$ROOT/node-bootstrap.sh" <<'CORRAL_NODE_BOOTSTRAP'
{bootstrap_script().rstrip()}
CORRAL_NODE_BOOTSTRAP
cat > "$ROOT/bootstrap.b64" <<'{MARKER}'
{encode_payload(payload)}
{MARKER}
{exports}
export CORRAL_NODE_HOME="$ROOT"
bash "$ROOT/node-bootstrap.sh" -m corral.providers.aws.boot --payload "$ROOT/bootstrap.b64"
"""
    size = len(script.encode())
    if size > MAX_USER_DATA:
        raise BadInput(
            f"the agent plan is too large for EC2 user-data ({size} bytes, limit "
            f"{MAX_USER_DATA}): shorten the job's env, setup or stages"
        )
    return script
