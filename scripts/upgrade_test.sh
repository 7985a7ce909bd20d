#!/usr/bin/env bash
# Upgrades: every released version's install script (sql-tests/upgrade/releases/, fixtures of this test) is
# installed, filled with definitions, and ALTER EXTENSION ... UPDATE'd to the
# current version. Every row must be kept, and the upgraded catalog objects
# must be exactly those of a fresh CREATE EXTENSION. Needs a running cluster
# with the current build installed (scripts/cluster.sh install).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
root="$(cd "$here/.." && pwd)"
extdir="$("$PG_CONFIG" --sharedir)/extension"
current=$(sed -n 's/^default_version = //p' "$extdir/micromegas_views.control" | tr -d "'")
source "$here/describe.sh"

# The definitions an upgrade must keep as they were (a re-validation may
# refresh a stored schema's nullability, never these).
rows() {
  q "$1" -c "SELECT view_set_name, definition_sql, update_group, encode(schema_hash, 'hex'), reads, created_at,
                    updated_at, updated_by, load_status
               FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name <> 'u_broken' ORDER BY 1"
}
# The built-in view sets as shipped: an upgrade brings them to what a fresh
# install of the new version has.
builtins() {
  q "$1" -c "SELECT view_set_name, schema_ipc, encode(schema_hash, 'hex'), update_group, kind, shipped
               FROM micromegas.builtin_view_sets ORDER BY 1"
}
# A definition's stored schema is what validating it now gives.
schemas() {
  q "$1" -c "SELECT view_set_name, schema_ipc FROM micromegas.lakehouse_view_set_definitions ORDER BY 1"
}

q postgres -c "DROP DATABASE IF EXISTS mmv_fresh" -c "CREATE DATABASE mmv_fresh" 2>/dev/null
q mmv_fresh -c "$MMV_INSTALL_SQL"
describe mmv_fresh >"$MMV_RUN/upgrade.fresh"
builtins mmv_fresh >"$MMV_RUN/upgrade.fresh.builtins"
status=0
for script in "$root"/sql-tests/upgrade/releases/micromegas_views--*.sql; do
  from=$(basename "$script" .sql | sed 's/^micromegas_views--//')
  cp "$script" "$extdir/"
  # A released version's own control settings (e.g. the schema it used).
  [ -f "${script%.sql}.control" ] && cp "${script%.sql}.control" "$extdir/"
  db="mmv_upgrade_${from//./_}"
  q postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
  # Versions from 0.1.4 on need btree_gist to install at all.
  needs_gist=yes
  grep -q "^requires = ''" "${script%.sql}.control" 2>/dev/null && needs_gist=no
  [ $needs_gist = yes ] && q "$db" -c "CREATE SCHEMA btree_gist" -c "CREATE EXTENSION btree_gist SCHEMA btree_gist"
  q "$db" -c "SET micromegas_views.adopt_existing_roles = on" -c "CREATE EXTENSION micromegas_views VERSION '$from'"
  q "$db" >/dev/null <<'SQL'
SELECT micromegas.mm_create_view(replace(replace(micromegas._mm_shipped_log_stats(),
  'CREATE MATERIALIZED VIEW', 'CREATE OR REPLACE MATERIALIZED VIEW'), '''1 minute''', '''5 minutes'''));
SELECT micromegas.mm_create_view($$CREATE MATERIALIZED VIEW u_daily WITH (
  extract_query = $q$SELECT date_bin('1 day', time_bin) AS day, process_id, sum(count) AS count FROM log_stats GROUP BY 1, 2$q$,
  count_src_query = $q$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$q$,
  merge_partitions_query = 'SELECT day, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2',
  update_group = 4000, time_column = 'day')$$);
SQL
  if [ "$from" = 0.1.4 ]; then
    # 0.1.4's state that 0.1.5 reshapes: a job running under a worker-name
    # lease (requeued by the upgrade), a queued one, and a deny rule's hit
    # (moved to query_deny_hits).
    q "$db" >/dev/null <<'SQL'
SELECT micromegas.mm_refresh_view('u_daily', '2024-01-01', '2024-01-02');
SELECT micromegas.mm_refresh_view('u_daily', '2024-01-02', '2024-01-03');
SELECT job_id FROM micromegas.mm_claim_job('old-worker');
SELECT * FROM micromegas.deny_queries($$client = 'old'$$, 'kept');
SELECT micromegas.mm_record_query_denial_hits(ARRAY(SELECT rule_id FROM micromegas.query_deny_list), '2024-05-01');
SQL
  fi
  if [ "$from" = 0.1.5 ]; then
    # 0.1.5 stored log_stats' time_bin as not null (its date_bin wrapper);
    # the install above ran on this build, which infers it nullable, so
    # the 0.1.5 form is written back (triggers off) for the upgrade to fix.
    q "$db" >/dev/null <<'SQL'
SET session_replication_role = replica;
UPDATE micromegas.lakehouse_view_set_definitions d
   SET schema_ipc = f.schema_ipc, schema_json = f.schema_json
  FROM micromegas.lakehouse_view_set_definitions o,
       LATERAL micromegas._mm_schema_forms(jsonb_set(o.schema_json, '{fields,0,nullable}', 'false')::text) f
 WHERE o.view_set_name = 'log_stats' AND d.view_set_name = 'log_stats'
   AND o.schema_json->'fields'->0->>'name' = 'time_bin';
SQL
    got=$(q "$db" -c "SELECT schema_json->'fields'->0->>'nullable' FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'")
    [ "$got" = false ] || { echo "upgrade from 0.1.5: could not write the 0.1.5 schema form ($got)"; status=1; }
    # A stored definition that no longer validates (written with triggers
    # off: its text reads a source that does not exist): the upgrade marks
    # it failed to load with a WARNING naming it, and does not stop; the
    # view it reads (log_stats, whose stored schema the upgrade moves) is
    # not marked failed because of it.
    q "$db" >/dev/null <<'SQL'
SELECT micromegas.mm_create_view(replace(definition_sql, 'u_daily', 'u_broken'))
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'u_daily';
SET session_replication_role = replica;
UPDATE micromegas.lakehouse_view_set_definitions
   SET definition_sql = replace(definition_sql, 'FROM log_stats', 'FROM no_such_source'),
       extract_query = replace(extract_query, 'FROM log_stats', 'FROM no_such_source')
 WHERE view_set_name = 'u_broken';
SQL
  fi
  rows "$db" >"$MMV_RUN/upgrade.$from.before"
  if [ $needs_gist = no ]; then
    # The update needs btree_gist, which an UPDATE does not install: refused
    # with Postgres' hint until an admin creates it (docs/operations.md says so).
    if q "$db" -c "ALTER EXTENSION micromegas_views UPDATE" 2>"$MMV_RUN/upgrade.$from.refused"; then
      echo "upgrade from $from: updated without btree_gist"; status=1
    fi
    grep -q 'required extension "btree_gist" is not installed' "$MMV_RUN/upgrade.$from.refused" \
      || { echo "upgrade from $from: unexpected refusal: $(cat "$MMV_RUN/upgrade.$from.refused")"; status=1; }
    q "$db" -c "CREATE SCHEMA btree_gist" -c "CREATE EXTENSION btree_gist SCHEMA btree_gist"
  fi
  q "$db" -c "ALTER EXTENSION micromegas_views UPDATE" 2>"$MMV_RUN/upgrade.$from.stderr"
  cat "$MMV_RUN/upgrade.$from.stderr" >&2
  if [ "$from" = 0.1.5 ]; then
    grep -q 'WARNING:  micromegas_views 0.1.6: materialized view "u_broken" no longer validates and is marked failed to load' \
      "$MMV_RUN/upgrade.$from.stderr" || { echo "upgrade from 0.1.5: no warning for the definition that no longer validates"; status=1; }
    grep -q 'no_such_source' "$MMV_RUN/upgrade.$from.stderr" || { echo "upgrade from 0.1.5: the warning does not give the reason"; status=1; }
    # It reads log_stats, whose schema the upgrade moves: log_stats and
    # u_daily still load (rows() above compares them), u_broken alone fails.
    got=$(q "$db" -c "SELECT load_status || ' ' || (load_error LIKE '%no_such_source%') FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'u_broken'")
    [ "$got" = "failed true" ] || { echo "upgrade from 0.1.5: u_broken is '$got'"; status=1; }
    n=$(awk '/no longer validates and is marked failed/ { n++ } END { print n + 0 }' "$MMV_RUN/upgrade.$from.stderr")
    [ "$n" = 1 ] || { echo "upgrade from 0.1.5: $n warnings for one definition that no longer validates"; status=1; }
  fi
  if [ "$from" = 0.1.4 ]; then
    jobs=$(q "$db" -c "SELECT string_agg(state || ':' || coalesce(failure_phase, '-'), ',' ORDER BY begin_time) FROM micromegas.jobs")
    [ "$jobs" = "queued:lease,queued:-" ] || { echo "upgrade from 0.1.4: jobs are $jobs, expected the running one requeued"; status=1; }
    hit=$(q "$db" -c "SELECT reason || ' ' || last_hit_at::date FROM micromegas.list_query_denials()")
    [ "$hit" = "kept 2024-05-01" ] || { echo "upgrade from 0.1.4: deny rule and hit are '$hit'"; status=1; }
    # The requeued job works with the token protocol.
    got=$(q "$db" -c "SELECT micromegas.mm_finish_job(job_id, lease_token, true) FROM micromegas.mm_claim_job('new-worker')")
    [ "$got" = done ] || { echo "upgrade from 0.1.4: a requeued job could not be claimed and finished ($got)"; status=1; }
  fi
  got=$(q "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'micromegas_views'")
  [ "$got" = "$current" ] || { echo "upgrade from $from: at version $got, expected $current"; status=1; }
  rows "$db" >"$MMV_RUN/upgrade.$from.after"
  diff -u "$MMV_RUN/upgrade.$from.before" "$MMV_RUN/upgrade.$from.after" || { echo "upgrade from $from: rows changed"; status=1; }
  builtins "$db" >"$MMV_RUN/upgrade.$from.builtins"
  diff -u "$MMV_RUN/upgrade.fresh.builtins" "$MMV_RUN/upgrade.$from.builtins" || { echo "upgrade from $from: shipped built-ins differ from a fresh install"; status=1; }
  violations=$(q "$db" -c "SELECT count(*) FROM micromegas.mm_catalog_violations()")
  [ "$violations" = 0 ] || { echo "upgrade from $from: $violations catalog violations"; status=1; }
  # 0.1.6 infers date_bin(...) nullable: the upgrade stored it so.
  got=$(q "$db" -c "SELECT f->>'nullable' FROM micromegas.lakehouse_view_set_definitions d,
                      jsonb_array_elements(d.schema_json->'fields') f
                     WHERE d.view_set_name = 'log_stats' AND f->>'name' = 'time_bin'")
  [ "$got" = true ] || { echo "upgrade from $from: log_stats' time_bin is stored nullable=$got"; status=1; }
  # Re-validating every definition now changes no stored schema.
  schemas "$db" >"$MMV_RUN/upgrade.$from.schemas"
  q "$db" -c "UPDATE micromegas.lakehouse_view_set_definitions SET definition_sql = definition_sql WHERE load_status = 'ok'" >/dev/null
  schemas "$db" >"$MMV_RUN/upgrade.$from.schemas.again"
  diff -u "$MMV_RUN/upgrade.$from.schemas" "$MMV_RUN/upgrade.$from.schemas.again" || { echo "upgrade from $from: stored schemas were stale"; status=1; }
  describe "$db" >"$MMV_RUN/upgrade.$from.objects"
  diff -u "$MMV_RUN/upgrade.fresh" "$MMV_RUN/upgrade.$from.objects" || { echo "upgrade from $from: objects differ from a fresh install"; status=1; }
  # The upgraded extension still works.
  q "$db" -c "SELECT status FROM micromegas.mm_drop_view('u_daily')" >/dev/null
  [ "$from" = 0.1.5 ] && q "$db" -c "SELECT status FROM micromegas.mm_drop_view('u_broken')" >/dev/null
  [ $status = 0 ] && echo "upgrade from $from to $current: rows kept, objects identical to a fresh install"
done
exit $status
