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

if grep -E "terminated by signal|was terminated by exception" "$work/postgres.log"; then fail "a backend crashed"; fi
[ $status = 0 ] && echo "restore: passed"
exit $status
