#!/usr/bin/env bash
# The worst a reader can send, on the running cluster, as micromegas_reader:
#  - 16 MB of commas to mm_sql_hash (unbounded, gigabytes of tokens) and a
#    definition of 3,000 chained CTEs to mm_explain_view (unbounded, a
#    planning pass that allocates gigabytes with no checkpoint), each three
#    times in one session and in four sessions at once: every call ends
#    with 54001 (the memory or time limit), the backend's peak resident
#    memory (VmHWM) stays under the documented budget of a validation
#    (micromegas_views.validation_memory, 256 MB), no backend dies and the
#    postmaster never restarts;
#  - a dry run with a raised validation_timeout on a 600-way join while an
#    admin creates a view and a service registers a built-in, each under a
#    2 s lock_timeout: neither waits for the dry run, and the reader is held
#    to the default limit (5 s);
#  - an admin's create of a 450-way join validated for seconds (60 s
#    allowed) while another admin creates a view and a service registers a
#    built-in under a 2 s lock_timeout: a write plans before it takes the
#    catalog lock, so neither waits;
#  - a reader's backend terminated in the middle of a validation: its helper
#    is killed and reaped by the backend itself before it exits, never left
#    to the init process (which, in a container, is often the postmaster,
#    and restarts the cluster when a child it does not know dies);
#  - 42 MB being encoded for the helper is cancelled by statement_timeout;
#  - an upstream replaced while an admin's create plans against it: the
#    create plans again before taking the lock, and writes meanwhile do not
#    wait;
#  - a replace and a restore, whose 800-way dependent must be re-checked:
#    the re-check is planned before the lock too, and writes meanwhile do
#    not wait;
#  - a direct UPDATE planning under the lock and a drop of its row: no
#    deadlock.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
work="$MMV_RUN/limits"
rm -rf "$work" && mkdir -p "$work"
db=mmv_limits
q() { psql -X -q -v ON_ERROR_STOP=1 -d "$db" "$@"; }
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
q -c "$MMV_INSTALL_SQL"
status=0
fail() { echo "limits: $*"; status=1; }
budget_kb=$((256 * 1024))
started=$(psql -X -A -t -d postgres -c "SELECT pg_postmaster_start_time()")

# 3,000 chained CTEs, each over the one before (about 100 KB).
python3 - >"$work/chain.sql" <<'PY'
ctes = ["t0 AS (SELECT * FROM log_entries)"] + [f"t{i} AS (SELECT * FROM t{i-1})" for i in range(1, 3000)]
extract = "WITH " + ", ".join(ctes) + " SELECT * FROM t2999"
statement = ("CREATE MATERIALIZED VIEW chain WITH (extract_query = '" + extract.replace("'", "''") + "', "
             "count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', "
             "merge_partitions_query = 'SELECT * FROM {source}', update_group = 9000, time_column = 'time')")
print("SELECT $chain$" + statement + "$chain$ AS chain \\gset")
PY

# One session's work: three of each, as the reader, then the backend's peak
# resident memory (read as the superuser, from the backend itself).
session() {
  {
    cat "$work/chain.sql"
    echo "SET ROLE micromegas_reader;"
    for _ in 1 2 3; do
      echo "SELECT micromegas.mm_sql_hash(repeat(',', 16000000));"
      echo "SELECT problems FROM micromegas.mm_explain_view(:'chain');"
    done
    echo "RESET ROLE;"
    echo "SELECT 'VmHWM ' || (regexp_match(pg_read_file('/proc/self/status'), 'VmHWM:\s+(\d+)'))[1];"
  } | psql -X -A -t -d "$db" >"$work/session.$1.out" 2>&1
  # psql goes on past the errors the calls are expected to raise; it exits
  # non-zero only when it lost its connection, which check_session reports.
  echo "psql exit $?" >>"$work/session.$1.out"
}

check_session() {
  local out="$work/session.$1.out" hwm
  if ! grep -q "^psql exit 0$" "$out" || grep -qiE "server closed the connection|terminating connection|could not connect" "$out"; then
    fail "session $1 lost its backend: $(grep -iE 'server closed|terminating|could not' "$out" | head -2)"
  fi
  local hashes explains
  hashes=$(grep -c "ERROR:  validation exceeded its memory limit of 256 MB" "$out" || true)
  explains=$(grep -cE "^\{\"?54001: " "$out" || true)
  [ "$hashes" = 3 ] || fail "session $1: $hashes of 3 fingerprints stopped by the memory limit: $(head -c 600 "$out")"
  [ "$explains" = 3 ] || fail "session $1: $explains of 3 dry runs stopped by a limit: $(grep -v '^$' "$out" | head -c 600)"
  hwm=$(sed -n 's/^VmHWM //p' "$out")
  if [ -z "$hwm" ] || [ "$hwm" -ge "$budget_kb" ]; then
    fail "session $1: the backend's peak resident memory is ${hwm:-unknown} kB (budget $budget_kb kB)"
  else
    echo "limits: session $1: 3 fingerprints and 3 dry runs stopped by their limits; backend peak RSS $((hwm / 1024)) MB"
  fi
}

session one
check_session one
for i in 1 2 3 4; do session "four-$i" & done
wait
for i in 1 2 3 4; do check_session "four-$i"; done

# A reader's long dry run does not hold the catalog: an admin's create and a
# service's registration go through under a 2 s lock_timeout meanwhile.
python3 - >"$work/join.sql" <<'PY'
joins = " ".join(f"JOIN log_entries e{i} ON e{i}.process_id = e0.process_id" for i in range(1, 600))
extract = f"SELECT e0.time, e0.process_id FROM log_entries e0 {joins}"
statement = ("CREATE MATERIALIZED VIEW wide_join WITH (extract_query = '" + extract + "', "
             "count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', "
             "merge_partitions_query = 'SELECT * FROM {source}', update_group = 9000, time_column = 'time')")
print("SET ROLE micromegas_reader;")
print("SET micromegas_views.validation_timeout = '60s';")
print("SELECT problems FROM micromegas.mm_explain_view($j$" + statement + "$j$);")
PY
q -c "SELECT 1" >/dev/null
begin=$(date +%s)
psql -X -A -t -d "$db" -f "$work/join.sql" >"$work/join.out" 2>&1 &
reader=$!
sleep 1
q >"$work/writers.out" 2>&1 <<'SQL' || fail "a write waited for the reader's dry run: $(cat "$work/writers.out")"
SET lock_timeout = '2s';
SET ROLE micromegas_admin;
SELECT status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW during_dry_run WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 9000, time_column = 'time')$$);
RESET ROLE;
SET ROLE micromegas_service;
SELECT view_set_name FROM micromegas.mm_register_builtin_view_set('during_dry_run_static',
  '{"fields": [{"name": "process_id", "type": "Utf8"}, {"name": "time", "type": "Timestamp(ns, \"+00:00\")"}]}', 500, 'raw');
SQL
reader_status=0
wait $reader || reader_status=$?
took=$(( $(date +%s) - begin ))
[ $reader_status = 0 ] || fail "the reader's psql exited with $reader_status: $(head -c 400 "$work/join.out")"
if grep -q "54001: .*exceeded the validation time limit of 5000 ms" "$work/join.out"; then
  echo "limits: a reader's dry run with validation_timeout = 60s was held to 5000 ms (${took}s in all); an admin's create and a service's registration meanwhile did not wait"
elif grep -q "^{}" "$work/join.out"; then
  echo "limits: the reader's 600-way dry run answered within the default limit; the writes meanwhile did not wait"
else
  fail "the reader's dry run: $(head -c 400 "$work/join.out")"
fi

# An admin's long validation holds no other writer either: a write plans
# before it takes the catalog lock, and under the lock takes that answer
# (what the definition reads did not move). Meanwhile another admin's
# create and a service's registration go through under a 2 s lock_timeout.
python3 - >"$work/admin_join.sql" <<'PY'
joins = " ".join(f"JOIN log_entries e{i} ON e{i}.process_id = e0.process_id" for i in range(1, 450))
extract = f"SELECT e0.time, e0.process_id FROM log_entries e0 {joins}"
statement = ("CREATE MATERIALIZED VIEW admin_wide_join WITH (extract_query = '" + extract + "', "
             "count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', "
             "merge_partitions_query = 'SELECT * FROM {source}', update_group = 9000, time_column = 'time')")
print("SET ROLE micromegas_admin;")
print("SET micromegas_views.validation_timeout = '60s';")
print("SELECT status FROM micromegas.mm_create_view($j$" + statement + "$j$);")
PY
status_before=$status
psql -X -A -t -v ON_ERROR_STOP=1 -d "$db" -f "$work/admin_join.sql" >"$work/admin_join.out" 2>&1 &
admin=$!
sleep 1
q >"$work/admin_writers.out" 2>&1 <<'SQL' || fail "a write waited for an admin's validation: $(cat "$work/admin_writers.out")"
SET lock_timeout = '2s';
SET ROLE micromegas_admin;
SELECT status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW during_admin_create WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 9000, time_column = 'time')$$);
RESET ROLE;
SET ROLE micromegas_service;
SELECT view_set_name FROM micromegas.mm_register_builtin_view_set('during_admin_create_static',
  '{"fields": [{"name": "process_id", "type": "Utf8"}, {"name": "time", "type": "Timestamp(ns, \"+00:00\")"}]}', 500, 'raw');
SQL
# The writes are only shown not to wait if the validation was still going.
kill -0 $admin 2>/dev/null || fail "the admin's validation ended before the other writes began: this check needs a longer one"
admin_status=0
wait $admin || admin_status=$?
{ [ $admin_status = 0 ] && grep -qx created "$work/admin_join.out"; } \
  || fail "the admin's create of a 450-way join: $(head -c 400 "$work/admin_join.out")"
[ "$(q -A -t -c "SELECT count(*) FROM micromegas.lakehouse_view_set_definitions
                 WHERE view_set_name IN ('admin_wide_join', 'during_admin_create')")" = 2 ] \
  || fail "the admin's create or the create meanwhile is missing"
[ $status = "$status_before" ] && echo "limits: an admin's create validated for seconds before taking the catalog lock; another create and a registration meanwhile did not wait"

# writes_while PID LABEL: another admin's write every half second, under a
# 2 s lock_timeout, for as long as PID runs (at most 200); none may wait for
# it. The count is left in $writes.
writes_while() {
  local pid="$1" label="$2"
  writes=0
  while kill -0 "$pid" 2>/dev/null && [ $writes -lt 200 ]; do
    writes=$((writes + 1))
    q >"$work/writer.out" 2>&1 <<SQL || { fail "write $writes waited for $label: $(cat "$work/writer.out")"; break; }
SET lock_timeout = '2s';
SET ROLE micromegas_admin;
SELECT status FROM micromegas.mm_create_view(\$\$CREATE OR REPLACE MATERIALIZED VIEW written_meanwhile WITH (
  extract_query = 'SELECT time, process_id, level + $writes AS level FROM log_entries',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 9000, time_column = 'time')\$\$);
SQL
    sleep 0.5
  done
}

# An upstream replaced while an admin's long create plans against it: the
# create plans again ahead of the lock (the catalog moved), not under it,
# so other writers keep going through under a 2 s lock_timeout for as long
# as it validates.
q -c "SET ROLE micromegas_admin" -c "SELECT status FROM micromegas.mm_create_view(\$\$CREATE MATERIALIZED VIEW quick1 WITH (
  extract_query = 'SELECT insert_time AS time, process_id FROM blocks',
  count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 3000, time_column = 'time')\$\$)" >/dev/null
python3 - >"$work/upstream_join.sql" <<'PY'
joins = " ".join(f"JOIN quick1 e{i} ON e{i}.process_id = e0.process_id" for i in range(1, 800))
extract = f"SELECT e0.time, e0.process_id FROM quick1 e0 {joins}"
statement = ("CREATE MATERIALIZED VIEW upstream_join WITH (extract_query = '" + extract + "', "
             "count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', "
             "merge_partitions_query = 'SELECT * FROM {source}', update_group = 9000, time_column = 'time')")
print("SET ROLE micromegas_admin;")
print("SET micromegas_views.validation_timeout = '60s';")
print("SELECT status FROM micromegas.mm_create_view($j$" + statement + "$j$);")
PY
status_before=$status
psql -X -A -t -v ON_ERROR_STOP=1 -d "$db" -f "$work/upstream_join.sql" >"$work/upstream_join.out" 2>&1 &
admin=$!
sleep 1
q -c "SET ROLE micromegas_admin" -c "SELECT status FROM micromegas.mm_create_view(\$\$CREATE OR REPLACE MATERIALIZED VIEW quick1 WITH (
  extract_query = 'SELECT insert_time AS time, process_id, nb_objects FROM blocks',
  count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 3000, time_column = 'time')\$\$)" >/dev/null
writes_while $admin "an admin's create whose upstream moved"
admin_status=0
wait $admin || admin_status=$?
{ [ $admin_status = 0 ] && grep -qx created "$work/upstream_join.out"; } \
  || fail "the admin's create over a replaced upstream: $(head -c 400 "$work/upstream_join.out")"
[ $writes -ge 4 ] || fail "the admin's create ended after $writes writes: this check needs a longer validation"
[ $status = "$status_before" ] && echo "limits: an upstream replaced while an admin's create planned: it planned again ahead of the lock; $writes writes meanwhile did not wait"

# writes_meanwhile LABEL SQLFILE EXPECTED: runs SQLFILE (a write that must
# re-check the 800-way dependent upstream_join) in the background, with
# writes_while beside it; it must answer EXPECTED.
writes_meanwhile() {
  local label="$1" sql="$2" expected="$3"
  local before=$status admin_status=0 begin_ms took_ms
  begin_ms=$(date +%s%3N)
  psql -X -A -t -v ON_ERROR_STOP=1 -d "$db" -f "$sql" >"$sql.out" 2>&1 &
  local admin=$!
  writes_while $admin "$label"
  wait $admin || admin_status=$?
  took_ms=$(( $(date +%s%3N) - begin_ms ))
  { [ $admin_status = 0 ] && grep -qx "$expected" "$sql.out"; } || fail "$label: $(head -c 400 "$sql.out")"
  [ "$(q -A -t -c "SELECT load_status FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'upstream_join'")" = ok ] \
    || fail "the 800-way dependent no longer loads after $label"
  [ $writes -ge 4 ] || fail "$label ended after $writes writes: this check needs a longer re-check"
  [ $status = "$before" ] && echo "limits: $label re-checked an 800-way dependent ahead of the catalog lock (${took_ms} ms); $writes writes meanwhile did not wait"
}

# A replace that changes what the 800-way dependent reads, then a restore
# of the version before it: each plans the dependent's re-check ahead of
# the catalog lock too, so under the lock it takes that answer from
# memory, and other writers meanwhile go through.
cat >"$work/replace_upstream.sql" <<'SQL'
SET ROLE micromegas_admin;
SET micromegas_views.validation_timeout = '60s';
SELECT status FROM micromegas.mm_create_view($$CREATE OR REPLACE MATERIALIZED VIEW quick1 WITH (
  extract_query = 'SELECT insert_time AS time, process_id, nb_objects, nb_objects + 1 AS next_objects FROM blocks',
  count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 3000, time_column = 'time')$$);
SQL
schema_before=$(q -A -t -c "SELECT md5(schema_ipc) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'quick1'")
version_before=$(q -A -t -c "SELECT max(version) FROM micromegas.lakehouse_view_set_definition_history WHERE view_set_name = 'quick1'")
writes_meanwhile "a replace" "$work/replace_upstream.sql" replaced
[ "$(q -A -t -c "SELECT md5(schema_ipc) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'quick1'")" != "$schema_before" ] \
  || fail "the replace did not change the upstream's schema: this check needs a re-check of the dependent"
cat >"$work/restore_upstream.sql" <<SQL
SET ROLE micromegas_admin;
SET micromegas_views.validation_timeout = '60s';
SELECT status FROM micromegas.mm_restore_view('quick1', $version_before);
SQL
writes_meanwhile "a restore" "$work/restore_upstream.sql" restored
[ "$(q -A -t -c "SELECT md5(schema_ipc) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'quick1'")" = "$schema_before" ] \
  || fail "the restore did not bring the upstream's schema back"
# A direct UPDATE of the definitions row (an admin may write the table)
# takes the catalog lock before it plans (Postgres has locked the row
# already): a drop of that row meanwhile waits for it, and neither
# deadlocks.
python3 - >"$work/update_long.sql" <<'PY'
arms = " UNION ALL ".join(f"SELECT insert_time AS time, process_id FROM blocks WHERE nb_objects > {i}" for i in range(600))
print("SET ROLE micromegas_admin;")
print("SET micromegas_views.validation_timeout = '60s';")
print("UPDATE micromegas.lakehouse_view_set_definitions SET definition_sql = NULL, extract_query = $x$" + arms + "$x$ WHERE view_set_name = 'vx';")
PY
q -c "SET ROLE micromegas_admin" -c "SELECT status FROM micromegas.mm_create_view(\$\$CREATE MATERIALIZED VIEW vx WITH (
  extract_query = 'SELECT insert_time AS time, process_id FROM blocks',
  count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 3000, time_column = 'time')\$\$)" >/dev/null
before=$status
psql -X -A -t -d "$db" -f "$work/update_long.sql" >"$work/update_long.out" 2>&1 &
updater=$!
sleep 1
q -A -t -c "SET ROLE micromegas_admin" -c "SELECT status FROM micromegas.mm_drop_view('vx')" >"$work/drop_during.out" 2>&1 || true
wait $updater || true
if grep -qi deadlock "$work/update_long.out" "$work/drop_during.out"; then
  fail "a direct UPDATE and a drop of its row deadlocked: $(cat "$work/update_long.out" "$work/drop_during.out" | head -c 400)"
fi
grep -qx "UPDATE 1" "$work/update_long.out" || fail "the direct UPDATE: $(head -c 400 "$work/update_long.out")"
grep -qx dropped "$work/drop_during.out" || fail "the drop during the direct UPDATE: $(head -c 400 "$work/drop_during.out")"
[ $status = "$before" ] && echo "limits: a direct UPDATE planning under the catalog lock and a drop of its row meanwhile: the drop waited, no deadlock"

# What a backend remembers of its answers is bounded (16 MB): 60 dry runs of
# half-megabyte definitions by a reader leave the idle backend well under
# 64 MB of anonymous memory (each answer kept would be about 1.5 MB).
python3 - >"$work/memo.sql" <<'PY'
print("SET application_name = 'mmv_memo_probe';")
print("SET ROLE micromegas_reader;")
for i in range(60):
    lit = ("%05d" % i) + "x" * 500000
    eq = f"SELECT time, process_id, level FROM log_entries WHERE msg <> ''{lit}''"
    st = (f"CREATE MATERIALIZED VIEW m{i} WITH (extract_query = '{eq}', count_src_query = 'SELECT count(*) AS count "
          "FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', "
          "merge_partitions_query = 'SELECT * FROM {source}', update_group = 4000, time_column = 'time')")
    print(f"SELECT would_be FROM micromegas.mm_explain_view($x${st}$x$);")
print("SELECT pg_sleep(30);")
PY
psql -X -q -d "$db" -f "$work/memo.sql" >"$work/memo.out" 2>&1 &
memo_client=$!
memo_kb=""
for _ in $(seq 1 240); do
  memo_pid=$(psql -X -A -t -d postgres -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'mmv_memo_probe' AND query LIKE 'SELECT pg_sleep%'")
  if [ -n "$memo_pid" ]; then
    memo_kb=$(awk '/^RssAnon:/ {print $2}' "/proc/$memo_pid/status")
    break
  fi
  sleep 0.5
done
kill "$memo_client" 2>/dev/null; wait "$memo_client" 2>/dev/null || true
if [ -z "$memo_kb" ]; then
  fail "the 60 dry runs did not finish: $(head -c 400 "$work/memo.out")"
elif [ "$memo_kb" -ge $((64 * 1024)) ]; then
  fail "60 remembered dry runs left the backend with $((memo_kb / 1024)) MB of anonymous memory"
else
  echo "limits: 60 dry runs of half-megabyte definitions left the idle backend with $((memo_kb / 1024)) MB of anonymous memory"
fi

# Encoding a request for the helper services interrupts too: 42 MB of
# control characters end with the statement's 500 ms statement_timeout (or
# the helper's refusal of their length), not seconds later.
begin_ms=$(date +%s%3N)
q -c "SET ROLE micromegas_reader" -c "SET statement_timeout = '500ms'" \
  -c "SELECT micromegas.mm_sql_hash(repeat(chr(1), 42000000))" >"$work/encode.out" 2>&1 && fail "the 42 MB fingerprint was not cancelled"
took_ms=$(( $(date +%s%3N) - begin_ms ))
if grep -qE "canceling statement due to statement timeout|the query is too long" "$work/encode.out" && [ "$took_ms" -lt 2000 ]; then
  echo "limits: a 42 MB request of control characters ended after ${took_ms} ms ($(grep -oE 'statement timeout|too long' "$work/encode.out" | head -1))"
else
  fail "a 42 MB request being encoded: ${took_ms} ms, $(head -c 300 "$work/encode.out")"
fi

# A long text that needs no escaping (80 MB of ASCII): encoding it for the
# helper is a copy, so the call ends within its statement_timeout (or the
# helper's refusal of its length) at once.
begin_ms=$(date +%s%3N)
q -c "SET ROLE micromegas_reader" -c "SET statement_timeout = '500ms'" \
  -c "SELECT micromegas.mm_sql_hash(repeat('a', 80000000))" >"$work/encode_ascii.out" 2>&1 && fail "the 80 MB fingerprint was answered"
took_ms=$(( $(date +%s%3N) - begin_ms ))
if grep -qE "canceling statement due to statement timeout|the query is too long" "$work/encode_ascii.out" && [ "$took_ms" -lt 2000 ]; then
  echo "limits: an 80 MB ASCII request ended after ${took_ms} ms ($(grep -oE 'statement timeout|too long' "$work/encode_ascii.out" | head -1))"
else
  fail "an 80 MB ASCII request: ${took_ms} ms, $(head -c 300 "$work/encode_ascii.out")"
fi

# A FATAL exit in the middle of a call (a terminate here; a lost client or
# a parallel worker stopped by its leader take the same path) skips the
# call's unwinding: the helper is found and reaped at the backend's exit.
# Its parent is sampled every few milliseconds until it is gone: it must
# never be anything but the backend.
psql -X -A -t -d "$db" -v ON_ERROR_STOP=0 -c "SET application_name = 'mmv_victim'" -f "$work/join.sql" >"$work/victim.out" 2>&1 &
victim=$!
backend=""
for _ in $(seq 1 100); do
  backend=$(psql -X -A -t -d postgres -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'mmv_victim' AND state = 'active'")
  [ -n "$backend" ] && helper=$(pgrep -P "$backend" | head -n 1) && [ -n "$helper" ] && break
  sleep 0.05
done
if [ -z "$backend" ] || [ -z "${helper:-}" ]; then
  fail "no helper process was found under the reader's backend"
else
  python3 - "$backend" "$helper" >"$work/orphan.out" <<'PY' &
import os, sys, time
backend, helper = sys.argv[1], sys.argv[2]
deadline = time.time() + 5
seen = set()
while time.time() < deadline:
    try:
        with open(f"/proc/{helper}/stat") as f:
            ppid = f.read().rsplit(")", 1)[1].split()[1]
    except (FileNotFoundError, ProcessLookupError):
        break
    seen.add(ppid)
    time.sleep(0.002)
others = sorted(p for p in seen if p != backend)
print("orphaned, parent " + ",".join(others) if others else "reaped by its backend")
PY
  sampler=$!
  sleep 0.2
  psql -X -q -d postgres -c "SELECT pg_terminate_backend($backend)" >/dev/null
  wait $sampler
  victim_status=0
  wait $victim || victim_status=$?
  grep -q "terminating connection due to administrator command" "$work/victim.out" \
    || fail "the reader's session was not terminated in its call (psql $victim_status): $(head -c 400 "$work/victim.out")"
  if grep -qx "reaped by its backend" "$work/orphan.out"; then
    echo "limits: a backend terminated during a validation reaped its helper before it exited"
  else
    fail "the helper of a terminated backend: $(cat "$work/orphan.out")"
  fi
fi

now=$(psql -X -A -t -d postgres -c "SELECT pg_postmaster_start_time()")
[ "$now" = "$started" ] || fail "the postmaster restarted ($started -> $now)"
if grep -E "terminated by signal|was terminated by exception|server process .* was terminated" "$MMV_RUN/postgres.log"; then
  fail "a backend died"
fi
[ $status = 0 ] && echo "limits: passed"
exit $status
