-- What 0.1.4 let a hostile admin, a careless service or a curious reader do,
-- each replayed: every one is now refused, or the extension computes the
-- value itself.
SET TimeZone = 'UTC';
\set blocks_count '$c$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''$c$'
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW t_v WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT encode(schema_hash, 'hex') AS h FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 't_v' \gset
CREATE ROLE mmv_trust_admin IN ROLE micromegas_admin;
CREATE ROLE mmv_trust_reader IN ROLE micromegas_reader;
GRANT CREATE ON SCHEMA public TO mmv_trust_admin;

-- 1. An admin holds none of the service's functions: it cannot write a
-- partition naming an arbitrary object (to have it queued for deletion),
-- drain the file queue, or claim and finish jobs as a made-up worker.
SET ROLE mmv_trust_admin;
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas.mm_write_partition('t_v', 'global', '2024-01-01', '2024-01-02',
  NULL, NULL, 's3://telemetry-bucket/blobs/raw/x', 1, '\x01', NULL, 1)$$);
SELECT sqlstate, message FROM mmv_try($$INSERT INTO micromegas.lakehouse_partitions (view_set_name, view_instance_id,
  begin_insert_time, end_insert_time, file_path, file_schema_hash, num_rows) VALUES ('t_v', 'global', '2024-01-01', '2024-01-02', 's3://x', '\x01', 1)$$);
SELECT sqlstate, message FROM mmv_try($$SELECT * FROM micromegas.mm_expired_files()$$);
SELECT sqlstate, message FROM mmv_try($$SELECT * FROM micromegas.mm_claim_job('made-up')$$);
SELECT sqlstate, message FROM mmv_try($$DELETE FROM micromegas.temporary_files$$);
RESET ROLE;

-- 2. No live file is ever queued or handed out for deletion.
SET micromegas_views.file_retention = 0;
CREATE FUNCTION mmv_tpart(instance text, from_h int, to_h int, path text)
RETURNS micromegas.lakehouse_partitions LANGUAGE sql AS $$
  SELECT ROW('t_v', instance, '2024-01-01'::timestamptz + from_h * interval '1 hour',
             '2024-01-01'::timestamptz + to_h * interval '1 hour', NULL, NULL, now(), path, 7,
             decode(current_setting('mmv.h'), 'hex'), NULL, 3, 1, NULL, NULL)::micromegas.lakehouse_partitions
$$;
SELECT set_config('mmv.h', :'h', false) IS NOT NULL AS hash_set;
-- Two partitions (two instances) share a file: retiring one queues nothing;
-- retiring the other queues it once.
INSERT INTO micromegas.lakehouse_partitions SELECT (mmv_tpart('global', 0, 1, 's3://b/shared')).*;
INSERT INTO micromegas.lakehouse_partitions SELECT (mmv_tpart('proc-1', 0, 1, 's3://b/shared')).*;
SELECT count(*) FROM micromegas.retire_partitions('t_v', 'global', '2024-01-01', '2024-01-02');
SELECT count(*) AS queued_while_shared FROM micromegas.temporary_files WHERE file_path = 's3://b/shared';
SELECT count(*) FROM micromegas.retire_partitions('t_v', 'proc-1', '2024-01-01', '2024-01-02');
SELECT count(*) AS queued_when_unused FROM micromegas.temporary_files WHERE file_path = 's3://b/shared';
DELETE FROM micromegas.temporary_files;
-- A swap that writes back a partition it retires queues nothing of it.
INSERT INTO micromegas.lakehouse_partitions SELECT (mmv_tpart('global', 2, 3, 's3://b/kept')).*;
INSERT INTO micromegas.lakehouse_partitions SELECT (mmv_tpart('global', 3, 4, 's3://b/replaced')).*;
SELECT count(*) FROM micromegas.mm_replace_partitions('t_v', 'global', '2024-01-01 02:00', '2024-01-01 04:00',
  ARRAY[mmv_tpart('global', 2, 3, 's3://b/kept'), mmv_tpart('global', 3, 4, 's3://b/new')]);
SELECT file_path FROM micromegas.temporary_files ORDER BY 1;
-- An UPDATE of a partition's file_path queues the old file (else it would never be deleted).
UPDATE micromegas.lakehouse_partitions SET file_path = 's3://b/new2' WHERE file_path = 's3://b/new';
UPDATE micromegas.lakehouse_partitions SET num_rows = 4 WHERE file_path = 's3://b/kept';
SELECT file_path FROM micromegas.temporary_files ORDER BY 1;
-- A queued file that a partition references again (written back after it
-- was queued, e.g. by a service's own INSERT) leaves the queue at once.
INSERT INTO micromegas.lakehouse_partitions SELECT (mmv_tpart('global', 5, 6, 's3://b/new')).*;
SELECT file_path FROM micromegas.temporary_files ORDER BY 1;
-- A service that queues a live file itself (upstream's writers insert into
-- temporary_files directly): the claim drops it from the queue and does not
-- hand it out; the others are handed out.
CREATE ROLE mmv_trust_service IN ROLE micromegas_service;
SET ROLE mmv_trust_service;
INSERT INTO micromegas.temporary_files VALUES ('s3://b/new', 7, now() - interval '1 hour');
SELECT file_path FROM micromegas.mm_expired_files() ORDER BY 1;
RESET ROLE;
DROP ROLE mmv_trust_service;
SELECT count(*) AS left_in_queue FROM micromegas.temporary_files;
-- The writers' locks do not grow with a statement: 20,000 partitions in
-- one INSERT, then one DELETE (what a DROP of a large view runs), hold 64
-- lock buckets at most (one lock per path ran out of shared memory).
INSERT INTO micromegas.lakehouse_partitions (view_set_name, view_instance_id, begin_insert_time, end_insert_time,
                                             file_path, file_size, file_schema_hash, num_rows)
SELECT 't_v', 'bulk', '2020-01-01'::timestamptz + i * interval '1 minute', '2020-01-01'::timestamptz + (i + 1) * interval '1 minute',
       's3://bulk/' || i, 1, decode(:'h', 'hex'), 1
  FROM generate_series(1, 20000) i;
DELETE FROM micromegas.lakehouse_partitions WHERE view_instance_id = 'bulk';
SELECT count(*) AS bulk_queued FROM micromegas.temporary_files WHERE file_path LIKE 's3://bulk/%';
RESET micromegas_views.file_retention;
DELETE FROM micromegas.lakehouse_partitions WHERE view_set_name = 't_v';
DELETE FROM micromegas.temporary_files;

-- 4. Nothing the caller controls marks a write as the extension's own.
-- a) An admin's own trigger (on a temp table) runs at trigger depth 2 and
-- writes forged derived columns and a failed mark: all are computed again.
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW t_reader WITH (
  extract_query = 'SELECT time, process_id FROM t_v',
  count_src_query = %s,
  merge_partitions_query = 'SELECT time, process_id FROM {source}',
  update_group = 5000, time_column = 'time')$$, :'blocks_count'));
SET ROLE mmv_trust_admin;
CREATE TEMP TABLE mmv_nudge (x int);
CREATE FUNCTION pg_temp.forge() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  UPDATE micromegas.lakehouse_view_set_definitions
     SET reads = '{}', schema_hash = '\xdeadbeef', load_status = 'failed', load_error = NULL,
         updated_by = 'forged', updated_at = '2000-01-01', created_at = '2000-01-01', updated_by_role = 'forged'
   WHERE view_set_name = 't_reader';
  RETURN NULL;
END
$f$;
CREATE TRIGGER forge AFTER INSERT ON mmv_nudge FOR EACH ROW EXECUTE FUNCTION pg_temp.forge();
INSERT INTO mmv_nudge VALUES (1);
SELECT reads, schema_hash = (SELECT h.schema_hash FROM micromegas.lakehouse_view_set_definition_history h
                              WHERE h.view_set_name = 't_reader' AND h.operation = 'create') AS hash_derived,
       load_status, updated_by <> 'forged' AS actor_derived, updated_at > '2000-01-01' AS time_derived,
       created_at > '2000-01-01' AS created_kept, updated_by_role = session_user AS role_derived
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 't_reader';
-- ... so the dependency guard still sees what t_reader reads.
SELECT sqlstate FROM mmv_try($$SELECT * FROM micromegas.mm_drop_view('t_v')$$);
SELECT operation FROM micromegas.mm_view_history('t_reader') ORDER BY version DESC LIMIT 1;
RESET ROLE;
-- b) A plain CREATE of an existing name is 42710, the shipped log_stats
-- included, whatever columns come with it.
SET ROLE mmv_trust_admin;
SELECT sqlstate, message FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions (definition_sql)
  SELECT replace(definition_sql, 'CREATE MATERIALIZED VIEW', 'CREATE MATERIALIZED VIEW')
    FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'$$);
SELECT sqlstate, message FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions
  SELECT (d).* FROM (SELECT d FROM micromegas.lakehouse_view_set_definitions d WHERE view_set_name = 'log_stats') x$$);
SELECT sqlstate, message FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions
  (view_set_name, definition_sql, extract_query, count_src_query, merge_partitions_query, update_group, view_options,
   schema_ipc, schema_json, schema_hash, reads, created_at, updated_at, updated_by, load_status, load_error)
  SELECT view_set_name, definition_sql, extract_query, count_src_query, merge_partitions_query, update_group, view_options,
   schema_ipc, schema_json, schema_hash, reads, created_at, '2000-01-01', 'forged', 'failed', NULL
    FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'$$);
RESET ROLE;
SELECT load_status, shipped, updated_by IS DISTINCT FROM 'forged' AS not_forged
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats';
-- c) The 0.1.4 settings that relabelled a write do nothing: a replace with
-- with_no_data = false is a replace in the history and queues its refresh.
SET ROLE mmv_trust_admin;
SELECT set_config('micromegas_views.restoring', 't_v', false) IS NOT NULL AS set;
SELECT set_config('micromegas_views.replacing', 't_v', false) IS NOT NULL AS set;
SELECT status, job_id IS NOT NULL AS refresh_queued FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW t_v WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time', with_no_data = false)$$, :'blocks_count'));
SELECT operation FROM micromegas.mm_view_history('t_v') ORDER BY version DESC LIMIT 1;
RESET micromegas_views.restoring;
RESET micromegas_views.replacing;
RESET ROLE;
-- d) What a trigger reports to the function that ran its statement (the
-- view a replace replaced, the job a create queued, what a drop retired) is
-- backend memory: the settings that once carried it change nothing, and
-- the report functions are no role's to call.
SET ROLE mmv_trust_admin;
SELECT set_config('micromegas_views.replaced', 'log_stats', false) IS NOT NULL AS set;
SELECT set_config('micromegas_views.created_job', '00000000-0000-0000-0000-000000000001', false) IS NOT NULL AS set;
SELECT set_config('micromegas_views.retired', '99 99', false) IS NOT NULL AS set;
SELECT view_set_name, status, job_id FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW t_reported WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT view_set_name, status, job_id FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW t_reported WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT view_set_name, status, partitions_retired, bytes_queued FROM micromegas.mm_drop_view('t_reported');
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas._mm_report('replaced', 'log_stats')$$);
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas._mm_take_report('replaced')$$);
RESET micromegas_views.replaced;
RESET micromegas_views.created_job;
RESET micromegas_views.retired;
RESET ROLE;

-- Every role the matrix lets call a function can run it
-- (a SECURITY INVOKER function calling an internal one would fail with 42501),
-- and the admin may write audience grants directly (their CHECK calls the
-- rule function as the writer).
SET ROLE mmv_trust_reader;
SELECT count(*) AS reader_plans FROM micromegas.mm_plan_regeneration('t_v', '2024-01-01', '2024-01-02', '1 hour');
RESET ROLE;
SET ROLE mmv_trust_admin;
INSERT INTO micromegas.audience_grants (audience, axis, selector) VALUES ('t-team', 'read', 'user:a@example.com');
UPDATE micromegas.audience_grants SET selector = 'user:b@example.com' WHERE audience = 't-team';
SELECT sqlstate, message FROM mmv_try($$INSERT INTO micromegas.audience_grants (audience, axis, selector) VALUES ('t team', 'read', '*')$$);
DELETE FROM micromegas.audience_grants WHERE audience = 't-team';
RESET ROLE;

-- 6. The smaller ones.
-- A refresh with other parameters is its own job; equal ones fold.
SELECT micromegas.mm_refresh_view('t_v', '2024-01-01', '2024-01-02', '{"a": 1}') AS ja \gset
SELECT micromegas.mm_refresh_view('t_v', '2024-01-01', '2024-01-02', '{"a": 2}') <> :'ja' AS other_params_new_job;
SELECT micromegas.mm_refresh_view('t_v', '2024-01-01', '2024-01-02', '{"a": 1}') = :'ja' AS equal_params_folded;
DELETE FROM micromegas.jobs;
-- Regeneration buckets tile absolute time, whatever TimeZone says: a day
-- across the spring-forward change in New York is 24 hours, and the range
-- is covered to its last hour.
SET TimeZone = 'America/New_York';
SELECT bucket_begin AT TIME ZONE 'UTC' AS b, bucket_end AT TIME ZONE 'UTC' AS e, bucket_end - bucket_begin AS len
  FROM micromegas.mm_plan_regeneration('t_v', '2024-03-09 00:00-05', '2024-03-12 00:00-05' , '1 day');
SET TimeZone = 'UTC';
-- Deny hits: a reader cannot record them; a service's time is clamped to
-- the server's clock ('infinity' would have pinned the rule as always hit).
SELECT count(*) FROM micromegas.deny_queries('client = ''trust''', 'trust rule');
SET ROLE mmv_trust_reader;
SELECT sqlstate FROM mmv_try($$SELECT micromegas.mm_record_query_denial_hits(ARRAY(SELECT gen_random_uuid()), 'infinity')$$);
RESET ROLE;
SELECT micromegas.mm_record_query_denial_hits(ARRAY(SELECT rule_id FROM micromegas.query_deny_list WHERE reason = 'trust rule'), 'infinity');
SELECT last_hit_at <= now() AS clamped FROM micromegas.list_query_denials() WHERE reason = 'trust rule';
SELECT left(micromegas.remove_query_denial(rule_id::text), 16) FROM micromegas.query_deny_list WHERE reason = 'trust rule';
SELECT count(*) AS hits_left FROM micromegas.query_deny_hits;

SELECT count(*) FROM micromegas.mm_drop_view('t_reader');
SELECT count(*) FROM micromegas.mm_drop_view('t_v');
DELETE FROM micromegas.jobs;
DROP FUNCTION mmv_tpart(text, int, int, text);
REVOKE CREATE ON SCHEMA public FROM mmv_trust_admin;
DROP OWNED BY mmv_trust_admin;
DROP ROLE mmv_trust_admin, mmv_trust_reader;

-- The same attacks on a fresh install, where log_stats is still exactly as
-- shipped (0.1.4 turned an INSERT over a shipped row into a silent replace).
\set regress_db :DBNAME
CREATE DATABASE mmv_trust_fresh;
\c mmv_trust_fresh
SET client_min_messages = warning;
SET micromegas_views.adopt_existing_roles = on;
CREATE SCHEMA btree_gist;
CREATE EXTENSION btree_gist SCHEMA btree_gist;
CREATE EXTENSION micromegas_views;
RESET client_min_messages;
CREATE ROLE mmv_trust_fresh_admin IN ROLE micromegas_admin;
SET ROLE mmv_trust_fresh_admin;
-- (the errors' CONTEXT names trigger lines: not shown)
\set SHOW_CONTEXT never
INSERT INTO micromegas.lakehouse_view_set_definitions (definition_sql)
  SELECT definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats';
INSERT INTO micromegas.lakehouse_view_set_definitions
  (view_set_name, definition_sql, created_at, updated_at, updated_by, load_status)
  SELECT view_set_name, definition_sql, created_at, '2000-01-01', 'forged', 'failed'
    FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats';
\set SHOW_CONTEXT errors
RESET ROLE;
SELECT load_status, load_error, shipped, updated_by IS DISTINCT FROM 'forged' AS not_forged,
       (SELECT count(*) FROM micromegas.lakehouse_view_set_definition_history) AS history_rows
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats';
\c :regress_db
DROP DATABASE mmv_trust_fresh;
DROP ROLE mmv_trust_fresh_admin;
