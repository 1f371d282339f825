#!/usr/bin/env bash
# Install what the tests need and run the whole suite. .ci/run calls this same script.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q -c constraints.txt -e '.[dev]'

# Local services the store and queue tests talk to (real servers on loopback, never mocks).
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
fi

ruff check src tests benchmarks examples
# the layering of docs/architecture.md ([tool.importlinter] in pyproject.toml) and the types
# of the packages [tool.mypy] names
lint-imports --no-cache
mypy

# -p no:cacheprovider keeps the clone clean; exit code 5 (no tests collected) fails the run.
set +e
python -m pytest -p no:cacheprovider -n 2 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
