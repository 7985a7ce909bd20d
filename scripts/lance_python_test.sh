#!/usr/bin/env bash
# The REST server as the Lance Namespace spec's generated Python client sees
# it: lance-namespace-urllib3-client (pinned below) in a virtualenv made in
# the state directory, walking create -> describe -> list -> refresh -> drop
# (scripts/lance/python_walk.py) against the server binary, started on the
# running test cluster with a key file.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
root="$(cd "$here/.." && pwd)"
client_version="0.13.0"
venv="$MMV_STATE/venv-lance-$client_version"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import lance_namespace_urllib3_client" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "lance-namespace-urllib3-client==$client_version"
fi
db=mmv_python
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -d "$db" -c "$MMV_INSTALL_SQL"
psql -X -q -d "$db" -c "DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mmv_python_admin') THEN
    CREATE ROLE mmv_python_admin IN ROLE micromegas_admin; END IF; END \$\$;"
# The schema the walk's view produces, as base64 Arrow IPC: what the same
# queries give, asked of the extension.
schema_ipc=$(psql -X -A -t -q -d "$db" <<'SQL'
BEGIN;
SELECT 1 FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW py_probe WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$) \g /dev/null
SELECT schema_ipc FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'py_probe';
ROLLBACK;
SQL
)
key="python-walk-key-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
keys="$MMV_RUN/python-keys.json"
printf '{"keys": [{"name": "python-walk", "key": "%s", "role": "mmv_python_admin"}]}\n' "$key" >"$keys"
chmod 600 "$keys"
(cd "$root" && cargo build -q -p micromegas_views_server)
port=$((MMV_PORT + 300))
"$CARGO_TARGET_DIR/debug/micromegas-views-server" --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=$db" \
  --keys "$keys" --listen "127.0.0.1:$port" >"$MMV_RUN/python-server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
"$venv/bin/python" "$root/scripts/lance/python_walk.py" "http://127.0.0.1:$port" "$key" "$schema_ipc"
if grep -q "$key" "$MMV_RUN/python-server.log"; then
  echo "the server logged the API key"; exit 1
fi
