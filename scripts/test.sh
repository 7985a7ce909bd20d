#!/usr/bin/env bash
# Runs every test: the core's unit tests once, then against PostgreSQL 15, 16,
# 17 and 18 each: the #[pg_test] suite, the pg_regress suite, the
# isolation specs, the client's, the CLI's and the REST endpoint's integration
# tests, the example job worker, a short
# randomized DDL stress run, a pg_dump/pg_restore round trip, the standard
# restore (pg_dumpall --roles-only, pg_restore) into a new cluster, a
# reader's worst input (memory, time, the catalog lock), the extension
# upgrade test, a check that no backend died, a SIGKILL crash test, and a
# hot standby (readers, refused writes, the client, a promotion), TLS to a
# TLS-only cluster, and the Lance spec's generated Python client; then the
# maintenance daemon over a sample lake (once, on the first version), and a
# pg_upgrade of a populated catalog (16 -> 18). One summary line per version,
# one for the daemon and one for pg_upgrade. This is the README's test command and what .ci/run
# calls. MMV_TEST_PG="15 18" (any of 15 16 17 18) limits the versions.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
"$here/setup.sh"
source "$here/env.sh"
cd "$root"

echo "== core, lakehouse and FlightSQL unit tests (cargo test)"
unit=0
cargo test -p micromegas_views_core -p micromegas_views_lakehouse -p micromegas_views_flight || unit=1

# Every suite against one PostgreSQL version; prints how many failed.
suites() {
  export MMV_PG="$1"
  unset PG_CONFIG PG_BIN PGXS_DIR MMV_PORT
  source "$here/env.sh"
  local failed=0
  echo "== [PostgreSQL $MMV_PG] #[pg_test] suite (cargo pgrx test pg$MMV_PG)"
  mkdir -p "$MMV_RUN/pgrx-test-data"
  [ "$(id -u)" = 0 ] && chown postgres "$MMV_RUN" "$MMV_RUN/pgrx-test-data"
  cargo pgrx test "pg$MMV_PG" --runas postgres --pgdata "$MMV_RUN/pgrx-test-data" $MMV_FEATURES \
    || failed=$((failed + 1))

  echo "== [PostgreSQL $MMV_PG] SQL suites against a throwaway cluster"
  "$here/cluster.sh" install
  "$here/cluster.sh" start
  trap '"$here/cluster.sh" stop' EXIT
  local out="$MMV_RUN/results"
  rm -rf "$out" && mkdir -p "$out" && chmod 777 "$out"
  # The suites run as the postgres OS user, which may not be able to read the
  # clone (e.g. under /root): they run from a world-readable copy.
  local suite="$MMV_RUN/suite"
  rm -rf "$suite" && cp -r "$root/sql-tests" "$suite" && chmod -R a+rX "$suite"
  local regress_tests isolation_tests
  regress_tests=$(cd "$suite/regress/sql" && ls *.sql | sed 's/\.sql$//' | sort)
  (cd "$suite" && as_postgres "$PGXS_DIR/src/test/regress/pg_regress" \
    --bindir="$PG_BIN" --inputdir=regress --outputdir="$out/regress" \
    --host="$PGHOST" --port="$PGPORT" --user=postgres --dbname=mmv_regress \
    $regress_tests) || failed=$((failed + 1))
  isolation_tests=$(cd "$suite/isolation/specs" && ls *.spec | sed 's/\.spec$//' | sort)
  (cd "$suite" && as_postgres "$PGXS_DIR/src/test/isolation/pg_isolation_regress" \
    --bindir="$PG_BIN" --inputdir=isolation --outputdir="$out/isolation" \
    --host="$PGHOST" --port="$PGPORT" --user=postgres --dbname=mmv_isolation \
    --load-extension=btree_gist --load-extension=micromegas_views \
    $isolation_tests) || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] client, CLI and REST endpoint integration tests"
  psql -X -q -d postgres -c "DROP DATABASE IF EXISTS mmv_client" -c "CREATE DATABASE mmv_client"
  psql -X -q -d mmv_client -c "$MMV_INSTALL_SQL"
  MMV_TEST_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=mmv_client" \
    cargo test -p micromegas_views_client -p micromegas_views_cli -p micromegas_views_server \
      --features micromegas_views_client/integration,micromegas_views_cli/integration,micromegas_views_server/integration || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] the docs are what a fresh install declares (scripts/privileges_doc.sh, scripts/sql_reference.sh)"
  { "$here/privileges_doc.sh" mmv_client --check "$root/docs/operations.md" \
    && "$here/sql_reference.sh" mmv_client --check "$root/docs/sql-reference.md"; } || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] every example of README.md and docs/, as pasted (scripts/docs_test.py)"
  { python3 "$here/docs_test.py" --self-test && python3 "$here/docs_test.py"; } || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] the example job worker (scripts/job_worker_test.sh)"
  "$here/job_worker_test.sh" mmv_client || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] randomized DDL stress (scripts/stress.sh 4 50)"
  "$here/stress.sh" 4 50 || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] pg_dump / pg_restore round trip"
  "$here/dump_restore_test.sh" >"$MMV_RUN/dump_restore.log" 2>&1 || { cat "$MMV_RUN/dump_restore.log"; failed=$((failed + 1)); }
  tail -n 4 "$MMV_RUN/dump_restore.log"
  echo "== [PostgreSQL $MMV_PG] the standard restore into a new cluster (scripts/restore_test.sh)"
  "$here/restore_test.sh" || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] a reader's worst input: memory, time, the catalog lock (scripts/limits_test.sh)"
  "$here/limits_test.sh" || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] extension upgrades (scripts/upgrade_test.sh)"
  "$here/upgrade_test.sh" || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] no backend died so far (server log)"
  if grep -E "terminated by signal|was terminated by exception" "$MMV_RUN/postgres.log"; then
    echo "a backend crashed"; failed=$((failed + 1))
  fi
  echo "== [PostgreSQL $MMV_PG] crash safety (SIGKILL mid-DDL)"
  "$here/crash_test.sh" || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] a hot standby and its promotion (scripts/standby_test.sh)"
  "$here/standby_test.sh" || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] TLS to a TLS-only cluster, every sslmode (scripts/tls_test.sh)"
  "$here/tls_test.sh" || failed=$((failed + 1))
  echo "== [PostgreSQL $MMV_PG] the Lance spec's generated Python client (scripts/lance_python_test.sh)"
  "$here/lance_python_test.sh" || failed=$((failed + 1))
  if [ $failed -ne 0 ]; then
    for d in "$out"/regress "$out"/isolation; do
      [ -f "$d/regression.diffs" ] && cat "$d/regression.diffs"
    done
  fi
  "$here/cluster.sh" stop
  trap - EXIT
  echo "$failed" >"$MMV_STATE/failed-pg$MMV_PG"
}

versions="${MMV_TEST_PG:-15 16 17 18}"
for v in $versions; do
  # A run of the suites that aborts (a command outside a counted suite
  # failed) leaves this, so the version is reported as failed below.
  echo 1 >"$MMV_STATE/failed-pg$v"
  if ! (suites "$v"); then
    echo "PostgreSQL $v: the run of the suites aborted"
  fi
done

# The services' suites run once, against the first version given (their
# PostgreSQL side is the extension's, which the suites above cover on every
# version).
services_pg="${versions%% *}"
# One service suite against its own fresh cluster of $services_pg.
service_suite() (
  export MMV_PG="$services_pg"
  unset PG_CONFIG PG_BIN PGXS_DIR MMV_PORT
  source "$here/env.sh"
  "$here/cluster.sh" start
  trap '"$here/cluster.sh" stop' EXIT
  "$here/$1"
)
echo "== [PostgreSQL $services_pg] the maintenance daemon over a sample lake (scripts/lakehouse_test.sh)"
if service_suite lakehouse_test.sh; then lakehouse=passed; else lakehouse=failed; fi
echo "== [PostgreSQL $services_pg] the FlightSQL service with ADBC and pyarrow.flight (scripts/flight_test.sh)"
if service_suite flight_test.sh; then flight=passed; else flight=failed; fi

# pg_upgrade between two of the versions just built and installed (15's
# Debian build cannot be the old side: see "pg_upgrade" in docs/operations.md).
upgrade=skipped
if [[ " $versions " == *" 16 "* && " $versions " == *" 18 "* ]]; then
  echo "== pg_upgrade of a populated catalog, PostgreSQL 16 -> 18 (scripts/pg_upgrade_test.sh)"
  if "$here/pg_upgrade_test.sh" 16 18; then upgrade=passed; else upgrade=failed; fi
fi

# Seventeen suites per version: the unit tests, then the sixteen above.
status=0
for v in $versions; do
  failed=$(( $(cat "$MMV_STATE/failed-pg$v") + unit ))
  echo "PostgreSQL $v: suites: $((17 - failed)) passed, $failed failed"
  [ $failed -eq 0 ] || status=1
done
echo "pg_upgrade 16 -> 18: $upgrade"
[ "$upgrade" != failed ] || status=1
echo "maintenance daemon over a sample lake (PostgreSQL $services_pg): $lakehouse"
[ "$lakehouse" = passed ] || status=1
echo "FlightSQL service (PostgreSQL $services_pg): $flight"
[ "$flight" = passed ] || status=1
exit $status
