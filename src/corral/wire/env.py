"""The `CORRAL_*` environment contract and shared values of the controller, the agent and the SDK."""

from __future__ import annotations

#: Exit code of a training process that was preempted and saved what it could: "resume me".
#: (75 is EX_TEMPFAIL in sysexits.h: a temporary failure, the work should be retried.)
EXIT_PREEMPTED = 75

#: Environment variables the agent sets for every stage.
ENV_RUN_ID = "CORRAL_RUN_ID"
ENV_ATTEMPT = "CORRAL_ATTEMPT"
ENV_STAGE = "CORRAL_STAGE"
ENV_CHECKPOINT_DIR = "CORRAL_CHECKPOINT_DIR"
ENV_NUM_GPUS = "CORRAL_NUM_GPUS"
ENV_GRACE_SECONDS = "CORRAL_GRACE_SECONDS"
ENV_HOURLY_PRICE = "CORRAL_HOURLY_PRICE"
#: JSON lines the SDK appends progress/metrics/checkpoint records to; the agent tails it.
ENV_PROGRESS_FILE = "CORRAL_PROGRESS_FILE"
#: Cost of earlier attempts in USD, so the SDK's cost meter can continue from it.
ENV_COST_OFFSET = "CORRAL_COST_OFFSET_USD"
ENV_BUDGET_USD = "CORRAL_BUDGET_USD"
#: The spec's checkpoint retention, the defaults of the SDK's Checkpointer.
ENV_CKPT_KEEP_LAST = "CORRAL_CHECKPOINT_KEEP_LAST"
ENV_CKPT_KEEP_BEST = "CORRAL_CHECKPOINT_KEEP_BEST"
ENV_CKPT_METRIC = "CORRAL_CHECKPOINT_METRIC"
ENV_CKPT_MODE = "CORRAL_CHECKPOINT_MODE"
#: JSON list of the spec's ``trackers`` (type, project, tracking_uri, ...); the SDK reads it.
ENV_TRACKERS = "CORRAL_TRACKERS"
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
