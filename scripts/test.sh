#!/usr/bin/env bash
# Runs every test: the core's unit tests, the #[pg_test] suite, the pg_regress
# suite, the isolation specs, the client's integration tests, a short
# randomized DDL stress run, a pg_dump/pg_restore round trip, the extension
# upgrade test, a check that no backend died, and a SIGKILL crash test. This is the README's test command and what
# .ci/run calls.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
"$here/setup.sh"
source "$here/env.sh"
cd "$root"

echo "== core unit tests (cargo test)"
cargo test -p micromegas_views_core

echo "== #[pg_test] suite (cargo pgrx test pg15)"
mkdir -p "$MMV_STATE/pgrx-test-data"
[ "$(id -u)" = 0 ] && chown postgres "$MMV_STATE/pgrx-test-data"
cargo pgrx test pg15 --runas postgres --pgdata "$MMV_STATE/pgrx-test-data"

echo "== SQL suites against a throwaway cluster"
"$here/cluster.sh" install
"$here/cluster.sh" start
trap '"$here/cluster.sh" stop' EXIT
out="$MMV_STATE/results"
rm -rf "$out" && mkdir -p "$out" && chmod 777 "$out"
# The suites run as the postgres OS user, which may not be able to read the
# clone (e.g. under /root): they run from a world-readable copy.
suite="$MMV_STATE/suite"
rm -rf "$suite" && cp -r pgrx-tests "$suite" && chmod -R a+rX "$suite"
cd "$suite"
failed=0
regress_tests=$(cd regress/sql && ls *.sql | sed 's/\.sql$//' | sort)
as_postgres "$PGXS_DIR/src/test/regress/pg_regress" \
  --inputdir=regress --outputdir="$out/regress" \
  --host="$PGHOST" --port="$PGPORT" --user=postgres --dbname=mmv_regress \
  $regress_tests || failed=$((failed + 1))
isolation_tests=$(cd isolation/specs && ls *.spec | sed 's/\.spec$//' | sort)
as_postgres "$PGXS_DIR/src/test/isolation/pg_isolation_regress" \
  --inputdir=isolation --outputdir="$out/isolation" \
  --host="$PGHOST" --port="$PGPORT" --user=postgres --dbname=mmv_isolation \
  --load-extension=micromegas_views \
  $isolation_tests || failed=$((failed + 1))
echo "== client and CLI integration tests (cargo test -p micromegas_views_client -p micromegas_views_cli)"
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS mmv_client" -c "CREATE DATABASE mmv_client"
psql -X -q -d mmv_client -c "CREATE EXTENSION micromegas_views"
(cd "$root" && MMV_TEST_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=mmv_client" \
  cargo test -p micromegas_views_client -p micromegas_views_cli \
    --features micromegas_views_client/integration,micromegas_views_cli/integration) || failed=$((failed + 1))
echo "== randomized DDL stress (scripts/stress.sh 4 50)"
"$here/stress.sh" 4 50 || failed=$((failed + 1))
echo "== pg_dump / pg_restore round trip"
"$here/dump_restore_test.sh" >"$MMV_STATE/dump_restore.log" 2>&1 || { cat "$MMV_STATE/dump_restore.log"; failed=$((failed + 1)); }
tail -n 4 "$MMV_STATE/dump_restore.log"
echo "== extension upgrades (scripts/upgrade_test.sh)"
"$here/upgrade_test.sh" || failed=$((failed + 1))
echo "== no backend died so far (server log)"
if grep -E "terminated by signal|was terminated by exception" "$MMV_STATE/postgres.log"; then
  echo "a backend crashed"; failed=$((failed + 1))
fi
echo "== crash safety (SIGKILL mid-DDL)"
"$here/crash_test.sh" || failed=$((failed + 1))
# cargo test and cargo pgrx test stop the script on failure (set -e), so two
# suites have passed when we get here.
if [ $failed -ne 0 ]; then
  for d in "$out"/regress "$out"/isolation; do
    [ -f "$d/regression.diffs" ] && cat "$d/regression.diffs"
  done
  echo "suites: $((11 - failed)) passed, $failed failed"
  exit 1
fi
echo "suites: 11 passed, 0 failed"
