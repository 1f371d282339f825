#!/usr/bin/env bash
# Install what the tests need and run the whole suite. .ci/run calls this same script.
set -euo pipefail
cd "$(dirname "$0")/.."

# dev.lock pins every package of the dev install (scripts/lock.sh refreshes it)
python -m pip install -q -c dev.lock -e '.[dev]'

# Local services the store and queue tests talk to (real servers on loopback, never mocks).
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
fi

# Debian's chromium for the dashboard's browser test (Playwright drives it; Playwright's own
# browser download is never used). Quiet; without it that one test is skipped, saying why.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  { apt-get install -y -q chromium chromium-driver ||
    { apt-get update -q && apt-get install -y -q chromium chromium-driver; }; } >/dev/null 2>&1 ||
    echo "chromium could not be installed: the dashboard's browser test will be skipped" >&2
fi
# Debian's prometheus for the Grafana dashboard's test (tests/server/test_grafana_dashboard.py
# runs its own process on loopback; the package's service is never used). Quiet; without it
# that test is skipped, saying why.
if ! command -v prometheus >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  { apt-get install -y -q --no-install-recommends prometheus ||
    { apt-get update -q && apt-get install -y -q --no-install-recommends prometheus; }; } \
    >/dev/null 2>&1 ||
    echo "prometheus could not be installed: the Grafana dashboard's test will be skipped" >&2
fi

# Debian's podman (daemonless) and runc for the `image:` tests (tests/support/podman.py: a
# test image imported from this machine's own files, its storage under /var/tmp). Quiet;
# without them those tests are skipped, saying why.
if ! { command -v podman && command -v runc; } >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  { apt-get install -y -q podman runc ||
    { apt-get update -q && apt-get install -y -q podman runc; }; } >/dev/null 2>&1 ||
    echo "podman could not be installed: the image: tests will be skipped" >&2
fi

# arm64: Debian's qemu-user-static, and an aarch64 CPython with the aarch64 wheels of corral's
# compiled dependencies (scripts/aarch64_python.sh: ~50 MB from Debian's packages and PyPI,
# kept in ~/.cache/corral/aarch64) for tests/providers/test_node_runtime_arm64.py. Quiet;
# without them those tests are skipped, saying why.
if [ "$(uname -m)" = x86_64 ] && command -v apt-get >/dev/null 2>&1; then
  if ! command -v qemu-aarch64-static >/dev/null 2>&1; then
    { apt-get install -y -q qemu-user-static ||
      { apt-get update -q && apt-get install -y -q qemu-user-static; }; } >/dev/null 2>&1 ||
      echo "qemu-user-static could not be installed: the arm64 runtime's qemu test will be skipped" >&2
  fi
  bash scripts/aarch64_python.sh >/dev/null 2>&1 ||
    echo "no aarch64 CPython could be made: the arm64 runtime's tests will be skipped" >&2
fi

# Ultralytics' real `yolo train` for its tests: an environment of its own (torch 2.14.1 and
# the torchvision built for it, ~6 GB from pip's local files, ~3.5 min the first time on a
# machine, then kept in ~/.cache; scripts/ultralytics_venv.sh says why). With under 20 GB
# free it is not made, and those tests are skipped, saying why.
if [ -z "${CORRAL_TEST_ULTRALYTICS_PYTHON:-}" ]; then
  free_gb=$(df -Pk "$HOME" | awk 'NR==2 {print int($4 / 1048576)}')
  if [ "$free_gb" -ge 20 ]; then
    bash scripts/ultralytics_venv.sh >/dev/null 2>&1 ||
      echo "the ultralytics environment could not be made: its tests will be skipped" >&2
  else
    echo "${free_gb} GB free: no ultralytics environment, its tests will be skipped" >&2
  fi
fi

# corral's modules byte-compiled once: the suite starts hundreds of corral processes, and with
# PYTHONDONTWRITEBYTECODE set (as on some CI machines) each would compile them again
python -m compileall -q src

ruff check src tests benchmarks examples
# dead code in src/ fails the run (scripts/dead_code_whitelist.py: what stays, and why); modules
# over 500 lines are only listed
python scripts/dead_code.py
python scripts/module_sizes.py
# the layering of docs/architecture.md ([tool.importlinter] in pyproject.toml, and the
# contracts over the providers' folders, built from the folders) and the types of all of
# src/corral ([tool.mypy])
python scripts/lint_imports.py
mypy

# -p no:cacheprovider keeps the clone clean; exit code 5 (no tests collected) fails the run.
# --durations names the 30 slowest tests at the end: where the suite's time goes.
# Three workers on two cores: with two, half the CPU sat idle (the e2e tests wait on real
# timers and processes: 3,337 test-seconds in 29:24 on an idle 2-core machine, 1.9 at once);
# worksteal hands a finished worker the queued tests of a busy one, so one long e2e test at
# the end does not hold the run.
set +e
python -m pytest -p no:cacheprovider -n 3 --dist worksteal --durations=30 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
