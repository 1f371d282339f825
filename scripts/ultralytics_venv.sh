#!/usr/bin/env bash
# A virtual environment with Ultralytics for the tests that run the real `yolo train`
# (tests/agent/test_real_tool_progress.py, tests/providers/test_real_tools_e2e.py), which are
# skipped without one. Ultralytics needs torchvision, and PyPI's torchvision for Linux is built
# against the CUDA torch of the same release: it does not load beside the CPU torch 2.13 of the
# dev install (torchvision::nms is missing). So it gets an environment of its own with the
# matching pair, torch 2.14.1 and torchvision 0.29.1 (about 6 GB; they run on the CPU here).
#
#   bash scripts/ultralytics_venv.sh [DIR]     # default ~/.cache/corral-ultralytics-venv
#   export CORRAL_TEST_ULTRALYTICS_PYTHON=DIR/bin/python
set -euo pipefail
dir="${1:-$HOME/.cache/corral-ultralytics-venv}"
if ! "$dir/bin/python" -c "import ultralytics, torchvision" >/dev/null 2>&1; then
  python3 -m venv "$dir"
  "$dir/bin/python" -m pip install -q 'torch==2.14.1' 'torchvision==0.29.1' 'ultralytics==8.4.190'
fi
echo "$dir/bin/python"
