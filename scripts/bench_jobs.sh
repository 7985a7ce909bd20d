#!/usr/bin/env bash
# Where a job's time goes: pgbench drains the bare SKIP LOCKED loop, the
# shipped mm_claim_jobs + mm_finish_job, and the prototypes of
# bench/jobs/setup.sql (each one layer on the one before), claim and finish
# as two commits, rounds alternating the variants; a release build in a
# throwaway cluster, like ./scripts/bench.sh. Not part of the test suite.
#   scripts/bench_jobs.sh     MMV_JOBS_ROUNDS=3 MMV_JOBS_CLIENTS=8 MMV_JOBS_SECONDS=6
# Prints one markdown table: transactions (jobs) per second per round, and
# each variant over the bare loop of the same round. The last two rows commit
# each claim without waiting for its WAL flush, the bare loop's and ours.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
"$here/setup.sh"
source "$here/env.sh"
cd "$root"
rounds="${MMV_JOBS_ROUNDS:-3}" clients="${MMV_JOBS_CLIENTS:-8}" seconds="${MMV_JOBS_SECONDS:-6}"
# More jobs than the fastest variant drains in the time (about 6,000/s here).
jobs=$(( seconds * 15000 ))
variants=(bare lean_by_hand lean_token_by_hand lean_functions split_functions shipped
          bare_unflushed_claims shipped_unflushed_claims)
cargo pgrx install --profile "${MMV_BENCH_PROFILE:-release}" --pg-config "$PG_CONFIG" $MMV_FEATURES >/dev/null
"$here/cluster.sh" start >/dev/null
trap '"$here/cluster.sh" stop' EXIT
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS mmv_bench_jobs" -c "CREATE DATABASE mmv_bench_jobs"
psql -X -q -v ON_ERROR_STOP=1 -d mmv_bench_jobs -c "$MMV_INSTALL_SQL" -f bench/jobs/setup.sql
declare -A tps
for r in $(seq "$rounds"); do
  for v in "${variants[@]}"; do
    psql -X -q -v ON_ERROR_STOP=1 -d mmv_bench_jobs -v variant="$v" -v jobs="$jobs" -f bench/jobs/reset.sql >/dev/null
    # pgbench exits non-zero when a client aborts (a claim that found no job
    # included): the run stops there rather than print a partial figure.
    out=$(as_postgres "$PG_BIN/pgbench" -h "$PGHOST" -p "$PGPORT" -U postgres -n -M prepared \
            -c "$clients" -j 2 -T "$seconds" -f "bench/jobs/$v.sql" mmv_bench_jobs 2>&1) \
      || { echo "pgbench failed on $v:" >&2; echo "$out" >&2; exit 1; }
    tps[$v,$r]=$(awk '/^tps/ { print $3; exit }' <<<"$out")
  done
done
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, PostgreSQL $("$PG_CONFIG" --version | awk '{print $2}'), $(date -u +%F); pgbench -M prepared, $clients clients, ${seconds} s, $rounds alternating rounds"
echo
header="| variant (bench/jobs/) |"; rule="|---|"
for r in $(seq "$rounds"); do header+=" round $r jobs/s |"; rule+="---:|"; done
echo "$header ÷ bare, median (min – max) |"
echo "$rule---:|"
for v in "${variants[@]}"; do
  line="| $v |"; ratios=()
  for r in $(seq "$rounds"); do
    line+=" $(printf '%.0f' "${tps[$v,$r]}") |"
    ratios+=("$(awk -v a="${tps[$v,$r]}" -v b="${tps[bare,$r]}" 'BEGIN { printf "%.2f", a / b }')")
  done
  # The median (of an even number of rounds, the mean of the two middle ones).
  summary=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 }
    END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          printf "%.2f (%.2f – %.2f)", m, v[1], v[NR] }')
  echo "$line $summary |"
done
