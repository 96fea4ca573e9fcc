#!/usr/bin/env bash
# Build the two SGLang oracle venvs that the differential tests need, only when missing or stale.
#
#   .ci/setup_oracle.sh [--force]
#
# The venvs hold sglang (0.5.23 / 0.5.15) + CPU torch, about 1.4 GB each, so they live in a
# cache directory outside the repo, not in the repo:
#   ${KVPLAN_ORACLE_CACHE:-$HOME/.cache/kvplan-oracle}/venv      sglang 0.5.23
#   ${KVPLAN_ORACLE_CACHE:-$HOME/.cache/kvplan-oracle}/venv015   sglang 0.5.15
# They are built with the oracle's own setup scripts (${KVPLAN_ORACLE_DIR:-../shared/oracle},
# which may be read-only).  Each venv gets a stamp naming the sglang version, the Python
# version and a hash of its setup script; a venv whose stamp matches is reused as is, so a CI
# cache of that directory makes this script a no-op (a second or two).  Both builds run in
# parallel (about 1 minute together on 2 cores); a failed build leaves no stamp and prints
# the tail of its log.  A lock serialises concurrent callers.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ORACLE_DIR="${KVPLAN_ORACLE_DIR:-$ROOT/../shared/oracle}"
CACHE="${KVPLAN_ORACLE_CACHE:-$HOME/.cache/kvplan-oracle}"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

if [[ ! -d "$ORACLE_DIR" ]]; then
    echo "setup_oracle: oracle folder $ORACLE_DIR not found (set KVPLAN_ORACLE_DIR)" >&2
    exit 1
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.setup.lock"
flock 9

# name  sglang-version  setup-script
VENVS=(
    "venv 0.5.23 setup_venv.sh"
    "venv015 0.5.15 setup_venv015.sh"
)

stamp_for() {  # the stamp a venv built by $2 for sglang $1 should carry
    local version=$1 script=$2
    echo "sglang==$version $(python3 -V 2>&1 | tr ' ' '=') setup-sha256=$(sha256sum "$ORACLE_DIR/$script" | cut -c1-16)"
}

build_one() {  # build one venv in place; writes its stamp only when the venv works
    local name=$1 version=$2 script=$3
    local venv="$CACHE/$name" log="$CACHE/$name.build.log"
    local t0=$SECONDS
    rm -rf "$venv"
    if ! bash "$ORACLE_DIR/$script" "$venv" >"$log" 2>&1; then
        echo "setup_oracle: building $name (sglang $version) failed; last lines of $log:" >&2
        tail -n 40 "$log" >&2
        return 1
    fi
    # smoke test: the installed version, then one tiny generated workload through the driver
    # (importing sglang itself needs the oracle's import-time stubs, so ask the metadata)
    if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; v = m.version('sglang'); \
sys.exit(0 if v == '$version' else f'sglang {v} installed, $version wanted')" 2>>"$log"; then
        echo "setup_oracle: $name has the wrong sglang; see $log" >&2
        return 1
    fi
    local driver=drive_swa_radix.py
    [[ "$name" == venv015 ]] && driver=drive_swa_radix_legacy.py
    if ! (cd "$CACHE" && "$venv/bin/python" "$ORACLE_DIR/$driver" --conversations 2 --turns 2 \
            --page-size 16 >/dev/null 2>>"$log"); then
        echo "setup_oracle: $name smoke run failed; last lines of $log:" >&2
        tail -n 40 "$log" >&2
        return 1
    fi
    stamp_for "$version" "$script" >"$venv/.kvplan-oracle-stamp"
    echo "setup_oracle: built $name (sglang $version) in $((SECONDS - t0)) s"
}

pids=()
names=()
for entry in "${VENVS[@]}"; do
    read -r name version script <<<"$entry"
    venv="$CACHE/$name"
    want="$(stamp_for "$version" "$script")"
    if [[ $FORCE == 0 && -x "$venv/bin/python" && -f "$venv/.kvplan-oracle-stamp" ]] \
        && [[ "$(cat "$venv/.kvplan-oracle-stamp")" == "$want" ]]; then
        echo "setup_oracle: $name (sglang $version) up to date in $venv"
        continue
    fi
    echo "setup_oracle: building $name (sglang $version) in $venv ..."
    build_one "$name" "$version" "$script" &
    pids+=($!)
    names+=("$name")
done

status=0
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
        echo "setup_oracle: ${names[$i]} failed" >&2
        status=1
    fi
done
exit $status
