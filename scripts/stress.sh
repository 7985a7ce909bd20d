#!/usr/bin/env bash
# Randomized concurrency stress of the DDL: SESSIONS pgbench clients each run
# STEPS random create/replace/drop steps on a small name space, then the
# invariant query must find no definition reading a missing view, breaking
# group order, or no longer valid. Needs a running cluster (scripts/cluster.sh).
#   scripts/stress.sh [SESSIONS] [STEPS]      default 4 × 50; try 16 × 2000
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
root="$(cd "$here/.." && pwd)"
sessions="${1:-4}"
steps="${2:-50}"
db=mmv_stress
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -v ON_ERROR_STOP=1 -d "$db" -f "$root/stress/setup.sql"
"$PG_BIN/pgbench" -n -c "$sessions" -j 2 -t "$steps" -f "$root/stress/step.pgbench" "$db" | grep -E "transactions actually processed|failed|latency average"
psql -X -v ON_ERROR_STOP=1 -d "$db" -f "$root/stress/check.sql" | tee "$MMV_RUN/stress.out"
violations=$(psql -X -A -t -d "$db" -c "SELECT count(*) FROM micromegas.mm_catalog_violations()")
invalid=$(tail -n 5 "$MMV_RUN/stress.out" | grep -E '^ +[0-9]+$' | tr -d ' ')
if [ "$violations" != 0 ] || [ "$invalid" != 0 ]; then
  echo "stress: invariant violated ($violations violations, $invalid total)"; exit 1
fi
echo "stress: $sessions sessions x $steps steps, invariant holds"
