"""What a container group is created with: its name, environment, command, probes, gateway.

One attempt is one container group with one replica, named for the launch key
(:func:`group_name`). Its command is the node bootstrap (``providers/common/node_bootstrap.sh``:
this corral's version from the controller's wheel, fetched from the run's storage, or from an
index, when the image lacks it), which then runs ``python -m corral.providers.salad.boot agent``:
that unpacks the boot blob from the environment and starts corral's agent on the agent port,
the port of the container gateway. The job's code is shipped to ``/corral/runs/<run>/work``
(through the run's storage, or the agent's port behind the gateway).

SaladCloud bounds every environment value and every command argument to 1,000 characters on
one line (the document's ``maxLength: 1000``, ``pattern: ^.*$``), so what is longer travels in
pieces and what has a line break travels in base64: the boot blob in the one delivery format
of container clouds (:mod:`corral.agent.boot`: the plan as the controller built it, the agent
token and the job's env, secrets included; gzip + base64 in ``CORRAL_BOOT_GZ_<i>`` with
``CORRAL_BOOT_PARTS``, made for this bound), the node bootstrap script base64-encoded in
``CORRAL_BOOTSTRAP__<i>``, a long install value (a presigned wheel URL) in ``<NAME>__<i>``
named in ``CORRAL_SPLIT``, and an install value with a line break base64-encoded and named in
``CORRAL_B64``; the command (:data:`JOIN`, under 1,000 characters) joins and decodes them back
with bash and coreutils' ``base64`` (an image without ``base64`` stops with a line saying so).
SaladCloud shows a group's environment to holders of the organization's API key, like a cloud
shows user-data, and to no one else; corral never logs or returns it.

The probes call the agent's ``/health`` (startup, liveness) and ``/ready`` (readiness), which
answer without a token and reveal only liveness. A failing startup or liveness probe makes
SaladCloud interrupt the instance, which corral reads as a preemption.
"""

from __future__ import annotations

import base64
from typing import Any

from corral.agent.boot import MAX_VALUE
from corral.providers.base import Bootstrap, ImageRef, NodeProfile, Offer
from corral.providers.common import wheel
from corral.providers.common.boot_blob import boot_env, label_name
from corral.providers.salad.settings import SaladSettings

NAME_PREFIX = "corral-"
ENV_KEY = "CORRAL_SALAD_LAUNCH_KEY"
ENV_OFFER = "CORRAL_SALAD_OFFER"
#: "host:port" the agent binds instead of ``[::]:<agent_port>`` (a fake cloud running several
#: containers on one host gives each its own port; a real container never sets it)
ENV_BIND = "CORRAL_AGENT_BIND"
NODE_HOOK = "corral.providers.salad.node:SaladNode"
#: where a container keeps the runs' code
RUNS = "/corral/runs"
ENV_BOOTSTRAP = "CORRAL_BOOTSTRAP"
ENV_SPLIT = "CORRAL_SPLIT"
ENV_B64 = "CORRAL_B64"
#: what the container runs once corral is there
BOOT_ARGS = ("-m", "corral.providers.salad.boot", "agent")
#: the container's command: join what travelled in pieces, decode what travelled in base64
#: (a decoded value keeps a trailing line break: the ``.`` after it is cut off), then run the
#: node bootstrap
JOIN = (
    'join() { local n="$1" i=0 s="" v; while v="${n}__$i"; [ -n "${!v+x}" ]; do '
    's="$s${!v}"; unset "$v"; i=$((i+1)); done; printf "%s" "$s"; }; '
    'for n in ${CORRAL_SPLIT:-}; do export "$n=$(join "$n")"; done; '
    'for n in ${CORRAL_B64:-}; do v="$(printf "%s" "${!n}" | base64 -d; echo .)"; '
    'export "$n=${v%.}"; done; '
    'B="${TMPDIR:-/tmp}/corral-node-bootstrap-$$.sh"; '
    'join CORRAL_BOOTSTRAP | base64 -d > "$B" || '
    '{ echo "corral: cannot decode the node bootstrap (does the image have base64?)" >&2; '
    "exit 127; }; "
    'exec bash "$B" "$@"'
)
PROBE_HEADER = {"name": "X-Corral-Probe", "value": "salad"}
#: the startup probe: the most failures SaladCloud allows (1-20), each period long enough that
#: a container has 10 minutes to pull, install corral and start the agent
STARTUP_FAILURES = 20
STARTUP_PERIOD_S = 30


def group_name(key: str) -> str:
    """The group's name carries the launch key (a DNS label, unique per key)."""
    return label_name(NAME_PREFIX, key)


def node_profile(
    run_id: str, settings: SaladSettings, interruptions_per_hour: float | None = None
) -> NodeProfile:
    """The agent listens on every interface (IPv6 included: the gateway needs it) on the agent
    port; the node hook records the machine; the code is shipped to
    ``/corral/runs/<run>/work``; the image may lack corral (the bootstrap installs it);
    checkpoints stay on the container's disk (wiped on a reallocation: a run on SaladCloud
    resumes from ``checkpoints.storage``)."""
    return NodeProfile(
        host="::",
        port=settings.agent_port,
        controller_timeout_s=settings.controller_timeout_s,
        node_hooks=[NODE_HOOK],
        interruptions_per_hour=interruptions_per_hour,
        workdir=f"{RUNS}/{run_id}/work",
        install_corral=True,
    )


def one_line(value: str) -> bool:
    """Whether SaladCloud takes ``value`` as an environment value or a command argument as it
    is (the document's ``^.*$``: no line break, in the ECMA-262 reading of ``.``)."""
    return not any(c in value for c in "\n\r\u2028\u2029")


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode("ascii")


def _pieces(env: dict[str, str], name: str, value: str, *, always: bool = False) -> bool:
    """Put ``value`` in ``env`` as ``name``, or in pieces ``<name>__<i>`` when it is longer
    than one value may be (or ``always``); True if it was split."""
    size = MAX_VALUE
    if len(value) <= size and not always:
        env[name] = value
        return False
    for i in range(0, len(value), size):
        env[f"{name}__{i // size}"] = value[i : i + size]
    return True


def container_env(
    bootstrap: Bootstrap, offer: Offer, key: str, settings: SaladSettings
) -> dict[str, str]:
    env = boot_env(bootstrap)
    # an empty value is left out (SaladCloud takes 1-1,000 characters): unset to the bootstrap
    install = [(n, v) for n, v in sorted(bootstrap.install.items()) if v]
    encoded = [n for n, v in install if not one_line(v)]
    split = [n for n, v in install if _pieces(env, n, v if one_line(v) else _b64(v))]
    if split:
        env[ENV_SPLIT] = " ".join(split)
    if encoded:
        env[ENV_B64] = " ".join(encoded)
    _pieces(env, ENV_BOOTSTRAP, _b64(start_script(settings)), always=True)
    env[ENV_KEY] = key
    offer_json = offer.model_dump_json(exclude_defaults=True)
    if len(offer_json) <= MAX_VALUE:
        env[ENV_OFFER] = offer_json
    return env


def start_script(settings: SaladSettings) -> str:
    """The node bootstrap (see :mod:`corral.providers.common.wheel`), preceded by
    ``install_command`` when set (an advanced override, run only when the image's python
    lacks corral)."""
    return wheel.start_script(settings.install_command)


def command() -> list[str]:
    """The container's command: :data:`JOIN`, then the node bootstrap with :data:`BOOT_ARGS`."""
    return ["bash", "-c", JOIN, "corral-boot", *BOOT_ARGS]


def _probe(path: str, port: int, *, period: int, timeout: int, failures: int) -> dict[str, Any]:
    return {
        "http": {"path": path, "port": port, "scheme": "http", "headers": [dict(PROBE_HEADER)]},
        "initial_delay_seconds": 0,
        "period_seconds": period,
        "timeout_seconds": timeout,
        "success_threshold": 1,
        "failure_threshold": failures,
    }


def create_body(
    offer: Offer,
    env: dict[str, str],
    key: str,
    settings: SaladSettings,
    registry_password: str | None = None,
    image: ImageRef | None = None,
) -> dict[str, Any]:
    """``POST …/containers`` for one attempt: one replica, started at once. ``image``: the
    spec's (with its registry credentials), else the settings' image."""
    d = offer.details
    port = settings.agent_port
    gpu_class = d.get("gpu_class_id")
    resources: dict[str, Any] = {
        "cpu": int(d.get("cpu") or settings.cpus),
        "memory": int(d.get("memory_mb") or settings.memory_gb * 1024),
        "gpu_classes": [gpu_class] if gpu_class else [],
        "storage_amount": int(d.get("storage_bytes") or settings.disk_gb * 1024**3),
        "shm_size": settings.shm_size_mb,
    }
    container: dict[str, Any] = {
        "image": image.name if image is not None else settings.image,
        "command": command(),
        "environment_variables": env,
        "resources": resources,
    }
    if gpu_class:  # a priority means something only with a GPU
        container["priority"] = d.get("priority") or "batch"
    if image is not None and image.username and image.password:
        container["registry_authentication"] = {
            "basic": {"username": image.username, "password": image.password}
        }
    elif image is None and settings.registry_username and registry_password:
        container["registry_authentication"] = {
            "basic": {"username": settings.registry_username, "password": registry_password}
        }
    body: dict[str, Any] = {
        "name": group_name(key),
        "autostart_policy": True,
        "restart_policy": settings.restart_policy,
        "replicas": 1,
        "container": container,
        "networking": {
            "protocol": "http",
            "port": port,
            "auth": settings.gateway_auth,
            "load_balancer": "round_robin",
            "single_connection_limit": False,
            "client_request_timeout": 100000,
            "server_response_timeout": 100000,
        },
        # /health answers as soon as the agent serves: up to 10 minutes (20 x 30 s: SaladCloud
        # allows at most 20 failures) to pull and install
        "startup_probe": _probe(
            "/health", port, period=STARTUP_PERIOD_S, timeout=5, failures=STARTUP_FAILURES
        ),
        "liveness_probe": _probe("/health", port, period=30, timeout=10, failures=5),
        "readiness_probe": _probe("/ready", port, period=10, timeout=5, failures=3),
    }
    countries = d.get("country_codes") or settings.country_codes
    if countries:
        body["country_codes"] = list(countries)
    return body
