-- REPLACE never breaks a dependent; update_group order holds on every path.
\set blocks_count '$c$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''$c$'
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW r_a WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW r_b WITH (
  extract_query = 'SELECT time, process_id, level FROM r_a WHERE level < 3',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 5000, time_column = 'time')$$, :'blocks_count'));
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW r_c WITH (
  extract_query = 'SELECT * FROM r_b',
  count_src_query = %s, merge_partitions_query = 'SELECT * FROM {source}',
  update_group = 6000, time_column = 'time')$$, :'blocks_count'));

-- A content-only replace (same schema) with dependents goes through.
SELECT status FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW r_a WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries WHERE level < 5',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
-- A replace that adds a column goes through, and the transitive dependent
-- that selects * gets its new schema.
SELECT micromegas.mm_catalog_version() AS v \gset
SELECT status FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW r_b WITH (
  extract_query = 'SELECT time, process_id, level, level + 1 AS next_level FROM r_a WHERE level < 3',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level, next_level FROM {source}',
  update_group = 5000, time_column = 'time')$$, :'blocks_count'));
SELECT view_set_name, reads, schema_json->'fields'->3->>'name' AS fourth_column
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'r\_%' ORDER BY 1;
SELECT micromegas.mm_catalog_version() - :v AS versions_moved;

-- A replace that drops a column a dependent reads is refused, naming it.
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view(%L)$f$, format($$CREATE OR REPLACE MATERIALIZED VIEW r_a WITH (
  extract_query = 'SELECT time, process_id FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count')));
-- A type change that the dependents carry through still validates: accepted,
-- and their stored schemas follow.
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view(%L)$f$, format($$CREATE OR REPLACE MATERIALIZED VIEW r_a WITH (
  extract_query = 'SELECT time, process_id, arrow_cast(level, ''Int64'') AS level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count')));
SELECT view_set_name, schema_json->'fields'->2->>'type' AS level_type
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'r\_%' ORDER BY 1;
-- Raising a group to or past a dependent's, by REPLACE or by a direct UPDATE.
SELECT * FROM mmv_try($$UPDATE micromegas.lakehouse_view_set_definitions SET update_group = 5000 WHERE view_set_name = 'r_a'$$);
SELECT * FROM mmv_try($$UPDATE micromegas.lakehouse_view_set_definitions SET update_group = 7000 WHERE view_set_name = 'r_a'$$);
UPDATE micromegas.lakehouse_view_set_definitions SET update_group = 4500 WHERE view_set_name = 'r_a';
SELECT view_set_name, update_group FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'r\_%' ORDER BY 1;

-- A built-in schema change wins: the service's code is the truth. The broken
-- definition and what reads it are marked failed, then cleared once valid.
SELECT view_set_name FROM micromegas.mm_register_builtin_view_set('log_entries',
  (SELECT jsonb_set(schema_json, '{fields}', (SELECT jsonb_agg(f) FROM jsonb_array_elements(schema_json->'fields') f WHERE f->>'name' <> 'level'))::text
     FROM micromegas.builtin_view_sets WHERE view_set_name = 'log_entries'), 2000);
SELECT view_set_name, load_status, load_error FROM micromegas.list_view_set_definitions() WHERE view_set_name LIKE 'r\_%' OR view_set_name = 'log_stats' ORDER BY 1;
-- What the services and the daemon load leaves failed definitions out.
SELECT (SELECT count(*) FROM micromegas.list_view_sets() WHERE view_set_name LIKE 'r\_%' OR view_set_name = 'log_stats') AS in_list_view_sets,
       (SELECT count(*) FROM micromegas.mm_view_set_snapshot() WHERE view_set_name LIKE 'r\_%' OR view_set_name = 'log_stats') AS in_snapshot;
SELECT view_set_name FROM micromegas.mm_register_builtin_view_set('log_entries',
  (SELECT jsonb_set(schema_json, '{fields}', (schema_json->'fields') || '[{"name": "level", "type": "Int32"}]')::text
     FROM micromegas.builtin_view_sets WHERE view_set_name = 'log_entries'), 2000);
SELECT view_set_name, load_status, load_error FROM micromegas.list_view_set_definitions() WHERE view_set_name LIKE 'r\_%' OR view_set_name = 'log_stats' ORDER BY 1;
-- ...and has them again once they load.
SELECT (SELECT count(*) FROM micromegas.list_view_sets() WHERE view_set_name LIKE 'r\_%' OR view_set_name = 'log_stats') AS in_list_view_sets,
       (SELECT count(*) FROM micromegas.mm_view_set_snapshot() WHERE view_set_name LIKE 'r\_%' OR view_set_name = 'log_stats') AS in_snapshot;
-- A failed definition can be re-validated by rewriting it: still broken is an error.
SELECT view_set_name FROM micromegas.mm_register_builtin_view_set('log_entries',
  (SELECT jsonb_set(schema_json, '{fields}', (SELECT jsonb_agg(f) FROM jsonb_array_elements(schema_json->'fields') f WHERE f->>'name' <> 'level'))::text
     FROM micromegas.builtin_view_sets WHERE view_set_name = 'log_entries'), 2000);
SELECT * FROM mmv_try($$UPDATE micromegas.lakehouse_view_set_definitions SET definition_sql = definition_sql WHERE view_set_name = 'r_a'$$);
SELECT view_set_name FROM micromegas.mm_register_builtin_view_set('log_entries',
  (SELECT jsonb_set(schema_json, '{fields}', (schema_json->'fields') || '[{"name": "level", "type": "Int32"}]')::text
     FROM micromegas.builtin_view_sets WHERE view_set_name = 'log_entries'), 2000);
SELECT view_set_name, load_status FROM micromegas.list_view_set_definitions() WHERE view_set_name LIKE 'r\_%' ORDER BY 1;

SELECT status FROM micromegas.mm_drop_view('r_c');
SELECT status FROM micromegas.mm_drop_view('r_b');
SELECT status FROM micromegas.mm_drop_view('r_a');
