#!/usr/bin/env bash
# The standard restore, with no setting of the extension's: a populated
# database (scripts/dump_restore_test.sh's mmv_dump_a) is dumped with
# pg_dump -Fc and its cluster's roles with pg_dumpall --roles-only; a new
# cluster is initialised, the roles script is run with psql and the dump
# restored with pg_restore. Every row must come back (the same snapshot as
# the round trip within one cluster). Before that, in the new cluster, a
# CREATEROLE user who squats micromegas_admin (and makes itself a member)
# is refused by CREATE EXTENSION, and cannot forge the extension's mark on
# the role. Needs the running cluster and dump_restore_test.sh run first.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
work="$MMV_RUN/restore"
data="$work/pgdata"
port=$((MMV_PORT + 100))
socket="$work/socket"
stop() { [ -d "$data" ] && as_postgres "$PG_BIN/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true; }
stop
rm -rf "$work" && mkdir -p "$socket" && chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres "$work" "$socket"
trap stop EXIT
as_postgres "$PG_BIN/initdb" -D "$data" -A trust -U postgres --no-instructions >/dev/null
as_postgres "$PG_BIN/pg_ctl" -D "$data" -w -l "$work/postgres.log" \
  -o "-p $port -k $socket -c listen_addresses=''" start >/dev/null
new() { psql -X -q -v ON_ERROR_STOP=1 -h "$socket" -p "$port" "$@"; }
status=0
fail() { echo "restore: $*"; status=1; }

# 1. A squatter: a CREATEROLE user makes micromegas_admin and joins it
# before the first install. The install refuses the role; the squatter
# cannot put the extension's mark on it (a role setting only a superuser may
# write, whether or not the library is loaded in its session).
new -d postgres -c "CREATE ROLE squatter LOGIN CREATEROLE"
new -U squatter -d postgres -c "CREATE ROLE micromegas_admin NOLOGIN" -c "GRANT micromegas_admin TO squatter"
for how in "" "LOAD 'micromegas_views';"; do
  if new -U squatter -d postgres -c "$how ALTER ROLE micromegas_admin SET micromegas_views.extension_role = 'micromegas_admin'" \
       2>"$work/forge.log"; then
    fail "a CREATEROLE user set the extension's mark (${how:-placeholder})"
  elif ! grep -qE "permission denied|access to library .* is not allowed" "$work/forge.log"; then
    fail "forging the mark failed for another reason: $(cat "$work/forge.log")"
  fi
done
new -d postgres -c "CREATE DATABASE squatted"
new -d squatted -c "CREATE SCHEMA btree_gist" -c "CREATE EXTENSION btree_gist SCHEMA btree_gist"
if new -d squatted -c "CREATE EXTENSION micromegas_views" 2>"$work/squat.log"; then
  fail "CREATE EXTENSION adopted a squatted role"
elif ! grep -q 'role "micromegas_admin" already exists: its members are squatter' "$work/squat.log"; then
  fail "unexpected refusal: $(cat "$work/squat.log")"
else
  echo "restore: a squatted micromegas_admin is refused ($(head -1 "$work/squat.log"))"
fi
new -d postgres -c "DROP DATABASE squatted" -c "DROP ROLE micromegas_admin" -c "DROP ROLE squatter"

# 2. The standard procedure: roles, then the database.
"$PG_BIN/pg_dumpall" --roles-only -f "$work/roles.sql"
grep -q "micromegas_views.extension_role" "$work/roles.sql" \
  || fail "pg_dumpall --roles-only does not carry the extension's mark"
"$PG_BIN/pg_dump" -Fc -d mmv_dump_a -f "$work/a.dump"
# The roles script recreates the bootstrap superuser too ("already exists"):
# psql goes on past that error, as the usual procedure does.
psql -X -q -h "$socket" -p "$port" -d postgres -f "$work/roles.sql" >"$work/roles.log" 2>&1
new -d postgres -c "CREATE DATABASE mmv_restored"
if "$PG_BIN/pg_restore" -h "$socket" -p "$port" -d mmv_restored "$work/a.dump" 2>"$work/restore.log"; then
  echo "restore: pg_restore into a new cluster reported no error"
else
  fail "pg_restore into a new cluster reported errors:"; cat "$work/restore.log"
fi
source "$here/dump_restore_test.sh" --snapshot-only
snapshot mmv_dump_a >"$work/before"
PGHOST="$socket" PGPORT="$port" snapshot mmv_restored >"$work/after"
if diff -u "$work/before" "$work/after"; then
  echo "restore: $(grep -c . "$work/before") rows reproduced exactly in a new cluster"
else
  fail "rows differ after the standard restore"
fi

# 3. A second database of the new cluster: the roles are the extension's,
# so CREATE EXTENSION takes them as they are, with no setting and no warning.
new -d postgres -c "CREATE DATABASE mmv_second"
new -d mmv_second -c "CREATE SCHEMA btree_gist" -c "CREATE EXTENSION btree_gist SCHEMA btree_gist" \
  -c "CREATE EXTENSION micromegas_views" 2>"$work/second.log" || fail "CREATE EXTENSION in a second database failed: $(cat "$work/second.log")"
if grep -q WARNING "$work/second.log"; then fail "CREATE EXTENSION in a second database warned: $(cat "$work/second.log")"; fi

# 4. A definition its admin allowed more than the session's limit to
# validate (a 150-way join, planned for far longer than 10 ms) is restored
# even when the restoring session's validation_timeout is 10 ms: a restore
# (a superuser with check_function_bodies off, as pg_restore runs)
# validates under the most any role may allow. A COPY that fails one row
# would load none of the table.
psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS mmv_slow" -c "CREATE DATABASE mmv_slow"
psql -X -q -v ON_ERROR_STOP=1 -d mmv_slow -c "$MMV_INSTALL_SQL"
python3 - >"$work/slow.sql" <<'PY'
joins = " ".join(f"JOIN log_entries e{i} ON e{i}.process_id = e0.process_id" for i in range(1, 150))
extract = f"SELECT e0.time, e0.process_id FROM log_entries e0 {joins}"
count = "SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''"
print("SET micromegas_views.validation_timeout = '60s';")
print("SELECT status FROM micromegas.mm_create_view($s$CREATE MATERIALIZED VIEW slow_join WITH (extract_query = '" + extract + "', "
      "count_src_query = '" + count + "', "
      "merge_partitions_query = 'SELECT * FROM {source}', update_group = 9000, time_column = 'time')$s$);")
PY
psql -X -q -v ON_ERROR_STOP=1 -d mmv_slow -f "$work/slow.sql" >/dev/null
"$PG_BIN/pg_dump" -Fc -d mmv_slow -f "$work/slow.dump"
new -d postgres -c "CREATE DATABASE mmv_slow_restored"
if PGOPTIONS="-c micromegas_views.validation_timeout=10ms" \
     "$PG_BIN/pg_restore" -h "$socket" -p "$port" -d mmv_slow_restored "$work/slow.dump" 2>"$work/slow_restore.log" \
   && [ "$(new -A -t -d mmv_slow_restored -c "SELECT count(*) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'slow_join' AND load_status = 'ok'")" = 1 ]; then
  echo "restore: a definition that validates for longer than the session's validation_timeout is restored"
else
  fail "the restore of a slow definition under validation_timeout = 10ms: $(head -c 600 "$work/slow_restore.log")"
fi
psql -X -q -d postgres -c "DROP DATABASE mmv_slow"

if grep -E "terminated by signal|was terminated by exception" "$work/postgres.log"; then fail "a backend crashed"; fi
[ $status = 0 ] && echo "restore: passed"
exit $status
