#!/usr/bin/env bash
# Refresh dev.lock: every package of the dev install (`.[dev]`, which takes in every other extra)
# pinned. pip-tools resolves with pip's own resolver and pip's configured indexes, so the CPU build
# of torch that constraints.txt pins (a local wheel) is the one locked; boto3 and s3fs are resolved
# together (s3fs pins aiobotocore, which pins botocore).
#
# Pins already in dev.lock are kept wherever they still fit, so adding a dependency to
# pyproject.toml and running this script changes only what it must (about a minute).
#   bash scripts/lock.sh                          # keep the pins, add what is new
#   bash scripts/lock.sh --upgrade-package NAME   # move one package to its newest release
#   bash scripts/lock.sh --upgrade                # move everything
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q --root-user-action=ignore 'pip-tools==7.6.2'
CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh" python -m piptools compile --quiet \
  --extra dev --constraint constraints.txt --allow-unsafe --strip-extras \
  --no-emit-index-url --no-emit-find-links --output-file dev.lock "$@" pyproject.toml

# The dev extra names corral itself (corral[examples,...]): pip-tools writes it as a pin to this
# clone's path, which is no pin and a path no other machine has; pip installs corral from `-e .`.
python - <<'PY'
import pathlib
import re

lock = pathlib.Path("dev.lock")
out, skipping = [], False
for line in lock.read_text().splitlines(keepends=True):
    if line.startswith("corral @ "):
        skipping = True
        continue
    if skipping and line.startswith("    "):
        continue
    skipping = False
    out.append(line)
text = "".join(out)
lock.write_text(text)

# The dev install must never pull a CUDA build of torch, torchvision or CUDA's own wheels.
pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M))
bad = [
    f"{name}=={version}"
    for name, version in pins.items()
    if name.lower() in {"torchvision", "triton"}
    or (name.lower().startswith("nvidia-") and name.lower() != "nvidia-ml-py")
    or (name.lower() == "torch" and not version.endswith("+cpu"))
]
if bad:
    raise SystemExit(f"dev.lock would pull CUDA builds or torchvision: {', '.join(bad)}")
print(f"dev.lock: {len(pins)} packages pinned")
PY
