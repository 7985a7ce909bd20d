-- On the hot standby: every write is refused with 25006 and a message that
-- names the operation and says the catalog is read-only there; nothing
-- half-done, no internal error. (Direct table writes get Postgres' own
-- 25006, "cannot execute INSERT in a read-only transaction".)
SET TimeZone = 'UTC';
SELECT pg_is_in_recovery();
SELECT label, sqlstate, message FROM (VALUES
  ('create',            $$SELECT micromegas.mm_create_view(st_view('st_c', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}', 4500))$$),
  ('create (named)',    $$SELECT micromegas.mm_create_view(name => 'st_c', extract_query => 'SELECT time, process_id FROM log_entries', count_src_query => 'SELECT 1 AS count', merge_partitions_query => 'SELECT * FROM {source}', update_group => 4500)$$),
  ('drop',              $$SELECT micromegas.mm_drop_view('st_b'::micromegas.view_set_name)$$),
  ('drop (statement)',  $$SELECT micromegas.mm_drop_view('DROP MATERIALIZED VIEW st_b')$$),
  ('restore',           $$SELECT micromegas.mm_restore_view('st_a', 1)$$),
  ('prune history',     $$SELECT micromegas.mm_prune_view_history('0 seconds')$$),
  ('register built-in', $$SELECT micromegas.mm_register_builtin_view_set('x_builtin', '{"fields": []}', NULL, 'raw', false, false)$$),
  ('retire',            $$SELECT micromegas.retire_partitions('st_a', 'global', '2024-01-01', '2024-01-02')$$),
  ('retire by metadata',$$SELECT micromegas.retire_partition_by_metadata('st_a', 'global', '2024-01-01', '2024-01-02', '\x01')$$),
  ('retire by file',    $$SELECT micromegas.retire_partition_by_file('s3://bucket/st_a/1')$$),
  ('retire incompatible',$$SELECT micromegas.retire_incompatible_partitions('st_a')$$),
  ('write partition',   $$SELECT micromegas.mm_write_partition('st_a', 'global', '2024-01-05', '2024-01-06', NULL, NULL, 's3://x', 1, '\x01', NULL, 1)$$),
  ('replace partitions',$$SELECT micromegas.mm_replace_partitions('st_a', 'global', '2024-01-01', '2024-01-02', '{}')$$),
  ('expired files',     $$SELECT micromegas.mm_expired_files()$$),
  ('refresh',           $$SELECT micromegas.mm_refresh_view('st_b')$$),
  ('regenerate',        $$SELECT micromegas.regenerate_partitions('st_a', '2024-01-01', '2024-01-02', 1)$$),
  ('materialize',       $$SELECT micromegas.materialize_partitions('st_a', '2024-01-01', '2024-01-02', 1)$$),
  ('claim job',         $$SELECT micromegas.mm_claim_job('worker-1')$$),
  ('claim jobs',        $$SELECT micromegas.mm_claim_jobs('worker-1', 4)$$),
  ('heartbeat',         $$SELECT micromegas.mm_heartbeat_job(gen_random_uuid(), gen_random_uuid())$$),
  ('finish',            $$SELECT micromegas.mm_finish_job(gen_random_uuid(), gen_random_uuid(), true, NULL, NULL, NULL)$$),
  ('cancel',            $$SELECT micromegas.mm_cancel_job(gen_random_uuid())$$),
  ('deny',              $$SELECT micromegas.deny_queries('client = ''x''', 'why')$$),
  ('remove denial',     $$SELECT micromegas.remove_query_denial('r1')$$),
  ('record hits',       $$SELECT micromegas.mm_record_query_denial_hits('{}', now())$$),
  ('grant',             $$SELECT micromegas.mm_grant_audience('ops', 'read', 'group:x')$$),
  ('revoke',            $$SELECT micromegas.mm_revoke_audience('ops', 'read', 'group:sre')$$),
  ('direct insert',     $$INSERT INTO micromegas.lakehouse_view_set_definitions (definition_sql) VALUES ('x')$$)
) AS c(label, statement), LATERAL mmv_try(c.statement) t
ORDER BY 1;
-- Nothing changed: what the primary has is still all there is.
SELECT count(*) AS definitions FROM micromegas.lakehouse_view_set_definitions;
