-- Definition history: every committed create, replace, drop and restore
-- is one row (the definition after the change; before it, for a drop),
-- with the commit's catalog version and who made it; describe, restore
-- (validated like any write), prune, privileges.
SET TimeZone = 'UTC';
\set blocks_count '$c$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''$c$'
SET micromegas_views.actor = 'ana@example.com';
SELECT version AS v1 FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW h_v WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count')) \gset
SET micromegas_views.actor = 'bo@example.com';
SELECT version AS v2 FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW h_v WITH (
  extract_query = 'SELECT time, process_id, level, target FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level, target FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count')) \gset
SELECT version AS v3 FROM micromegas.mm_drop_view('h_v') \gset
RESET micromegas_views.actor;

-- 1. The versions: what mm_create_view and mm_drop_view returned.
SELECT version - :v1 AS since_v1, operation, updated_by, updated_by_role = current_user AS by_me,
       update_group, load_status, left(definition_sql, 45) AS definition
  FROM micromegas.mm_view_history('h_v');
SELECT count(*) FILTER (WHERE version IN (:v1, :v2, :v3)) AS versions_match FROM micromegas.mm_view_history('h_v');

-- 2. Describe: a past version with its schema; the current one is gone.
SELECT view_set_name, version - :v1 AS since_v1, operation, current,
       regexp_replace(schema, ':[^\n]*', '', 'g') AS columns
  FROM micromegas.mm_describe_view('h_v', :v1);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_describe_view('h_v')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_describe_view('h_v', 999999999)$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_describe_view('never_was')$$);

-- 3. Restore: a dropped view comes back as it was (a CREATE), then an
-- older version replaces it (a CREATE OR REPLACE); both are recorded.
SELECT view_set_name, status, version > :v3 AS newer FROM micromegas.mm_restore_view('h_v', :v2);
SELECT status FROM micromegas.mm_restore_view('h_v', :v1);
SELECT version - :v1 AS since_v1, operation, current,
       regexp_replace(schema, ':[^\n]*', '', 'g') AS columns
  FROM micromegas.mm_describe_view('h_v');
SELECT operation, left(definition_sql, 45) AS definition FROM micromegas.mm_view_history('h_v');
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_restore_view('h_v', 1)$$);

-- 4. A version that no longer validates is refused, and nothing changes:
-- h_reader once read h_src, which is gone now.
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW h_src WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT version AS r1 FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW h_reader WITH (
  extract_query = 'SELECT time, process_id FROM h_src',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id FROM {source}',
  update_group = 5000, time_column = 'time')$$, :'blocks_count')) \gset
SELECT status FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW h_reader WITH (
  extract_query = 'SELECT time, process_id FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id FROM {source}',
  update_group = 5000, time_column = 'time')$$, :'blocks_count'));
SELECT status FROM micromegas.mm_drop_view('h_src');
SELECT micromegas.mm_catalog_version() AS before_v, count(*) AS before_rows
  FROM micromegas.lakehouse_view_set_definition_history \gset
SELECT sqlstate, message FROM mmv_try(format($$SELECT * FROM micromegas.mm_restore_view('h_reader', %s)$$, :r1));
SELECT micromegas.mm_catalog_version() = :before_v AS version_kept,
       (SELECT count(*) FROM micromegas.lakehouse_view_set_definition_history) = :before_rows AS history_kept,
       (SELECT extract_query FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'h_reader') AS still;

-- 5. Re-checks the extension makes are recorded as such: a replace of a
-- source that changes its schema rewrites the dependent's stored schema.
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW h_base WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW h_all WITH (
  extract_query = 'SELECT * FROM h_base',
  count_src_query = %s, merge_partitions_query = 'SELECT * FROM {source}',
  update_group = 5000, time_column = 'time')$$, :'blocks_count'));
SELECT status FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW h_base WITH (
  extract_query = 'SELECT time, process_id, level, target FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level, target FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT operation FROM micromegas.mm_view_history('h_all');
-- A direct DELETE is a drop like any other.
DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'h_all';
SELECT operation FROM micromegas.mm_view_history('h_all');

-- 6. Who may: readers read the history; only admins restore and prune;
-- nobody writes the table directly.
CREATE ROLE mmv_hist_reader IN ROLE micromegas_reader;
CREATE ROLE mmv_hist_admin IN ROLE micromegas_admin;
SET ROLE mmv_hist_reader;
SELECT count(*) > 0 AS reader_sees FROM micromegas.mm_view_history('h_v');
SELECT count(*) AS reader_describes FROM micromegas.mm_describe_view('h_v');
SELECT sqlstate FROM mmv_try($$SELECT * FROM micromegas.mm_restore_view('h_v', 1)$$);
RESET ROLE;
SET ROLE mmv_hist_admin;
SELECT sqlstate FROM mmv_try($$DELETE FROM micromegas.lakehouse_view_set_definition_history$$);
SELECT sqlstate FROM mmv_try($$UPDATE micromegas.lakehouse_view_set_definition_history SET updated_by = 'x'$$);
RESET ROLE;
DROP ROLE mmv_hist_reader, mmv_hist_admin;
SELECT * FROM mmv_try('TRUNCATE micromegas.lakehouse_view_set_definition_history');

-- 7. Prune: versions older than the interval go, each view keeps its latest.
SELECT micromegas.mm_prune_view_history('1 hour') AS pruned_recent;
SELECT micromegas.mm_prune_view_history('0') > 0 AS pruned;
SELECT view_set_name, count(*) FROM micromegas.lakehouse_view_set_definition_history
 WHERE view_set_name LIKE 'h\_%' GROUP BY 1 ORDER BY 1;
SELECT * FROM mmv_try($$SELECT micromegas.mm_prune_view_history('-1 day')$$);

SELECT count(*) FROM micromegas.mm_drop_view('h_v');
SELECT count(*) FROM micromegas.mm_drop_view('h_reader');
SELECT count(*) FROM micromegas.mm_drop_view('h_base');
