#!/usr/bin/env bash
# Runs both cargo-fuzz targets for SECONDS each (default 60). Stable Rust is
# enough: RUSTC_BOOTSTRAP lets cargo-fuzz pass its instrumentation flags.
#   scripts/fuzz.sh 900        # 15 minutes per target
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
seconds="${1:-60}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cd "$here/../fuzz"
export CARGO_TARGET_DIR="$MMV_STATE/fuzz-target" RUSTC_BOOTSTRAP=1
mkdir -p "$MMV_STATE/fuzz-corpus/ddl"
cp ../core/src/log_stats.sql "$MMV_STATE/fuzz-corpus/ddl/log_stats.sql"   # the shipped statement seeds the parser
for target in ddl validate; do
  mkdir -p "$MMV_STATE/fuzz-corpus/$target"
  cargo fuzz run --sanitizer none -O "$target" "$MMV_STATE/fuzz-corpus/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=65536 2>&1 | grep -E "^#[0-9]+ +(DONE|INITED)|Done|ERROR|panicked|SUMMARY" || true
done
