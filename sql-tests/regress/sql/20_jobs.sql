-- Jobs: requests (refresh, regeneration buckets) on view sets that exist
-- and load, duplicates folded, every transition of a job (claim, heartbeat,
-- finish, retry, lease expiry, cancel), DROP cancelling, and who may do what.
SET TimeZone = 'UTC';
\set blocks_count '$c$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''$c$'
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW j_v WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
DELETE FROM micromegas.jobs;
-- Errors with the random job ids masked.
CREATE FUNCTION mmv_try_j(statement text)
RETURNS TABLE (sqlstate text, message text, detail text, hint text) LANGUAGE sql AS $$
  SELECT t.sqlstate, regexp_replace(t.message, '[0-9a-f-]{36}', 'J'), t.detail, t.hint FROM mmv_try(statement) t
$$;
-- Jobs are shown without their random ids and times.
CREATE VIEW mmv_jobs AS
  SELECT kind, view_set_name, begin_time, end_time, params, state, cancel_requested, worker,
         lease_expires_at IS NOT NULL AS leased, attempts, failure_phase, failure_message, failure_retryable,
         created_by
    FROM micromegas.jobs ORDER BY created_at;

-- 1. Requests. A covered range returns the queued job; a wider one is new.
SELECT micromegas.mm_refresh_view('j_v', '2024-01-01', '2024-01-02') AS day1 \gset
SELECT micromegas.mm_refresh_view('j_v', '2024-01-01 06:00', '2024-01-01 12:00') = :'day1' AS covered;
SELECT micromegas.mm_refresh_view('j_v', '2024-01-01', '2024-01-03') = :'day1' AS wider_is_new;
SELECT micromegas.mm_refresh_view('log_entries') IS NOT NULL AS builtin_ok;
SELECT micromegas.mm_refresh_view('log_entries', '2024-01-01', NULL) =
       micromegas.mm_refresh_view('log_entries') AS everything_is_not_covered;
SELECT * FROM mmv_try($$SELECT micromegas.mm_refresh_view('nope')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_refresh_view('j_v', '2024-01-02', '2024-01-01')$$);
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas.mm_refresh_view('j_v', params => '[1]')$$);
-- A definition kept as failed to load (as a restore keeps one) is refused.
-- (a superuser loading a dumped row: it carries its creation time)
INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, created_at, definition_sql, load_status)
VALUES ('j_failed', now(), format($$CREATE MATERIALIZED VIEW j_failed WITH (
  extract_query = 'SELECT time, process_id, nope FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, nope FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'), 'failed');
SELECT sqlstate, message, hint FROM mmv_try($$SELECT micromegas.mm_refresh_view('j_failed')$$);
DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'j_failed';
SELECT kind, view_set_name, begin_time, end_time, state, attempts FROM mmv_jobs;

-- 2. Regeneration: one job per bucket, checked by mm_plan_regeneration.
SELECT micromegas.mm_write_partition('j_v', 'global', '2024-01-01', '2024-01-01 06:00', NULL, NULL, 's3://j/0', 1,
       (SELECT schema_hash FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'j_v'), NULL, 1);
SELECT regexp_replace(msg, 'job [0-9a-f-]{36}', 'job J') AS msg
  FROM micromegas.regenerate_partitions('j_v', '2024-01-01', '2024-01-02', 21600);
SELECT regexp_replace(msg, 'job [0-9a-f-]{36}', 'job J') AS msg
  FROM micromegas.regenerate_partitions('j_v', '2024-01-01', '2024-01-01 12:00', 21600);
SELECT sqlstate, message FROM mmv_try($$SELECT * FROM micromegas.regenerate_partitions('j_v', '2024-01-01', '2024-01-02', 3600 * 5)$$);
SELECT sqlstate, message FROM mmv_try($$SELECT * FROM micromegas.regenerate_partitions('j_v', '2024-01-01', '2024-01-02', 0)$$);
SELECT sqlstate, message FROM mmv_try($$SELECT * FROM micromegas.regenerate_partitions('nope', '2024-01-01', '2024-01-02', 3600)$$);
-- materialize_partitions (micromegas' name): the same buckets and checks,
-- jobs of kind materialize, which the daemon writes only where stale.
SELECT regexp_replace(msg, 'job [0-9a-f-]{36}', 'job J') AS msg
  FROM micromegas.materialize_partitions('j_v', '2024-01-01', '2024-01-01 12:00', 21600);
SELECT regexp_replace(msg, 'job [0-9a-f-]{36}', 'job J') AS msg
  FROM micromegas.materialize_partitions('j_v', '2024-01-01', '2024-01-01 06:00', 21600);
SELECT sqlstate, message FROM mmv_try($$SELECT * FROM micromegas.materialize_partitions('j_v', '2024-01-01', '2024-01-02', -1)$$);
SELECT sqlstate, message FROM mmv_try($$SELECT * FROM micromegas.materialize_partitions('j_v', '2024-01-01 03:00', '2024-01-02', 21600)$$);
SELECT count(*) AS regenerate_jobs FROM micromegas.list_jobs('queued', 'j_v') WHERE kind = 'regenerate';
SELECT count(*) AS materialize_jobs FROM micromegas.list_jobs('queued', 'j_v') WHERE kind = 'materialize';
DELETE FROM micromegas.jobs WHERE kind IN ('regenerate', 'materialize') OR view_set_name = 'log_entries';

-- 3. A worker's life: claim (oldest first, by kind), heartbeat, finish.
SELECT kind, begin_time, worker, attempts FROM micromegas.mm_claim_job('w1', ARRAY['materialize']);
SELECT job_id AS j1, lease_token AS t1 FROM micromegas.mm_claim_job('w1', ARRAY['refresh']) \gset
SELECT job_id = :'j1' AS oldest_first, begin_time, end_time, state, worker, attempts
  FROM micromegas.mm_job(:'j1');
-- The claim is proved by its lease token (only its hash is stored, so no
-- reader of the table can use it); the worker's name proves nothing.
SELECT lease_token_hash = micromegas._mm_lease_hash(:'t1') AS only_the_hash_is_stored
  FROM micromegas.jobs WHERE job_id = :'j1';
SELECT micromegas.mm_heartbeat_job(:'j1', :'t1');
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_heartbeat_job(%L, gen_random_uuid())$$, :'j1'));
-- A heartbeat may carry the attempt's progress, which its row shows until
-- the next report (a heartbeat without one keeps it); it must be one small
-- JSON object, and nothing changes when it is not.
SELECT micromegas.mm_heartbeat_job(:'j1', :'t1', '{"buckets_done": 3, "buckets": 24}');
SELECT micromegas.mm_heartbeat_job(:'j1', :'t1');
SELECT progress FROM micromegas.jobs WHERE job_id = :'j1';
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_heartbeat_job(%L, %L, '[1, 2]')$$, :'j1', :'t1'));
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_heartbeat_job(%L, %L, jsonb_build_object('log', repeat('x', 5000)))$$, :'j1', :'t1'));
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_heartbeat_job(%L, gen_random_uuid(), '{"buckets_done": 9}')$$, :'j1'));
SELECT progress FROM micromegas.jobs WHERE job_id = :'j1';
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_finish_job(%L, gen_random_uuid(), true)$$, :'j1'));
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_finish_job(%L, NULL, true)$$, :'j1'));
SELECT micromegas.mm_finish_job(:'j1', :'t1', true);
SELECT state, worker, leased, failure_phase FROM mmv_jobs WHERE state = 'done';
SELECT lease_token_hash IS NULL AS token_forgotten FROM micromegas.jobs WHERE job_id = :'j1';
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_finish_job(%L, %L, true)$$, :'j1', :'t1'));
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_claim_job('  ')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_claim_jobs('w1', 0)$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_job('00000000-0000-0000-0000-000000000000')$$);

-- 4. Failures: a retryable one goes back to the queue until the last
-- attempt (micromegas_views.job_max_attempts); a final one stays failed.
SET micromegas_views.job_max_attempts = 2;
SELECT job_id AS j2, lease_token AS t2 FROM micromegas.mm_claim_job('w1') \gset
SELECT micromegas.mm_heartbeat_job(:'j2', :'t2', '{"buckets_done": 1}');
SELECT micromegas.mm_finish_job(:'j2', :'t2', false, 'extract', 'object store timed out', true);
SELECT state, attempts, failure_phase, failure_message, failure_retryable FROM micromegas.mm_job(:'j2');
SELECT job_id = :'j2' AS same_job, attempts, lease_token <> :'t2' AS new_token, lease_token AS t2b
  FROM micromegas.mm_claim_job('w2') \gset
SELECT :'same_job' AS same_job, :'attempts' AS attempts, :'new_token' AS new_token;
-- A new attempt starts with no progress.
SELECT progress IS NULL AS no_progress_yet FROM micromegas.jobs WHERE job_id = :'j2';
SELECT micromegas.mm_finish_job(:'j2', :'t2b', false, 'extract', 'object store timed out', true);
SELECT state, attempts, failure_retryable FROM micromegas.mm_job(:'j2');
RESET micromegas_views.job_max_attempts;

-- 5. A lease that runs out: the job goes back to the queue and the next
-- claim takes it; the first worker's heartbeat is refused.
SELECT micromegas.mm_refresh_view('j_v', '2024-02-01', '2024-02-02') AS j3 \gset
SET micromegas_views.job_lease = '1s';
SELECT job_id = :'j3' AS claimed, lease_token AS t3 FROM micromegas.mm_claim_job('w1') \gset
SELECT pg_sleep(1.2);
-- The same worker name claims it again (two processes named alike): only
-- the new token holds it; the stale holder can neither extend nor finish it.
SELECT job_id = :'j3' AS reclaimed, worker, attempts, lease_token AS t3b FROM micromegas.mm_claim_job('w1') \gset
SELECT :'reclaimed' AS reclaimed, :'worker' AS worker, :'attempts' AS attempts;
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_heartbeat_job(%L, %L)$$, :'j3', :'t3'));
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_finish_job(%L, %L, true)$$, :'j3', :'t3'));
SELECT state, worker FROM micromegas.mm_job(:'j3');
RESET micromegas_views.job_lease;
SELECT micromegas.mm_finish_job(:'j3', :'t3b', true);
-- A lease that runs out on the last claim allowed fails the job (phase
-- lease); the next claim finds the expired lease and sweeps it first.
SELECT micromegas.mm_refresh_view('j_v', '2024-02-03', '2024-02-04') AS j3c \gset
SET micromegas_views.job_lease = '1s';
SET micromegas_views.job_max_attempts = 1;
SELECT job_id = :'j3c' AS claimed FROM micromegas.mm_claim_job('w1');
SELECT pg_sleep(1.2);
SELECT count(*) AS claimed_again FROM micromegas.mm_claim_job('w1');
SELECT state, attempts, failure_phase, failure_retryable FROM micromegas.mm_job(:'j3c');
RESET micromegas_views.job_max_attempts;
RESET micromegas_views.job_lease;
-- Only a superuser may change the lease and the attempts.
CREATE ROLE mmv_jobs_nobody;
SET ROLE mmv_jobs_nobody;
SELECT sqlstate FROM mmv_try($$SET micromegas_views.job_lease = '1h'$$);
SELECT sqlstate FROM mmv_try($$SET micromegas_views.job_max_attempts = 100$$);
RESET ROLE;
DROP ROLE mmv_jobs_nobody;

-- 6. Cancel: a queued job at once; a running one is asked to stop, its
-- worker sees it on the next heartbeat, and its finish cancels it.
SELECT micromegas.mm_refresh_view('j_v', '2024-03-01', '2024-03-02') AS j4 \gset
SELECT micromegas.mm_cancel_job(:'j4');
SELECT state, cancel_requested FROM micromegas.mm_job(:'j4');
SELECT micromegas.mm_refresh_view('j_v', '2024-03-01', '2024-03-02') <> :'j4' AS new_after_cancel;
SELECT job_id AS j5, lease_token AS t5 FROM micromegas.mm_claim_job('w1') \gset
SELECT micromegas.mm_cancel_job(:'j5');
SELECT micromegas.mm_heartbeat_job(:'j5', :'t5');
SELECT micromegas.mm_finish_job(:'j5', :'t5', true);
SELECT * FROM mmv_try_j(format($$SELECT micromegas.mm_cancel_job(%L)$$, :'j5'));

-- 7. DROP cancels the view's queued jobs and asks running ones to stop.
SELECT micromegas.mm_refresh_view('j_v', '2024-04-01', '2024-04-02') IS NOT NULL AS queued;
SELECT micromegas.mm_refresh_view('j_v', '2024-05-01', '2024-05-02') IS NOT NULL AS queued;
SELECT job_id AS j6, lease_token AS t6 FROM micromegas.mm_claim_job('w1') \gset
SELECT count(*) FROM micromegas.mm_drop_view('j_v');
SELECT state, cancel_requested, failure_phase, failure_message FROM micromegas.list_jobs(view_set_name => 'j_v')
 WHERE state IN ('queued', 'running', 'cancelled') AND begin_time >= '2024-04-01' ORDER BY begin_time;
SELECT micromegas.mm_heartbeat_job(:'j6', :'t6');
SELECT micromegas.mm_finish_job(:'j6', :'t6', false, 'write', 'view dropped');
SELECT state, count(*) FROM micromegas.list_jobs() GROUP BY 1 ORDER BY 1;

-- 8. with_no_data = false: the CREATE also queues a refresh of everything
-- and returns its id; a REPLACE while it is queued returns the same job.
-- auto_refresh is stored and carried in the snapshot. Defaults: no job.
SELECT job_id AS j8 FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW j_now WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time', with_no_data = false, auto_refresh = true)$$, :'blocks_count')) \gset
SELECT kind, view_set_name, begin_time, end_time, state FROM micromegas.mm_job(:'j8');
SELECT status, job_id = :'j8' AS same_job FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW j_now WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries WHERE level < 5',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time', with_no_data = 'false', auto_refresh = true)$$, :'blocks_count'));
SELECT view_options->'with_no_data' AS with_no_data, view_options->'auto_refresh' AS auto_refresh,
       definition_sql ~ 'with_no_data\s+= false' AND definition_sql ~ 'auto_refresh\s+= true' AS rendered
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'j_now';
SELECT view_set_name, auto_refresh FROM micromegas.mm_view_set_snapshot() WHERE view_set_name LIKE 'j\_%';
SELECT status, job_id IS NULL AS no_job FROM micromegas.mm_create_view(name => 'j_named',
  extract_query => 'SELECT time, process_id FROM log_entries', count_src_query => 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query => 'SELECT time, process_id FROM {source}', update_group => 4000, time_column => 'time');
SELECT status, job_id IS NOT NULL AS queued FROM micromegas.mm_create_view(name => 'j_named',
  extract_query => 'SELECT time, process_id FROM log_entries', count_src_query => 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query => 'SELECT time, process_id FROM {source}', update_group => 4000, time_column => 'time',
  with_no_data => false, or_replace => true);
SELECT * FROM mmv_try($t$SELECT * FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW j_bad WITH (
  extract_query = 'SELECT time FROM log_entries', count_src_query = 'SELECT count(*) AS count FROM blocks',
  merge_partitions_query = 'SELECT time FROM {source}', update_group = 4000, time_column = 'time', with_no_data = 0)$$)$t$);
SELECT count(*) FROM micromegas.mm_drop_view('j_now');
SELECT count(*) FROM micromegas.mm_drop_view('j_named');
DELETE FROM micromegas.jobs;

-- 9. Who may do what: readers see jobs; admins request and cancel; the
-- services' workers claim and finish; nobody writes the table directly.
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW j_v WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
CREATE ROLE mmv_jobs_reader IN ROLE micromegas_reader;
CREATE ROLE mmv_jobs_service IN ROLE micromegas_service;
CREATE ROLE mmv_jobs_admin IN ROLE micromegas_admin;
SET ROLE mmv_jobs_admin;
SET micromegas_views.actor = 'ana@example.com';
SELECT micromegas.mm_refresh_view('j_v', '2024-06-01', '2024-06-02') AS j7 \gset
RESET micromegas_views.actor;
SELECT sqlstate FROM mmv_try($$UPDATE micromegas.jobs SET state = 'done'$$);
RESET ROLE;
SET ROLE mmv_jobs_reader;
SELECT created_by, state FROM micromegas.mm_job(:'j7');
SELECT sqlstate FROM mmv_try($$SELECT micromegas.mm_refresh_view('j_v')$$);
SELECT sqlstate FROM mmv_try($$SELECT * FROM micromegas.mm_claim_job('r')$$);
RESET ROLE;
SET ROLE mmv_jobs_service;
SELECT job_id = :'j7' AS service_claims, lease_token AS t7 FROM micromegas.mm_claim_job('svc') \gset
SELECT :'service_claims' AS service_claims;
RESET ROLE;
-- An admin cannot finish (or claim) a job: that is the service's.
SET ROLE mmv_jobs_admin;
SELECT sqlstate FROM mmv_try(format($$SELECT micromegas.mm_finish_job(%L, %L, true)$$, :'j7', :'t7'));
SELECT sqlstate FROM mmv_try($$SELECT * FROM micromegas.mm_claim_job('made-up')$$);
RESET ROLE;
SET ROLE mmv_jobs_service;
SELECT micromegas.mm_finish_job(:'j7', :'t7', true);
SELECT sqlstate FROM mmv_try($$SELECT micromegas.mm_refresh_view('j_v')$$);
SELECT sqlstate FROM mmv_try(format($$SELECT micromegas.mm_cancel_job(%L)$$, :'j7'));
RESET ROLE;
DROP ROLE mmv_jobs_reader, mmv_jobs_service, mmv_jobs_admin;
SELECT * FROM mmv_try('TRUNCATE micromegas.jobs');
-- A NULL job id, a worker name of tabs and newlines: refused, named (0.1.10).
SELECT sqlstate, message FROM mmv_try('SELECT * FROM micromegas.mm_job(NULL)');
SELECT sqlstate, message FROM mmv_try('SELECT micromegas.mm_cancel_job(NULL)');
SELECT sqlstate, message FROM mmv_try('SELECT micromegas.mm_finish_job(NULL, NULL, true)');
SELECT sqlstate, message FROM mmv_try($$SELECT * FROM micromegas.mm_claim_jobs(E' \t\n')$$);

SELECT count(*) FROM micromegas.mm_drop_view('j_v');
DELETE FROM micromegas.jobs;
DELETE FROM micromegas.lakehouse_partitions WHERE view_set_name = 'j_v';
DELETE FROM micromegas.temporary_files;
DROP VIEW mmv_jobs;
DROP FUNCTION mmv_try_j(text);
