#!/bin/bash
# corral node bootstrap: make sure corral $CORRAL_VERSION runs on this machine, then run
# `python ARGS...` with the python that has it (default: `python -m corral.agent.boot`).
#
# 1. a python 3.11+ (CORRAL_PYTHON, else python3, else python) that already imports that
#    version of corral is used as it is (an image built with corral, say);
# 2. else corral's own runtime (an interpreter and every package the agent needs, packed by the
#    controller: providers/common/runtime.py) unpacked under $CORRAL_NODE_HOME (default
#    /opt/corral) by an earlier boot, or fetched now from CORRAL_RUNTIME_URL (https:// with
#    curl, wget or any python; none of them: curl from the image's package manager, apt-get,
#    dnf, microdnf, yum or apk; or file://), checked against CORRAL_RUNTIME_SHA256 and unpacked
#    there (CORRAL_RUNTIME_URL_<ARCH> and CORRAL_RUNTIME_SHA256_<ARCH> for this machine's
#    `uname -m`, AARCH64 say, when the controller packed one for it). The image's python (if
#    any) and its packages are left as they are: the agent runs
#    on the runtime, the job's stages on the image's python, with corral's SDK appended to
#    their PYTHONPATH;
# 3. else (no runtime shipped, or one for another arch) a venv under $CORRAL_NODE_HOME
#    (--system-site-packages: the image's torch & co stay usable) made with the image's
#    python 3.11+ gets corral: the controller's own wheel from CORRAL_WHEEL_URL (https:// or
#    file://, checked against CORRAL_WHEEL_SHA256), or CORRAL_INSTALL (a pip requirement: an
#    advanced override), or corral==$CORRAL_VERSION from an index (CORRAL_NODE_INDEX_URL,
#    default PyPI). A version other than $CORRAL_VERSION is never run. CORRAL_PIP_ARGS adds
#    pip options (--no-index --find-links DIR on a machine without an index, say).
# It prints what it does on stderr and never prints a URL (a presigned one is a credential).
# A machine that cannot run corral (no runtime shipped and no python 3.11+, a runtime it
# cannot fetch) is said once, in one line, and ends it with exit status 78 (EX_CONFIG): no
# retry on this image can help.
set -euo pipefail

say() { echo "corral bootstrap: $*" >&2; }
# a machine that cannot run corral: the reason once, then a marker the controller looks for
# (control/machine_log.py), and exit 78
unbootable() {
  say "$*"
  echo "corral: this machine cannot boot corral (exit 78)" >&2
  exit 78
}
WANT="${CORRAL_VERSION:-}"
NODE_HOME="${CORRAL_NODE_HOME:-/opt/corral}"
PY="${CORRAL_PYTHON:-$(command -v python3 || command -v python || true)}"
PYV=""
if [ -n "$PY" ]; then
  PYV="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
fi
PY_OK=""
if [[ "$PYV" =~ ^([0-9]+)\.([0-9]+)$ ]] &&
  ((BASH_REMATCH[1] > 3 || (BASH_REMATCH[1] == 3 && BASH_REMATCH[2] >= 11))); then
  PY_OK=1
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

run_on_runtime() {  # the agent on corral's runtime; the stages get the image's PATH
  say "corral ${WANT} runs on its own runtime ($1)"
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$1/sdk"
  if [ "$#" -gt 1 ]; then
    local rt="$1"
    shift
    exec "$rt/python/bin/python3" -E -s "$@"
  fi
  exec "$1/python/bin/python3" -E -s -m corral.agent.boot
}

runtime_ready() {
  [ -x "$1/python/bin/python3" ] && [ -f "$1/RUNTIME.json" ] &&
    grep -q "\"corral\": \"${WANT}\"" "$1/RUNTIME.json"
}

# an image with neither curl, wget nor python (nvidia/cuda base images): curl from the image's
# own package manager; 0 once curl is there, else 1 with NO_FETCH saying why
NO_FETCH=""
install_curl() {
  local pm rc
  for pm in apt-get dnf microdnf yum apk; do
    command -v "$pm" >/dev/null || continue
    say "this machine has no curl, wget or python: installing curl with $pm"
    rc=0
    case "$pm" in
      apt-get)
        { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            curl ca-certificates; } >&2 || rc=$?
        ;;
      apk) apk add --no-cache curl ca-certificates >&2 || rc=$? ;;
      *) "$pm" install -y curl >&2 || rc=$? ;;
    esac
    if [ "$rc" = 0 ] && command -v curl >/dev/null; then
      return 0
    fi
    NO_FETCH="this machine has no curl, wget or python, and '$pm install curl' failed (exit $rc)"
    return 1
  done
  NO_FETCH="this machine has no curl, wget or python, and no package manager (apt-get, dnf, microdnf, yum, apk) to install curl with"
  return 1
}

fetch() {  # fetch URL DEST: the URL from the environment variable named $1, never printed
  local url="${!1}" dest="$2"
  case "$url" in
    file://*) cp "${url#file://}" "$dest" ;;
    *)
      if ! command -v curl >/dev/null && ! command -v wget >/dev/null && [ -z "$PY" ]; then
        install_curl || return 2
      fi
      # the URL on stdin, never on a command line (a presigned URL is a credential)
      if command -v curl >/dev/null; then
        printf 'url = "%s"\n' "$url" | curl -fsS --retry 3 -o "$dest" -K -
      elif command -v wget >/dev/null; then
        printf '%s\n' "$url" | wget -q -O "$dest" -i -
      elif [ -n "$PY" ]; then
        "$PY" -c 'import os, shutil, sys, urllib.request as u
with u.urlopen(os.environ[sys.argv[1]], timeout=300) as s, open(sys.argv[2], "wb") as o:
    shutil.copyfileobj(s, o, 1 << 20)' "$1" "$dest"
      else
        return 2
      fi
      ;;
  esac
}

sha256_of() {
  if command -v sha256sum >/dev/null; then
    sha256sum "$1" | cut -d' ' -f1
  elif [ -n "$PY" ]; then
    "$PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1"
  fi
}

# the runtime of this machine's arch: CORRAL_RUNTIME_URL_<ARCH> (AARCH64, X86_64) when the
# controller packed one for it, else CORRAL_RUNTIME_URL when it is of this arch
ARCH="$(uname -m 2>/dev/null || true)"
ARCH_URL="CORRAL_RUNTIME_URL_${ARCH^^}"
ARCH_SHA="CORRAL_RUNTIME_SHA256_${ARCH^^}"
if [[ "$ARCH" =~ ^[a-z0-9_]+$ ]] && [ -n "${!ARCH_URL:-}" ]; then
  export CORRAL_RUNTIME_URL="${!ARCH_URL}" CORRAL_RUNTIME_SHA256="${!ARCH_SHA:-}"
  export CORRAL_RUNTIME_ARCH="$ARCH"
fi
if [ -n "$PY_OK" ] && has_corral "$PY"; then
  :
elif [ -n "${CORRAL_RUNTIME_URL:-}" ] && [ "${CORRAL_RUNTIME_ARCH:-}" = "$ARCH" ]; then
  WANT_SHA="${CORRAL_RUNTIME_SHA256:?CORRAL_RUNTIME_SHA256 is not set}"
  RT="$NODE_HOME/runtimes/${WANT_SHA:0:16}"
  if ! runtime_ready "$RT/corral-runtime"; then
    say "fetching corral ${WANT}'s runtime into $RT"
    mkdir -p "$NODE_HOME/runtimes"
    PART="$RT.part"
    rm -rf "$PART"
    mkdir -p "$PART"
    rc=0
    fetch CORRAL_RUNTIME_URL "$PART/runtime.tar.gz" || rc=$?
    if [ "$rc" = 2 ]; then
      rm -rf "$PART"
      unbootable "cannot fetch corral's runtime: ${NO_FETCH:-this machine has no curl, wget or python}"
    elif [ "$rc" != 0 ]; then
      say "corral's runtime could not be fetched (exit $rc)"
      rm -rf "$PART"
      exit 1
    fi
    GOT="$(sha256_of "$PART/runtime.tar.gz")"
    if [ "$GOT" != "$WANT_SHA" ]; then
      say "corral's runtime has sha256 ${GOT:-(unknown)}, not ${WANT_SHA}"
      rm -rf "$PART"
      exit 1
    fi
    tar -xzf "$PART/runtime.tar.gz" -C "$PART" || {
      rm -rf "$PART"
      unbootable "corral's runtime could not be unpacked into $RT (disk full?)"
    }
    rm -f "$PART/runtime.tar.gz"
    rm -rf "$RT"
    mv "$PART" "$RT"
  fi
  run_on_runtime "$RT/corral-runtime" "$@"
elif [ -z "$PY" ]; then
  unbootable "no python on this machine and no corral runtime shipped (give the run object storage, or use an image with python 3.11 or later)"
elif [ -z "$PY_OK" ]; then
  unbootable "$(basename "$PY") ${PYV:-(does not run)} is older than 3.11 and no corral runtime was shipped (give the run object storage, or use an image with python 3.11 or later)"
else
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
