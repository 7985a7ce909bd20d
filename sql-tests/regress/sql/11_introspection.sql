-- What the services read: list_view_sets, the ordered snapshot, dependency
-- edges, the materialization order, and the dry run.
\set blocks_count '$c$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''$c$'
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW i_daily WITH (
  extract_query = $q$SELECT date_bin('1 day', time_bin) AS day, process_id, sum(count) AS count FROM log_stats GROUP BY 1, 2$q$,
  count_src_query = %s, merge_partitions_query = 'SELECT day, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2',
  update_group = 4000, time_column = 'day')$$, :'blocks_count'));

SELECT view_set_name, length(current_schema_hash) AS hash_bytes, has_view_maker, global_instance_available, update_group, origin
  FROM micromegas.list_view_sets();
SELECT schema FROM micromegas.list_view_sets() WHERE view_set_name = 'i_daily';
SELECT catalog_version = micromegas.mm_catalog_version() AS consistent, view_set_name, update_group, reads,
       view_options->>'min_time_column' AS time_column, length(schema_ipc) > 0 AS has_schema
  FROM micromegas.mm_view_set_snapshot();
SELECT * FROM micromegas.list_view_dependencies();
SELECT * FROM micromegas.mm_materialization_order();

-- Any role may list the view sets; the snapshot is for admins.
CREATE ROLE mmv_test_reader LOGIN;
SET ROLE mmv_test_reader;
SELECT count(*) > 0 AS listed FROM micromegas.list_view_sets();
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_view_set_snapshot()$$);
RESET ROLE;
DROP ROLE mmv_test_reader;

-- The dry run writes nothing and sends nothing.
SELECT micromegas.mm_catalog_version() AS v \gset
SELECT view_set_name, would_be, schema_hash IS NOT NULL AS has_hash, reads, dependents, materialization_position, problems
  FROM micromegas.mm_explain_view(format($$CREATE MATERIALIZED VIEW i_weekly WITH (
  extract_query = $q$SELECT date_bin('7 days', day) AS week, process_id, sum(count) AS count FROM i_daily GROUP BY 1, 2$q$,
  count_src_query = %s, merge_partitions_query = 'SELECT week, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2',
  update_group = 5000, time_column = 'week')$$, :'blocks_count'));
SELECT schema FROM micromegas.mm_explain_view(format($$CREATE MATERIALIZED VIEW i_weekly WITH (
  extract_query = $q$SELECT date_bin('7 days', day) AS week, process_id, sum(count) AS count FROM i_daily GROUP BY 1, 2$q$,
  count_src_query = %s, merge_partitions_query = 'SELECT week, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2',
  update_group = 5000, time_column = 'week')$$, :'blocks_count'));
SELECT view_set_name, would_be, dependents, problems FROM micromegas.mm_explain_view(format($$CREATE OR REPLACE MATERIALIZED VIEW log_stats WITH (
  extract_query = 'SELECT time AS time_bin, process_id FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time_bin, process_id FROM {source}',
  update_group = 3000, time_column = 'time_bin')$$, :'blocks_count'));
SELECT view_set_name, would_be, problems FROM micromegas.mm_explain_view('CREATE MATERIALIZED VIEW x WITH (oops)');
SELECT view_set_name, would_be, problems FROM micromegas.mm_explain_view(micromegas._mm_shipped_log_stats());
SELECT micromegas.mm_catalog_version() = :v AS nothing_written,
       (SELECT count(*) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'i_weekly') AS weekly_rows;
SELECT status FROM micromegas.mm_drop_view('i_daily');
