#!/usr/bin/env bash
# The benchmark: a release build of the extension in a throwaway cluster,
# every figure beside a native PostgreSQL baseline from the same run.
#   scripts/bench.sh            (MMV_BENCH_ROUNDS=100 by default; MMV_BENCH_ONLY=create|first|
#                                deny|jobs|partitions runs only those rows; MMV_BENCH_PROFILE
#                                picks another cargo profile than release)
# Not part of the test suite. Prints one markdown table, then the FlightSQL
# service's ratios and load run (scripts/bench_flight.sh; MMV_BENCH_ONLY=flight
# runs only that).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
[ "${MMV_BENCH_ONLY:-}" = flight ] && exec "$here/bench_flight.sh"
"$here/setup.sh"
source "$here/env.sh"
cd "$root"
start=$(date +%s)
profile="${MMV_BENCH_PROFILE:-release}"
cargo pgrx install --profile "$profile" --pg-config "$PG_CONFIG" $MMV_FEATURES >/dev/null
build_seconds=$(( $(date +%s) - start ))
so="$("$PG_CONFIG" --pkglibdir)/micromegas_views.so"
so_mib=$(awk "BEGIN { printf \"%.1f\", $(stat -c %s "$so") / 1048576 }")
cargo build --release -q -p micromegas_views_bench
"$here/cluster.sh" start >/dev/null
trap '"$here/cluster.sh" stop' EXIT
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS mmv_bench" -c "CREATE DATABASE mmv_bench"
psql -X -q -d mmv_bench -c "$MMV_INSTALL_SQL"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -r), PostgreSQL $("$PG_CONFIG" --version | awk '{print $2}'), $(date -u +%F)"
echo
MMV_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=mmv_bench" "$CARGO_TARGET_DIR/release/micromegas-views-bench"
echo "| $profile .so size | $so_mib MiB | | | |"
echo "| $profile build of the extension (this run; from scratch only on an empty target dir) | $build_seconds s | | | |"
"$here/cluster.sh" stop
trap - EXIT
if [ -z "${MMV_BENCH_ONLY:-}" ]; then
  echo
  "$here/bench_flight.sh"
fi
