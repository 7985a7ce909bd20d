#!/usr/bin/env bash
# Sets up, builds, installs the extension into a throwaway cluster it starts
# itself, and runs a short demo: create, list, replace, drop, with a listener
# printing the notifications. The cluster is stopped at the end.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/setup.sh"
source "$here/env.sh"
"$here/cluster.sh" install
"$here/cluster.sh" start
trap '"$here/cluster.sh" stop' EXIT
psql -q -X -d postgres -c "$MMV_INSTALL_SQL"

# A listener in the background prints every notification it receives.
listener_out="$MMV_RUN/listener.out"
( { echo "LISTEN micromegas_view_definitions;"; sleep 4; echo "SELECT 1;"; } |
    psql -X -d postgres -q -A -t >"$listener_out" 2>&1 ) &
listener=$!
sleep 0.5

run() { echo; echo "postgres=# $1"; psql -X -d postgres -c "$1"; }
run "SELECT view_set_name, update_group, updated_by FROM micromegas.list_view_set_definitions();"
run "SELECT * FROM micromegas.mm_create_view(\$\$
CREATE MATERIALIZED VIEW error_rate WITH (
  extract_query = \$q\$
    SELECT date_bin('1 hour', time) AS time_bin, process_id,
           sum(CASE WHEN level <= 2 THEN 1 ELSE 0 END) AS errors, count(*) AS total
      FROM log_entries
     WHERE insert_time >= '{begin}' AND insert_time < '{end}'
     GROUP BY 1, 2 \$q\$,
  count_src_query = \$q\$
    SELECT sum(nb_objects) AS count FROM blocks
     WHERE insert_time >= '{begin}' AND insert_time < '{end}' \$q\$,
  merge_partitions_query = \$q\$
    SELECT time_bin, process_id, sum(errors) AS errors, sum(total) AS total
      FROM {source} GROUP BY 1, 2 \$q\$,
  update_group = 3000,
  time_column = 'time_bin',
  merge_sort_order = 'time_bin, process_id'
)\$\$);"
run "SELECT * FROM micromegas.mm_create_view(\$\$
CREATE MATERIALIZED VIEW broken WITH (
  extract_query = 'SELECT now() AS time_bin, process_id FROM log_entries',
  count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT time_bin, process_id FROM {source}',
  update_group = 3000, time_column = 'time_bin')\$\$);" || true
run "SELECT view_set_name, update_group, reads, encode(schema_hash, 'hex') AS schema_hash FROM micromegas.lakehouse_view_set_definitions ORDER BY 1;"
run "SELECT * FROM micromegas.mm_create_view(name => 'error_rate', or_replace => true,
  extract_query => \$q\$SELECT date_bin('1 day', time) AS time_bin, process_id, sum(CASE WHEN level <= 2 THEN 1 ELSE 0 END) AS errors, count(*) AS total FROM log_entries GROUP BY 1, 2\$q\$,
  count_src_query => \$q\$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'\$q\$,
  merge_partitions_query => 'SELECT time_bin, process_id, sum(errors) AS errors, sum(total) AS total FROM {source} GROUP BY 1, 2',
  update_group => 3000, time_column => 'time_bin');"
run "SELECT * FROM micromegas.mm_drop_view('DROP MATERIALIZED VIEW error_rate');"
run "SELECT micromegas.mm_catalog_version();"

wait "$listener" || true
echo
echo "-- notifications received by a second connection (LISTEN micromegas_view_definitions):"
cat "$listener_out"
