#!/usr/bin/env bash
# The client crate's example worker against a real cluster: a view created
# with with_no_data => false gets its refresh job done by the example (which
# "materializes" by sleeping), and a job asking to fail ends failed after its
# attempts. Needs a running cluster and a database with the extension
# (MMV_TEST_DSN's, or $1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
db="${1:-mmv_client}"
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" -c "$1"; }
cd "$here/.."
cargo build -q -p micromegas_views_client --example job_worker
q "DELETE FROM micromegas.jobs" >/dev/null
MMV_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=$db" \
  "$CARGO_TARGET_DIR/debug/examples/job_worker" example-worker >"$MMV_RUN/job_worker.log" 2>&1 &
worker=$!
# The worker runs until this script ends, however it ends.
stop_worker() { if kill -0 "$worker" 2>/dev/null; then kill "$worker"; fi; }
trap stop_worker EXIT
job=$(q "SELECT job_id FROM micromegas.mm_create_view(name => 'jw_view', update_group => 4000, time_column => 'time',
  extract_query => 'SELECT time, process_id FROM log_entries',
  count_src_query => 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query => 'SELECT time, process_id FROM {source}', with_no_data => false)")
failing=$(q "SELECT micromegas.mm_refresh_view('log_entries', params => '{\"fail\": true, \"sleep_ms\": 10}')")
status=0
for _ in $(seq 1 100); do
  states=$(q "SELECT string_agg(state, ',' ORDER BY job_id = '$job' DESC) FROM micromegas.jobs WHERE job_id IN ('$job', '$failing')")
  [ "$states" = "done,failed" ] && break
  sleep 0.1
done
if [ "$states" != "done,failed" ]; then
  echo "job worker example: jobs ended as '$states', expected done,failed"; cat "$MMV_RUN/job_worker.log"; status=1
fi
attempts=$(q "SELECT attempts || ' ' || worker FROM micromegas.jobs WHERE job_id = '$failing'")
[ "$attempts" = "3 example-worker" ] || { echo "job worker example: failing job: '$attempts'"; status=1; }
grep -q "refresh of jw_view (attempt 1)" "$MMV_RUN/job_worker.log" || { echo "job worker example: no log of the job"; status=1; }
q "SELECT count(*) FROM micromegas.mm_drop_view('jw_view')" >/dev/null
q "DELETE FROM micromegas.jobs" >/dev/null
[ $status = 0 ] && echo "job worker example: a create's refresh done, a failing job failed after 3 attempts"
exit $status
