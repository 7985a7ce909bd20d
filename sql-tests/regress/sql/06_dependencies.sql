-- DROP of a view another definition reads is refused (2BP01), on every path.
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('log_stats')$$);
SELECT * FROM mmv_try($$DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'$$);
SELECT view_set_name, status FROM micromegas.mm_drop_view('daily');
SELECT view_set_name, status FROM micromegas.mm_drop_view('log_stats');
SELECT count(*) AS definitions FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats';
-- log_stats can be recreated from what the extension shipped.
SELECT view_set_name, status FROM micromegas.mm_create_view(micromegas._mm_shipped_log_stats());
-- A view that reads x3 only in a CTE it never uses still depends on it:
-- DataFusion plans every CTE, so x3 must exist and come earlier. Its reads
-- name x3, the group check applies, and x3 cannot be dropped under it.
SELECT view_set_name, status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW x3 WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 3000, time_column = 'time')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view($q$CREATE MATERIALIZED VIEW hides_x3 WITH (
  extract_query = 'WITH unused AS (SELECT * FROM x3) SELECT time, process_id FROM log_entries',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 2500, time_column = 'time')$q$)$$);
SELECT view_set_name, status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW hides_x3 WITH (
  extract_query = 'WITH unused AS (SELECT * FROM x3) SELECT time, process_id FROM log_entries',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT * FROM {source}', update_group = 4000, time_column = 'time')$$);
SELECT reads FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'hides_x3';
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('x3')$$);
SELECT view_set_name, status FROM micromegas.mm_drop_view('hides_x3');
SELECT view_set_name, status FROM micromegas.mm_drop_view('x3');
