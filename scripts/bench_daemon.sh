#!/usr/bin/env bash
# Benchmark of the maintenance daemon (not part of the tests): materializing
# a day of sample data (log_stats, measures_hourly, blocks_per_process of
# scripts/lake/views.sql), release build, against a baseline in the same
# run — DataFusion running the same extract queries over the same files and
# writing the same Parquet by hand in one process (lakehouse/examples/
# by_hand.rs: no freshness count, no schema proof, no catalog). Alternating
# rounds (MMV_BENCH_ROUNDS, 3); prints each round, the median ratio and its
# spread, rows per second and the daemon's peak resident memory.
#   MMV_BENCH_PROCESSES (10) and MMV_BENCH_RATE (20) size the sample.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
"$here/setup.sh" >/dev/null
source "$here/env.sh"
cd "$root"
# MMV_BENCH_BUILD=0 reuses the release binaries already built.
if [ "${MMV_BENCH_BUILD:-1}" = 1 ]; then
  cargo build --release -q -p micromegas_views_daemon
  cargo build --release -q -p micromegas_views_lakehouse --example by_hand
fi
"$here/cluster.sh" install >/dev/null
"$here/cluster.sh" start >/dev/null
trap '"$here/cluster.sh" stop >/dev/null' EXIT
db=mmv_bench_daemon
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -d "$db" -c "$MMV_INSTALL_SQL"
psql -X -q -v ON_ERROR_STOP=1 -d "$db" -f "$root/scripts/lake/views.sql" >/dev/null
dsn="host=$PGHOST port=$PGPORT user=postgres dbname=$db"
lake="$MMV_RUN/bench-lake"
rm -rf "$lake"
release="$CARGO_TARGET_DIR/release"
"$release/micromegas-views-daemon" sample --lake "file://$lake" --begin 2026-12-01T00:00:00Z --end 2026-12-02T00:00:00Z \
  --processes "${MMV_BENCH_PROCESSES:-10}" --rate "${MMV_BENCH_RATE:-20}" --seed 5
python3 - "$release" "$lake" "$dsn" "${MMV_BENCH_ROUNDS:-3}" <<'PY'
import os, statistics, subprocess, sys, time, shutil
release, lake, dsn, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
begin, end = "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z"
views = ["log_stats", "measures_hourly", "blocks_per_process"]

def run(cmd):
    t = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = b"", b""
    _, status, usage = os.wait4(p.pid, 0)
    out, err = p.stdout.read(), p.stderr.read()
    if status != 0:
        sys.exit(f"{cmd[0]} failed: {err.decode()[-400:]}")
    return time.monotonic() - t, usage.ru_maxrss * 1024, out.decode(), err.decode()

daemon = [f"{release}/micromegas-views-daemon", "materialize", "--regenerate", "--lake", f"file://{lake}",
          "--dsn", dsn, "--begin", begin, "--end", end] + sum((["--view", v] for v in views), [])
results = []
for r in range(rounds):
    out = f"{lake}-by-hand"
    shutil.rmtree(out, ignore_errors=True)
    hand_s, hand_rss, hand_out, _ = run([f"{release}/examples/by_hand", lake, out, dsn, begin, end] + views)
    daemon_s, daemon_rss, _, log = run(daemon)
    rows = sum(int(x.split("=")[1]) for x in log.split() if x.startswith("rows="))
    results.append((daemon_s, hand_s, daemon_rss, hand_rss, rows, int(hand_out.strip())))
    print(f"round {r + 1}: daemon {daemon_s:.2f} s, by hand {hand_s:.2f} s, ratio {daemon_s / hand_s:.3f}x; "
          f"rows written {rows} (by hand {int(hand_out.strip())}); peak RSS daemon {daemon_rss / 2**20:.0f} MiB, by hand {hand_rss / 2**20:.0f} MiB")
ratios = [d / h for d, h, *_ in results]
source_rows = int(subprocess.check_output([f"{release}/micromegas-views-daemon", "query", "--lake", f"file://{lake}",
    "--dsn", dsn, "SELECT (SELECT count(*) FROM log_entries) + (SELECT count(*) FROM measures) + (SELECT count(*) FROM blocks) AS n"]).decode().split()[-1])
median_daemon = statistics.median(d for d, *_ in results)
print(f"materializing a day (3 views, {source_rows} source rows): daemon / by hand median {statistics.median(ratios):.3f}x "
      f"(spread {min(ratios):.3f}x - {max(ratios):.3f}x over {rounds} alternating rounds; target <= 1.15x); "
      f"{source_rows / median_daemon:,.0f} source rows/s; daemon peak RSS {max(r[2] for r in results) / 2**20:.0f} MiB")
PY
