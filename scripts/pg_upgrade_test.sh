#!/usr/bin/env bash
# pg_upgrade of a populated catalog from one PostgreSQL major version to
# another (default 15 -> 18; both builds installed by scripts/cluster.sh
# install). A throwaway old cluster gets definitions of every kind (one
# failed to load, one with a dependent), history, partitions (one of an old
# schema), the file queue, jobs in every state, a deny rule with a hit, and
# a grant; pg_upgrade moves it into a new cluster with the extension
# installed. Afterwards every row of every table of the extension is
# identical, the objects are those of a fresh install on the new version,
# the dependency guard and validation act, and the catalog version
# continues.
#   usage: pg_upgrade_test.sh [OLD NEW]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
old="${1:-15}" new="${2:-18}"
bin_of() { (export MMV_PG="$1"; unset PG_CONFIG; source "$here/env.sh"; "$PG_CONFIG" --bindir); }
old_bin="$(bin_of "$old")" new_bin="$(bin_of "$new")"
source "$here/env.sh"
source "$here/describe.sh"
work="$MMV_STATE/pg_upgrade-$old-$new"
sock="$work/socket"
old_port=$((28900 + old)) new_port=$((28950 + new))
db=mmv_pgup
status=0

stop_all() {
  for d in "$work/old" "$work/new"; do
    [ -d "$d" ] && as_postgres "$new_bin/pg_ctl" -D "$d" -m fast stop >/dev/null 2>&1 || true
    [ -d "$d" ] && as_postgres "$old_bin/pg_ctl" -D "$d" -m fast stop >/dev/null 2>&1 || true
  done
}
trap stop_all EXIT
stop_all
rm -rf "$work" && mkdir -p "$sock" && chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown -R postgres "$work"
start() {  # start BIN DATA PORT
  as_postgres env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE "$1/pg_ctl" -D "$2" -w -l "$2.log" \
    -o "-p $3 -k $sock -c listen_addresses=''" start >/dev/null
}
# Checksums on in both (PostgreSQL 18's initdb turns them on by default,
# and pg_upgrade needs the two clusters to agree).
as_postgres "$old_bin/initdb" -D "$work/old" -A trust -U postgres --data-checksums --no-instructions >/dev/null
as_postgres "$new_bin/initdb" -D "$work/new" -A trust -U postgres --data-checksums --no-instructions >/dev/null
start "$old_bin" "$work/old" "$old_port"
export PGHOST="$sock" PGPORT="$old_port"
q postgres -c "CREATE DATABASE $db"
q "$db" -c "$MMV_INSTALL_SQL"
psql -X -q -v ON_ERROR_STOP=1 -d "$db" -f "$root/sql-tests/standby/sql/standby_setup.sql" >/dev/null
q "$db" >/dev/null <<'SQL'
SET micromegas_views.file_retention = 0;
-- a failed definition: its built-in source loses the column it reads
SELECT micromegas.mm_register_builtin_view_set('up_hosts',
  '{"fields": [{"name": "host", "type": "Utf8"}, {"name": "process_id", "type": "Utf8", "nullable": false}, {"name": "time", "type": "Timestamp(ns, \"+00:00\")", "nullable": false}]}', 500);
SELECT micromegas.mm_create_view(st_view('up_failed', 'SELECT time, process_id, host FROM up_hosts', 'SELECT time, process_id, host FROM {source}', 4000));
SELECT micromegas.mm_register_builtin_view_set('up_hosts',
  '{"fields": [{"name": "process_id", "type": "Utf8", "nullable": false}, {"name": "time", "type": "Timestamp(ns, \"+00:00\")", "nullable": false}]}', 500);
-- the file queue: a retired partition's file
SELECT micromegas.retire_partition_by_file('s3://bucket/st_a/2');
-- jobs in every state: queued (the setup's), running, done, failed, cancelled
SELECT micromegas.mm_refresh_view('st_b', '2024-02-01', '2024-02-02', '{"n": 1}');
SELECT micromegas.mm_refresh_view('st_b', '2024-03-01', '2024-03-02', '{"n": 2}');
SELECT micromegas.mm_refresh_view('st_b', '2024-04-01', '2024-04-02', '{"n": 3}');
SELECT micromegas.mm_refresh_view('st_b', '2024-05-01', '2024-05-02', '{"n": 4}');
SELECT micromegas.mm_finish_job(job_id, lease_token, true) FROM micromegas.mm_claim_jobs('w1', 1);
SELECT micromegas.mm_finish_job(job_id, lease_token, false, 'extract', 'boom', false) FROM micromegas.mm_claim_jobs('w1', 1);
SELECT micromegas.mm_cancel_job(job_id) FROM micromegas.jobs WHERE params = '{"n": 4}';
SELECT count(*) FROM micromegas.mm_claim_jobs('w2', 1);
-- a deny hit
SELECT micromegas.mm_record_query_denial_hits(ARRAY(SELECT rule_id FROM micromegas.query_deny_list), '2024-05-01');
SQL
# Every row of every table of the extension, as text, in a stable order.
all_rows() {
  local t
  for t in $(q "$db" -c "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind = 'r' ORDER BY 1"); do
    echo "== $t"
    q "$db" -c "SELECT x::text FROM micromegas.$t x ORDER BY 1"
  done
}
all_rows >"$work/rows.before"
states=$(q "$db" -c "SELECT string_agg(DISTINCT state, ',' ORDER BY state) FROM micromegas.jobs")
[ "$states" = "cancelled,done,failed,queued,running" ] || { echo "pg_upgrade: job states before are $states"; status=1; }
failed=$(q "$db" -c "SELECT count(*) FROM micromegas.lakehouse_view_set_definitions WHERE load_status = 'failed'")
[ "$failed" = 1 ] || { echo "pg_upgrade: $failed failed definitions before, expected 1"; status=1; }
version_before=$(q "$db" -c "SELECT micromegas.mm_catalog_version()")
as_postgres "$old_bin/pg_ctl" -D "$work/old" -m fast stop >/dev/null

echo "pg_upgrade: PostgreSQL $old -> $new"
(cd "$work" && as_postgres "$new_bin/pg_upgrade" -b "$old_bin" -B "$new_bin" -d "$work/old" -D "$work/new" \
   -p "$old_port" -P "$new_port" -U postgres -s "$sock" >"$work/pg_upgrade.log" 2>&1) \
  || { cat "$work/pg_upgrade.log"; find "$work/new" -name '*.log' -path '*pg_upgrade_output*' -exec tail -20 {} \; ; exit 1; }
start "$new_bin" "$work/new" "$new_port"
export PGPORT="$new_port"
got=$(q "$db" -c "SELECT current_setting('server_version_num')::int / 10000")
[ "$got" = "$new" ] || { echo "pg_upgrade: the new cluster runs $got"; status=1; }
all_rows >"$work/rows.after"
diff -u "$work/rows.before" "$work/rows.after" || { echo "pg_upgrade: rows changed"; status=1; }
q postgres -c "CREATE DATABASE mmv_pgup_fresh"
q mmv_pgup_fresh -c "$MMV_INSTALL_SQL"
# A CHECK constraint is stored as the old version parsed it: the new one
# deparses the same expression with other casts and parentheses.
normalized() { describe "$1" | sed -E '/^constraint /{s/::[a-z ]+(\[\])?//g; s/[()]//g}'; }
normalized mmv_pgup_fresh >"$work/objects.fresh"
normalized "$db" >"$work/objects.upgraded"
diff -u "$work/objects.fresh" "$work/objects.upgraded" || { echo "pg_upgrade: objects differ from a fresh install on $new"; status=1; }
# The guards and validation still act, and the version continues.
refused=$(q "$db" -c "SELECT sqlstate FROM mmv_try('SELECT micromegas.mm_drop_view(''st_a''::micromegas.view_set_name)')")
[ "$refused" = 2BP01 ] || { echo "pg_upgrade: dropping a view with a dependent gave $refused"; status=1; }
refused=$(q "$db" -c "SELECT sqlstate FROM mmv_try(\$\$SELECT micromegas.mm_create_view(st_view('up_bad', 'SELECT nope FROM log_entries', 'SELECT nope FROM {source}', 4000))\$\$)")
[ "$refused" = 42P17 ] || { echo "pg_upgrade: an invalid definition gave $refused"; status=1; }
version_after=$(q "$db" -c "SELECT version FROM micromegas.mm_create_view(st_view('up_new', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}', 4500))")
[ "$version_after" -gt "$version_before" ] || { echo "pg_upgrade: catalog version $version_after after, $version_before before"; status=1; }
violations=$(q "$db" -c "SELECT count(*) FROM micromegas.mm_catalog_violations()")
[ "$violations" = 0 ] || { echo "pg_upgrade: $violations catalog violations"; status=1; }
if grep -E "terminated by signal|was terminated by exception" "$work/new.log" "$work/old.log"; then
  echo "pg_upgrade: a backend crashed"; status=1
fi
[ $status -eq 0 ] && echo "pg_upgrade $old -> $new: $(grep -c . "$work/rows.before") rows identical, objects as a fresh install, guards act, version $version_before -> $version_after"
exit $status
