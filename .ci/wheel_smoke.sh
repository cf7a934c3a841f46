#!/usr/bin/env bash
# The packages users install. Builds the abi3 wheel for manylinux2014 (glibc
# 2.17 and newer: RHEL/CentOS 7, Ubuntu 18.04 and every later cluster) with zig
# as the linker, so that maturin's manylinux compliance check passes on it;
# installs it with the torch extra (torch itself taken from the calling
# environment when it has it) into a fresh virtual environment whose PATH
# has no cargo or rustc, and runs `epochplan plan`, .ci/wheel_smoke.py and the
# golden vectors there (and the core on Python 3.10, the abi3 floor, where this
# machine has it). Then builds the sdist and installs it from source, with
# cargo on PATH. Everything goes to a temporary directory, removed at the end.
# Run by .ci/run; alone: bash .ci/wheel_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
policy=manylinux2014
glibc=2_17
arch=$(uname -m)
start=$SECONDS
phase() { printf -- '--- %s (%ss)\n' "$1" "$((SECONDS - start))"; }
# The work directory grows to ~7 GB (torch's environment). It goes to memory
# where /dev/shm has room and allows executables: deleting that much from this
# machine's disk (mounted with discard) takes over a minute.
base=${TMPDIR:-/tmp}
if [ -d /dev/shm ] && [ -w /dev/shm ] \
  && ! awk '$2 == "/dev/shm" && $4 ~ /noexec/ { found = 1 } END { exit !found }' /proc/mounts \
  && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt $((12 * 1024 * 1024)) ]; then
  base=/dev/shm
fi
work=$(mktemp -d "$base/epochplan-wheel.XXXXXX")
trap 'rm -rf "$work"; phase "removed $work"' EXIT

phase "build tools: maturin, ziglang and auditwheel from PyPI"
python3 -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q 'maturin>=1.9.4,<2' 'ziglang~=0.17.1' auditwheel
tools() { PATH="$work/tools/bin:$PATH" "$@"; }

# A target directory of its own: the zig build shares no artefact with target/
# (other linker, explicit --target), so reusing target/ would only keep stale
# files there.
phase "wheel: maturin build --release --zig --compatibility $policy"
tools maturin build --release --zig --compatibility "$policy" \
  --target-dir "$work/target" --out "$work/dist"
wheel=$(echo "$work"/dist/epochplan-*.whl)
name=$(basename "$wheel")
echo "$name"
case "$name" in
  *-cp310-abi3-*manylinux_${glibc}_${arch}.whl) ;;
  *) echo "the wheel is not cp310-abi3 manylinux_${glibc}_${arch}: $name"; exit 1 ;;
esac

phase "auditwheel show"
report=$(tools auditwheel show "$wheel")
printf '%s\n' "$report"
if ! tr -s ' \n' '  ' <<<"$report" | grep -q "consistent with the following platform tag: \"manylinux_${glibc}_${arch}\""; then
  echo "auditwheel does not find the wheel consistent with manylinux_${glibc}_${arch}"
  exit 1
fi

phase "fresh virtual environment: pip install the wheel with the torch extra"
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel" pytest
# torch (~3 GB, which PyPI serves without caching headers, so pip's cache
# never keeps it) comes from the calling environment when it has it: a .pth
# file puts that environment's site-packages after the venv's own, so the
# wheel's epochplan (installed above, first on the path) is the one
# imported, and pip counts torch as installed when it resolves the extra
# (it may warn about that environment's other packages). Without such an
# environment, pip downloads torch.
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
if outer=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null); then
  echo "torch from $outer"
  echo "$outer" >"$site/zz-outer-torch.pth"
fi
"$work/venv/bin/python" -m pip install -q "$wheel[torch]"

# Commands in that environment, from outside the checkout, with no Rust
# toolchain reachable.
no_rust() {
  (cd "$work" && env -u CARGO_HOME -u RUSTUP_HOME -u RUSTUP_TOOLCHAIN -u CARGO_TARGET_DIR \
    -u VIRTUAL_ENV -u PYTHONPATH PATH="$1/bin:/usr/local/bin:/usr/bin:/bin" "${@:2}")
}
for tool in cargo rustc rustup; do
  if no_rust "$work/venv" sh -c "command -v $tool"; then
    echo "$tool is on the PATH of the test environment"
    exit 1
  fi
done
echo "no cargo, rustc or rustup on PATH"

imported=$(no_rust "$work/venv" python -c 'import epochplan; print(epochplan.__file__)')
case "$imported" in
  "$site"/*) echo "epochplan from the wheel: $imported" ;;
  *) echo "epochplan is not imported from the wheel: $imported"; exit 1 ;;
esac

phase "wheel: epochplan plan -n 1e6"
out=$(no_rust "$work/venv" epochplan plan -n 1e6)
printf '%s\n' "$out"
grep -q '^verified in .*every id as planned and once per epoch' <<<"$out" || {
  echo "epochplan plan did not report a verified plan"
  exit 1
}

phase "wheel: .ci/wheel_smoke.py --torch"
no_rust "$work/venv" python "$root/.ci/wheel_smoke.py" --torch

phase "wheel: golden vectors (tests/core/test_golden.py)"
no_rust "$work/venv" python -m pytest -q -p no:cacheprovider -c /dev/null --rootdir "$work" \
  "$root/tests/core/test_golden.py"

py310=
for py in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10.*/bin/python3.10; do
  [ -x "$py" ] && py310=$py
done
if [ -n "$py310" ]; then
  phase "wheel on Python 3.10 (the abi3 floor): .ci/wheel_smoke.py"
  "$py310" -m venv "$work/venv310"
  "$work/venv310/bin/python" -m pip install -q "$wheel"
  no_rust "$work/venv310" python "$root/.ci/wheel_smoke.py"
else
  echo "no Python 3.10 on this machine: the wheel is tested on $(python3 --version) only"
fi

phase "sdist: maturin sdist"
tools maturin sdist --out "$work/sdist"
sdist=$(echo "$work"/sdist/epochplan-*.tar.gz)
echo "$(basename "$sdist")"

phase "sdist: pip install from source (cargo on PATH)"
python3 -m venv "$work/venv-src"
"$work/venv-src/bin/python" -m pip install -q "$sdist"
(cd "$work" && "$work/venv-src/bin/python" "$root/.ci/wheel_smoke.py")

phase "wheel and sdist: ok"
