"""The `CORRAL_*` environment contract and shared values of the controller, the agent and the SDK."""

from __future__ import annotations

#: Exit code of a training process that was preempted and saved what it could: "resume me".
#: (75 is EX_TEMPFAIL in sysexits.h: a temporary failure, the work should be retried.)
EXIT_PREEMPTED = 75
#: Exit code of a node that cannot run the job at all (78 is EX_CONFIG: no usable runtime for
#: corral, the image cannot be pulled, no container engine for it): said once, with its reason,
#: by the node bootstrap or by the agent before the setup; no retry of the same image can help.
EXIT_CANNOT_BOOT = 78

#: Environment variables the agent sets for every stage.
ENV_RUN_ID = "CORRAL_RUN_ID"
ENV_ATTEMPT = "CORRAL_ATTEMPT"
ENV_STAGE = "CORRAL_STAGE"
ENV_CHECKPOINT_DIR = "CORRAL_CHECKPOINT_DIR"
ENV_NUM_GPUS = "CORRAL_NUM_GPUS"
ENV_GRACE_SECONDS = "CORRAL_GRACE_SECONDS"
ENV_HOURLY_PRICE = "CORRAL_HOURLY_PRICE"
#: A stage's rendezvous (corral.agent.launchers): the machines that run it, this node's rank
#: among them (0: the head), the head's address and the port the ranks meet on.
ENV_NUM_NODES = "CORRAL_NUM_NODES"
ENV_NODE_RANK = "CORRAL_NODE_RANK"
ENV_MASTER_ADDR = "CORRAL_MASTER_ADDR"
ENV_MASTER_PORT = "CORRAL_MASTER_PORT"
#: JSON lines the SDK appends progress/metrics/checkpoint records to; the agent tails it.
ENV_PROGRESS_FILE = "CORRAL_PROGRESS_FILE"
#: Cost of earlier attempts in USD, so the SDK's cost meter can continue from it.
ENV_COST_OFFSET = "CORRAL_COST_OFFSET_USD"
ENV_BUDGET_USD = "CORRAL_BUDGET_USD"
#: A service stage: the path it is reached at through the agent's port (``/services/<stage>``,
#: "" when it is served at the root), for a web framework's root path / base URL.
ENV_SERVICE_PREFIX = "CORRAL_SERVICE_PREFIX"
#: The spec's checkpoint retention, the defaults of the SDK's Checkpointer.
ENV_CKPT_KEEP_LAST = "CORRAL_CHECKPOINT_KEEP_LAST"
ENV_CKPT_KEEP_BEST = "CORRAL_CHECKPOINT_KEEP_BEST"
ENV_CKPT_METRIC = "CORRAL_CHECKPOINT_METRIC"
ENV_CKPT_MODE = "CORRAL_CHECKPOINT_MODE"
#: Seconds between two checkpoints the SDK's CheckpointTimer aims for (the spec's
#: ``checkpoints.interval``, or what the interruption rate and ``max_lost_work`` give).
ENV_CKPT_INTERVAL = "CORRAL_CHECKPOINT_INTERVAL_S"
#: The interruptions per machine-hour that interval was worked out from (information).
ENV_INTERRUPTIONS_PER_HOUR = "CORRAL_INTERRUPTIONS_PER_HOUR"
#: JSON list of the spec's ``trackers`` (type, project, tracking_uri, ...); the SDK reads it.
ENV_TRACKERS = "CORRAL_TRACKERS"
#: "1" when the attempt starts from a checkpoint restored at ``checkpoints.path``.
ENV_RESUME = "CORRAL_RESUME"
#: The restored checkpoint's path on the node (with ENV_RESUME).
ENV_RESUME_FROM = "CORRAL_RESUME_FROM"
#: "0" turns off the streaming-store snapshot copy of checkpoints (plain memmove instead).
ENV_FAST_COPY = "CORRAL_FAST_COPY"

ENV_HOME = "CORRAL_HOME"
ENV_DATABASE_URL = "CORRAL_DATABASE_URL"
ENV_FAKE_GPUS = "CORRAL_FAKE_GPUS"
ENV_AGENT_TOKEN = "CORRAL_AGENT_TOKEN"
#: Comma-separated names of the job's secrets (values are in the environment): the agent masks
#: their values in the stage logs it writes and serves.
ENV_SECRET_NAMES = "CORRAL_SECRET_NAMES"
#: Secret values shorter than this are not masked (too many false hits).
MIN_SECRET_LENGTH = 6

DEFAULT_GRACE_SECONDS = 30.0

# --- a container node's boot (``python -m corral.agent.boot``) and corral's install ----------
#: the agent plan, gzip + base64 (a container provider passes it in the container's env)
ENV_PLAN_GZ = "CORRAL_PLAN_GZ"
#: "host:port" the agent binds instead of the plan's (several "containers" on one test host)
ENV_AGENT_BIND = "CORRAL_AGENT_BIND"
#: a directory standing for the node's "/" (``corral agent --root``; test hosts only)
ENV_NODE_ROOT = "CORRAL_NODE_ROOT"
#: the command the agent runs when its controller is gone (powers the machine off)
ENV_SHUTDOWN_COMMAND = "CORRAL_SHUTDOWN_COMMAND"
#: what the node bootstrap installs corral from; the agent drops them from its environment
NODE_INSTALL_VARS = (
    "CORRAL_VERSION",
    "CORRAL_WHEEL_URL",
    "CORRAL_WHEEL_SHA256",
    "CORRAL_WHEEL_NAME",
    "CORRAL_NODE_INDEX_URL",
    "CORRAL_INSTALL",
    "CORRAL_RUNTIME_URL",
    "CORRAL_RUNTIME_SHA256",
    "CORRAL_RUNTIME_ARCH",
)
