#!/bin/bash
# corral node bootstrap: make sure corral $CORRAL_VERSION runs on this machine, then run
# `python ARGS...` with the python that has it (default: `python -m corral.agent.boot`).
#
# 1. a python (CORRAL_PYTHON, else python3, else python) that already imports that version of
#    corral is used as it is (an image built with corral, say);
# 2. else a venv under $CORRAL_NODE_HOME (default /opt/corral) that has it, from an earlier boot;
# 3. else that venv is made (--system-site-packages: the image's torch & co stay usable) and
#    corral is installed into it: the controller's own wheel from CORRAL_WHEEL_URL (https:// or
#    file://, checked against CORRAL_WHEEL_SHA256), or with CORRAL_INSTALL (a pip requirement:
#    an advanced override), or corral==$CORRAL_VERSION from an index (CORRAL_NODE_INDEX_URL,
#    default PyPI). A version other than $CORRAL_VERSION is never run. CORRAL_PIP_ARGS adds
#    pip options (--no-index --find-links DIR on a machine without an index, say).
# It prints what it does on stderr and never prints a URL (a presigned one is a credential).
# A python older than 3.11 is said once ("python3 3.10 is older than 3.11") and ends it with
# exit status 78 (EX_CONFIG): the image cannot run corral, and no retry on it can.
set -euo pipefail

say() { echo "corral bootstrap: $*" >&2; }
WANT="${CORRAL_VERSION:-}"
NODE_HOME="${CORRAL_NODE_HOME:-/opt/corral}"
PY="${CORRAL_PYTHON:-$(command -v python3 || command -v python || true)}"
if [ -z "$PY" ]; then
  say "no python on this machine (python3.11 or later is needed)"
  exit 127
fi
PYV="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
if ! [[ "$PYV" =~ ^([0-9]+)\.([0-9]+)$ ]]; then
  say "$(basename "$PY") does not run on this machine (python 3.11 or later is needed)"
  exit 78
elif ((BASH_REMATCH[1] < 3 || (BASH_REMATCH[1] == 3 && BASH_REMATCH[2] < 11))); then
  say "$(basename "$PY") $PYV is older than 3.11: corral needs python 3.11 or later (use an image that has it)"
  exit 78
fi

has_corral() {
  "$1" - "$WANT" <<'EOF' 2>/dev/null
import sys
try:
    import corral
except Exception:
    sys.exit(1)
want = sys.argv[1]
sys.exit(0 if sys.version_info >= (3, 11) and (not want or corral.__version__ == want) else 1)
EOF
}

if ! has_corral "$PY"; then
  VENV="$NODE_HOME/venv"
  if [ -x "$VENV/bin/python" ] && has_corral "$VENV/bin/python"; then
    PY="$VENV/bin/python"
  else
    say "installing corral ${WANT:-(any version)} into $VENV"
    mkdir -p "$NODE_HOME"
    if [ ! -x "$VENV/bin/python" ]; then
      "$PY" -m venv --system-site-packages "$VENV" || {
        say "python cannot make a venv: trying to install python3-venv"
        (apt-get update -q && apt-get install -y -q python3-venv) >&2
        "$PY" -m venv --system-site-packages "$VENV"
      }
    fi
    VPY="$VENV/bin/python"
    # shellcheck disable=SC2206  # options, split on purpose
    PIP=("$VPY" -m pip install --quiet --disable-pip-version-check ${CORRAL_PIP_ARGS:-})
    if [ -n "${CORRAL_WHEEL_URL:-}" ]; then
      WHEEL="$NODE_HOME/wheels/${CORRAL_WHEEL_NAME:-corral-${WANT}-py3-none-any.whl}"
      mkdir -p "$(dirname "$WHEEL")"
      "$VPY" - "$WHEEL" "${CORRAL_WHEEL_SHA256:-}" <<'EOF'
import hashlib, os, shutil, sys, urllib.request
dest, want = sys.argv[1], sys.argv[2]
tmp = dest + ".part"
with urllib.request.urlopen(os.environ["CORRAL_WHEEL_URL"], timeout=120) as src, open(tmp, "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
got = hashlib.sha256(open(tmp, "rb").read()).hexdigest()
if want and got != want:
    os.unlink(tmp)
    sys.exit(f"corral bootstrap: the wheel has sha256 {got}, not {want}")
os.replace(tmp, dest)
EOF
      "${PIP[@]}" "${WHEEL}[${CORRAL_EXTRAS:-aws}]"
    elif [ -n "${CORRAL_INSTALL:-}" ]; then
      # shellcheck disable=SC2086  # a requirement list, split on purpose
      "${PIP[@]}" ${CORRAL_INSTALL}
    else
      INDEX=()
      if [ -n "${CORRAL_NODE_INDEX_URL:-}" ]; then INDEX=(--index-url "$CORRAL_NODE_INDEX_URL"); fi
      "${PIP[@]}" "${INDEX[@]}" "corral[${CORRAL_EXTRAS:-aws}]==${WANT:?CORRAL_VERSION is not set}"
    fi
    if ! has_corral "$VPY"; then
      say "the corral installed is not version ${WANT}: refusing to run another version"
      exit 1
    fi
    PY="$VPY"
  fi
fi

if [ "$#" -eq 0 ]; then
  set -- -m corral.agent.boot
fi
exec "$PY" "$@"
