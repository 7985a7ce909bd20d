#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60) and exits
# non-zero when any target finds a crash, a panic or a timeout. Stable Rust
# is enough: RUSTC_BOOTSTRAP lets cargo-fuzz pass its instrumentation flags.
#   scripts/fuzz.sh 1800              # 30 minutes per target
#   scripts/fuzz.sh 60 schema options # only these targets
# Findings land in fuzz/artifacts/<target>/; copy each into
# fuzz/regressions/<target>/ once fixed, so `cargo test` replays it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
seconds="${1:-60}"
shift || :
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(ddl validate schema schema_ipc options deny)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cd "$here/../fuzz"
export CARGO_TARGET_DIR="$MMV_STATE/fuzz-target" RUSTC_BOOTSTRAP=1
mkdir -p "$MMV_STATE/fuzz-corpus/ddl"
cp ../core/src/log_stats.sql "$MMV_STATE/fuzz-corpus/ddl/log_stats.sql"   # the shipped statement seeds the parser
failed=()
for target in "${targets[@]}"; do
  mkdir -p "$MMV_STATE/fuzz-corpus/$target"
  log="$MMV_STATE/fuzz-$target.log"
  status=0
  cargo fuzz run --sanitizer none -O "$target" "$MMV_STATE/fuzz-corpus/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=65536 -timeout=60 >"$log" 2>&1 || status=$?
  # The run's summary: runs done, and any finding.
  sed -n -E '/^#[0-9]+ +(DONE|INITED)|^Done|ERROR|panicked|SUMMARY|^artifact_prefix|Test unit written/p' "$log"
  if [ "$status" -ne 0 ]; then
    echo "fuzz: target $target FAILED (exit $status); full log in $log"
    failed+=("$target")
  else
    echo "fuzz: target $target passed"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s) passed"
