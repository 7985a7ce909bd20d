-- Every reader function, run on the primary and on its hot standby against
-- the same expected output: the standby answers exactly what the primary
-- answers (mm_explain_view included, whose dry run writes nothing there).
SET TimeZone = 'UTC';
SELECT micromegas.mm_catalog_version() > 0 AS has_version;
SELECT view_set_name, update_group, load_status FROM micromegas.list_view_set_definitions() ORDER BY 1;
SELECT view_set_name, update_group FROM micromegas.list_view_sets() WHERE view_set_name LIKE 'st\_%' ORDER BY 1;
SELECT view_set_name, update_group FROM micromegas.mm_view_set_snapshot() WHERE view_set_name LIKE 'st\_%' ORDER BY 1;
SELECT view_set_name, update_group, origin FROM micromegas.mm_materialization_order() WHERE view_set_name LIKE 'st\_%' ORDER BY position;
SELECT * FROM micromegas.list_view_dependencies() WHERE view_set_name LIKE 'st\_%' ORDER BY 1, 2;
SELECT * FROM micromegas.mm_catalog_violations();
SELECT operation, count(*) FROM micromegas.mm_view_history('st_a') GROUP BY 1 ORDER BY 1;
SELECT view_set_name, load_status FROM micromegas.mm_describe_view('st_a');
SELECT count(*) AS privilege_rows FROM micromegas.mm_privilege_matrix();
-- the dry runs: a new view, a replace its dependent accepts, one it refuses
SELECT view_set_name, would_be, dependents, problems FROM micromegas.mm_explain_view(st_view('st_c',
  'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}', 4500));
SELECT view_set_name, would_be, dependents, problems FROM micromegas.mm_explain_view(st_view('st_a',
  'SELECT time, process_id, CAST(level AS bigint) AS level FROM log_entries', 'SELECT time, process_id, level FROM {source}', 4000, true));
SELECT view_set_name, would_be, dependents, problems FROM micromegas.mm_explain_view(st_view('st_a',
  'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}', 4000, true));
SELECT view_set_name, would_be, problems FROM micromegas.mm_explain_view('CREATE MATERIALIZED VIEW st_a WITH (oops)');
-- partitions
SELECT view_set_name, view_instance_id, begin_insert_time, file_path, num_rows FROM micromegas.list_partitions('st_a') ORDER BY begin_insert_time;
SELECT view_set_name, file_path FROM micromegas.list_incompatible_partitions('st_a');
SELECT count(*) > 0 AS planned FROM micromegas.mm_plan_regeneration('st_a', '2024-01-01', '2024-01-03', '1 day');
-- jobs
SELECT kind, view_set_name, state FROM micromegas.list_jobs() ORDER BY created_at;
SELECT kind, state FROM micromegas.mm_job((SELECT job_id FROM micromegas.jobs WHERE view_set_name = 'st_b' LIMIT 1));
-- deny list and grants
SELECT micromegas.mm_sql_hash('SELECT 1');
SELECT count(*) AS versions FROM micromegas.mm_access_versions();
SELECT match_expr, reason FROM micromegas.list_query_denials();
SELECT reason FROM micromegas.mm_match_query_denial(sql_hash => '9f2c41ab73de0155');
SELECT reason FROM micromegas.mm_match_query_denial_context('{"sql_hash": "9f2c41ab73de0155"}');
SELECT reason, match_expr FROM micromegas.mm_query_deny_list_snapshot();
SELECT audience, axis, selector FROM micromegas.list_audience_grants() ORDER BY 1, 2, 3;
SELECT count(*) > 0 AS grants FROM micromegas.mm_audience_grants_snapshot();
