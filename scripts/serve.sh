#!/usr/bin/env bash
# The REST endpoint against the throwaway cluster, in the foreground:
#   ./scripts/serve.sh            (after ./scripts/demo.sh, or any time: it
#                                  installs and starts what is missing)
# Creates two roles and a key file ($MMV_RUN/server-keys.json: an admin key
# and a reader key), prints curl examples, and serves on 127.0.0.1:2333
# (MMV_LISTEN to change). Ctrl-C stops it (gracefully).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
root="$(cd "$here/.." && pwd)"
if ! psql -X -q -d postgres -c "SELECT 1" >/dev/null 2>&1; then
  "$here/cluster.sh" install
  "$here/cluster.sh" start
fi
psql -X -q -d postgres -c "SELECT 1 FROM pg_extension WHERE extname = 'micromegas_views'" -A -t | grep -q 1 ||
  psql -X -q -d postgres -c "$MMV_INSTALL_SQL"
psql -X -q -d postgres <<'SQL'
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rest_admin') THEN CREATE ROLE rest_admin IN ROLE micromegas_admin; END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rest_reader') THEN CREATE ROLE rest_reader IN ROLE micromegas_reader; END IF;
END $$;
SQL
keys="$MMV_RUN/server-keys.json"
admin_key="admin-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
reader_key="reader-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
(umask 077; cat >"$keys" <<JSON
{"keys": [
  {"name": "demo-admin", "key": "$admin_key", "role": "rest_admin"},
  {"name": "demo-reader", "key": "$reader_key", "role": "rest_reader"}
]}
JSON
)
listen="${MMV_LISTEN:-127.0.0.1:2333}"
cd "$root"
cargo build -q -p micromegas_views_server
cat <<TXT
micromegas-views-server on http://$listen (keys in $keys)
  curl -s http://$listen/healthz
  curl -s -H "x-api-key: $reader_key" "http://$listen/v1/namespace/micromegas/materialized_view/list"
  curl -s -X POST -H "Authorization: Bearer $reader_key" http://$listen/v1/table/log_stats/describe -d '{}'
  curl -s -X POST -H "Authorization: Bearer $admin_key" http://$listen/v1/materialized_view/log_stats/refresh -d '{}'
TXT
exec "$CARGO_TARGET_DIR/debug/micromegas-views-server" --listen "$listen" --keys "$keys" \
  --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=postgres"
