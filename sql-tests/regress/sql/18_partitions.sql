-- Partition metadata: writing, the table's guards, listing,
-- retiring by range / metadata / file, the file queue and its claim,
-- incompatible partitions, the atomic swap, the regeneration plan, DROP
-- retiring the global partitions, and who may do what.
SET TimeZone = 'UTC';
\set blocks_count '$c$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''$c$'
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW p_logs WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT encode(schema_hash, 'hex') AS h1 FROM micromegas.lakehouse_view_set_definitions
 WHERE view_set_name = 'p_logs' \gset

-- A helper writing an hour-aligned partition of p_logs (hours from 2024-01-01).
CREATE FUNCTION mmv_part(instance text, from_h numeric, to_h numeric, hash text, path text, size bigint DEFAULT 100)
RETURNS void LANGUAGE sql AS $$
  SELECT micromegas.mm_write_partition('p_logs', instance,
    '2024-01-01'::timestamptz + from_h * interval '1 hour', '2024-01-01'::timestamptz + to_h * interval '1 hour',
    NULL, NULL, path, size, decode(hash, 'hex'), '\x00', 10)
$$;

-- 1. Writing; adjacent partitions, a partition of another schema over the
-- same range, zero-width partitions (they overlap nothing), empty ones.
SELECT mmv_part('global', 0, 1, :'h1', 's3://b/p0');
SELECT mmv_part('global', 1, 2, :'h1', 's3://b/p1');
SELECT mmv_part('global', 0, 2, '01', 's3://b/old0');
SELECT mmv_part('global', 3, 3, :'h1', 's3://b/z1');
SELECT mmv_part('global', 3, 3, :'h1', 's3://b/z2');
SELECT mmv_part('global', 4, 5, :'h1', NULL, 0);
SELECT mmv_part('proc-1', 0, 1, :'h1', 's3://b/proc1');
SELECT view_instance_id, begin_insert_time, end_insert_time, file_path,
       encode(file_schema_hash, 'hex') = :'h1' AS current_hash, num_rows, partition_format_version,
       updated IS NOT NULL AS updated_set
  FROM micromegas.list_partitions() WHERE view_set_name = 'p_logs';
SELECT count(*) FROM micromegas.list_partitions(view_set_name => 'p_logs', view_instance_id => 'proc-1');
SELECT count(*) FROM micromegas.list_partitions(view_instance_id => 'global');
SELECT count(*) FROM micromegas.list_partitions('no_such_view');

-- 2. The guards, on every path: overlaps (same instance and schema) are
-- refused naming both partitions, SQLSTATE 23P01; malformed rows too.
SELECT * FROM mmv_try(format($$SELECT mmv_part('global', 0.5, 1.5, %L, 's3://b/bad')$$, :'h1'));
-- (the DETAIL of these holds the row, with its write time: not shown)
SELECT sqlstate, message FROM mmv_try(format($$SELECT mmv_part('global', 2, 1, %L, 's3://b/bad')$$, :'h1'));
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas.mm_write_partition(NULL, 'global', now(), now(), NULL, NULL, NULL, 0, '\x01', NULL, 0)$$);
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas.mm_write_partition('p_logs', 'global', now(), now(), NULL, NULL, NULL, -1, '\x01', NULL, 0)$$);
-- A direct INSERT meets the same constraint (its own message).
SELECT sqlstate, message LIKE 'conflicting key value violates exclusion constraint "lakehouse_partitions_no_overlap"' AS guard
  FROM mmv_try(format($$INSERT INTO micromegas.lakehouse_partitions (view_set_name, view_instance_id,
    begin_insert_time, end_insert_time, file_schema_hash, num_rows)
    VALUES ('p_logs', 'global', '2024-01-01 00:10', '2024-01-01 00:20', %L, 1)$$, '\x' || :'h1'));
SELECT * FROM mmv_try('TRUNCATE micromegas.lakehouse_partitions');
SELECT count(*) AS p_logs_partitions FROM micromegas.lakehouse_partitions WHERE view_set_name = 'p_logs';

-- 3. By metadata: one row exactly; not found and ambiguous are errors that
-- retire nothing (the two zero-width rows at hour 3 are ambiguous).
SELECT micromegas.retire_partition_by_metadata('p_logs', 'global', '2024-01-01 01:00', '2024-01-01 02:00', decode(:'h1', 'hex'));
SELECT * FROM mmv_try($$SELECT micromegas.retire_partition_by_metadata('p_logs', 'global', '2024-01-01 01:00', '2024-01-01 02:00', '\x01')$$);
SELECT * FROM mmv_try(format($$SELECT micromegas.retire_partition_by_metadata('p_logs', 'global', '2024-01-01 03:00', '2024-01-01 03:00', %L)$$, '\x' || :'h1'));
SELECT count(*) AS zero_width_left FROM micromegas.lakehouse_partitions WHERE file_path IN ('s3://b/z1', 's3://b/z2');
-- An empty partition (no file) is retired by metadata; nothing is queued for it.
SELECT micromegas.retire_partition_by_metadata('p_logs', 'global', '2024-01-01 04:00', '2024-01-01 05:00', decode(:'h1', 'hex'));
SELECT file_path, file_size FROM micromegas.temporary_files ORDER BY 1;

-- 4. By file.
SELECT micromegas.retire_partition_by_file('s3://b/z2');
SELECT * FROM mmv_try($$SELECT micromegas.retire_partition_by_file('s3://b/z2')$$);
SELECT * FROM mmv_try($$SELECT micromegas.retire_partition_by_file(NULL)$$);

-- 5. By range: [begin, end] inclusive, every schema, one row per action;
-- a zero-width range retires exactly the zero-width partition there.
SELECT msg FROM micromegas.retire_partitions('p_logs', 'global', '2024-01-01 03:00', '2024-01-01 03:00');
SELECT msg FROM micromegas.retire_partitions('p_logs', 'global', '2024-01-01 00:00', '2024-01-01 01:59');
SELECT * FROM mmv_try($$SELECT * FROM micromegas.retire_partitions('p_logs', 'global', '2024-01-02', '2024-01-01')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.retire_partitions('p_logs', 'global', NULL, '2024-01-01')$$);
BEGIN;
SELECT msg FROM micromegas.retire_partitions('p_logs', 'global', '2024-01-01 00:00', '2024-01-01 02:00');
-- Files wait micromegas_views.file_retention (default 1 hour).
SELECT file_path, file_size, expiration - now() AS kept_for FROM micromegas.temporary_files WHERE file_path = 's3://b/old0';
ROLLBACK;
SET micromegas_views.file_retention = '10min';
BEGIN;
SELECT count(*) FROM micromegas.retire_partitions('p_logs', 'global', '2024-01-01 00:00', '2024-01-01 02:00');
SELECT file_path, expiration - now() AS kept_for FROM micromegas.temporary_files WHERE file_path = 's3://b/old0';
ROLLBACK;
RESET micromegas_views.file_retention;
-- A file two instances share: retiring one partition keeps it (the other
-- still references it) and frees nothing; retiring the second queues it,
-- once (the first retirement does not say queued).
BEGIN;
SELECT mmv_part('proc-s1', 50, 51, :'h1', 's3://b/shared', 300);
SELECT mmv_part('proc-s2', 50, 51, :'h1', 's3://b/shared', 300);
SELECT msg FROM micromegas.retire_partitions('p_logs', 'proc-s1', '2024-01-01', '2024-01-04');
SELECT count(*) AS queued FROM micromegas.temporary_files WHERE file_path = 's3://b/shared';
SELECT msg FROM micromegas.retire_partitions('p_logs', 'proc-s2', '2024-01-01', '2024-01-04');
SELECT count(*) AS queued FROM micromegas.temporary_files WHERE file_path = 's3://b/shared';
ROLLBACK;
SELECT sqlstate FROM mmv_try($$SET micromegas_views.file_retention = '-1'$$);
-- Only a superuser may shorten it.
CREATE ROLE mmv_part_nobody;
SET ROLE mmv_part_nobody;
SELECT sqlstate, message FROM mmv_try($$SET micromegas_views.file_retention = 0$$);
RESET ROLE;
DROP ROLE mmv_part_nobody;

-- 6. Claiming expired files: none yet; with no retention, at once.
SELECT count(*) FROM micromegas.mm_expired_files();
SET micromegas_views.file_retention = 0;
SELECT count(*) FROM micromegas.retire_partitions('p_logs', 'proc-1', '2024-01-01', '2024-01-02');
RESET micromegas_views.file_retention;
SELECT file_path, file_size FROM micromegas.mm_expired_files(10);
SELECT count(*) AS claimed_again FROM micromegas.mm_expired_files(10);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_expired_files(0)$$);
-- A file handed out for deletion is recorded, and a partition cannot put it
-- back in use (0.1.10): the writer is refused and nothing is written.
SELECT count(*) AS handed_out FROM micromegas.file_claims WHERE handed_out_at IS NOT NULL;
SELECT sqlstate, message, detail, hint FROM mmv_try($$
  SELECT micromegas.mm_write_partition('p_logs', 'proc-9', '2030-01-01', '2030-01-02', NULL, NULL,
    (SELECT min(c.file_path) FROM micromegas.file_claims c WHERE c.handed_out_at IS NOT NULL), 1, '\x01', NULL, 1)$$);
SELECT count(*) AS proc_9 FROM micromegas.lakehouse_partitions WHERE view_instance_id = 'proc-9';
-- Queued again (a service may queue directly), a handed-out path is not
-- handed out twice: its queue row goes.
INSERT INTO micromegas.temporary_files
SELECT c.file_path, 1, now() - interval '1 second' FROM micromegas.file_claims c WHERE c.handed_out_at IS NOT NULL;
SELECT count(*) AS handed_again FROM micromegas.mm_expired_files(10);
SELECT count(*) AS still_queued FROM micromegas.temporary_files t JOIN micromegas.file_claims c USING (file_path);
-- In a transaction that has already written, records past the retention
-- are not purged (their horizon could not be trusted), and it says so.
SET micromegas_views.file_retention = 0;
BEGIN;
INSERT INTO micromegas.temporary_files VALUES ('s3://b/not-yet', 1, now() + interval '1 hour');
SELECT count(*) AS handed FROM micromegas.mm_expired_files(10);
ROLLBACK;
RESET micromegas_views.file_retention;
SELECT count(*) > 0 AS records_kept FROM micromegas.file_claims WHERE handed_out_at IS NOT NULL;
-- Its check must see the writers it waited for: READ COMMITTED only.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT sqlstate, message, hint FROM mmv_try($$SELECT * FROM micromegas.mm_expired_files(10)$$);
ROLLBACK;
-- Times in messages: infinite ones by name, BC ones with their era.
SELECT micromegas._mm_time_text('-infinity') AS minus_infinity, micromegas._mm_time_text('infinity') AS plus_infinity,
       micromegas._mm_time_text('0044-03-15 12:00+00 BC') AS bc;
DELETE FROM micromegas.temporary_files;

-- 7. Incompatible partitions: a REPLACE that changes the schema says how
-- many partitions no longer match (a NOTICE and a column); listing and
-- retiring them. The old-schema partition written above is one already.
SELECT mmv_part('global', 10, 11, :'h1', 's3://b/h10');
SELECT mmv_part('global', 11, 12, :'h1', NULL, 0);
SELECT view_set_name, view_instance_id, begin_insert_time, encode(incompatible_schema_hash, 'hex') AS old_hash,
       encode(current_schema_hash, 'hex') = :'h1' AS current_is_h1, file_path, file_size
  FROM micromegas.list_incompatible_partitions('p_logs');
SELECT view_set_name, status, incompatible_partitions
  FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW p_logs WITH (
  extract_query = 'SELECT time, process_id, level, target FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level, target FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
-- A content-only replace reports the same count, without a NOTICE.
SELECT status, incompatible_partitions
  FROM micromegas.mm_create_view(format($$CREATE OR REPLACE MATERIALIZED VIEW p_logs WITH (
  extract_query = 'SELECT time, process_id, level, target FROM log_entries WHERE level < 6',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level, target FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT count(*) AS incompatible, count(*) FILTER (WHERE file_path IS NULL) AS empty
  FROM micromegas.list_incompatible_partitions();
-- The same answer as the join it stands for.
SELECT count(*) AS by_hand FROM micromegas.lakehouse_partitions p
  JOIN micromegas.view_set_schema_hashes v USING (view_set_name) WHERE p.file_schema_hash <> v.schema_hash;
SELECT view_set_name, view_instance_id, partitions_retired, partitions_failed, storage_freed_bytes,
       retirement_messages
  FROM micromegas.retire_incompatible_partitions('p_logs');
SELECT count(*) FROM micromegas.list_incompatible_partitions();
SELECT file_path FROM micromegas.temporary_files ORDER BY 1;
DELETE FROM micromegas.temporary_files;

-- 8. The swap: retire what [begin, end] contains, write the new rows, in
-- one transaction.
SELECT encode(schema_hash, 'hex') AS h2 FROM micromegas.lakehouse_view_set_definitions
 WHERE view_set_name = 'p_logs' \gset
SELECT mmv_part('global', 20, 21, :'h2', 's3://b/h20');
SELECT mmv_part('global', 21, 22, :'h2', 's3://b/h21');
SELECT mmv_part('global', 22, 24, :'h2', 's3://b/h22');
CREATE FUNCTION mmv_new(from_h numeric, to_h numeric, hash text, path text, instance text DEFAULT 'global')
RETURNS micromegas.lakehouse_partitions LANGUAGE sql AS $$
  SELECT ROW('p_logs', instance, '2024-01-01'::timestamptz + from_h * interval '1 hour',
             '2024-01-01'::timestamptz + to_h * interval '1 hour', NULL, NULL, NULL, path, 7,
             decode(hash, 'hex'), NULL, 3, 1, NULL, NULL)::micromegas.lakehouse_partitions
$$;
SELECT regexp_replace(msg, '[0-9a-f]{16}', 'H', 'g') AS msg
  FROM micromegas.mm_replace_partitions('p_logs', 'global', '2024-01-01 20:00', '2024-01-01 22:00',
         ARRAY[mmv_new(20, 22, :'h2', 's3://b/h20-22')]);
SELECT begin_insert_time, end_insert_time, file_path, file_size FROM micromegas.list_partitions('p_logs', 'global');
-- Refused, and nothing changed: a new row outside the range, of another
-- instance, two new rows overlapping, a new row overlapping a partition the
-- range does not contain.
SELECT * FROM mmv_try(format($$SELECT * FROM micromegas.mm_replace_partitions('p_logs', 'global', '2024-01-01 20:00', '2024-01-01 22:00',
         ARRAY[mmv_new(20, 23, %L, 's3://b/x')])$$, :'h2'));
SELECT * FROM mmv_try(format($$SELECT * FROM micromegas.mm_replace_partitions('p_logs', 'global', '2024-01-01 20:00', '2024-01-01 22:00',
         ARRAY[mmv_new(20, 21, %L, 's3://b/x', 'proc-9')])$$, :'h2'));
SELECT * FROM mmv_try(format($$SELECT * FROM micromegas.mm_replace_partitions('p_logs', 'global', '2024-01-01 20:00', '2024-01-01 22:00',
         ARRAY[mmv_new(20, 21.5, %1$L, 's3://b/x'), mmv_new(21, 22, %1$L, 's3://b/y')])$$, :'h2'));
SELECT * FROM mmv_try(format($$SELECT * FROM micromegas.mm_replace_partitions('p_logs', 'global', '2024-01-01 21:00', '2024-01-01 23:00',
         ARRAY[mmv_new(22, 23, %L, 's3://b/x')])$$, :'h2'));
SELECT begin_insert_time, end_insert_time, file_path FROM micromegas.list_partitions('p_logs', 'global');
SELECT count(*) AS queued_by_refused_swaps FROM micromegas.temporary_files WHERE file_path IN ('s3://b/h22');
-- A swap of a view set that does not exist (dropped while its partitions
-- were materialized, or never defined) is refused and writes nothing; a
-- built-in view set the extension ships is one that exists.
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_replace_partitions('p_gone', 'global', '2024-01-01 20:00', '2024-01-01 22:00',
         ARRAY[ROW('p_gone', 'global', '2024-01-01 20:00'::timestamptz, '2024-01-01 21:00'::timestamptz, NULL, NULL, NULL,
                   's3://b/gone', 7, '\x01'::bytea, NULL, 3, 1, NULL, NULL)::micromegas.lakehouse_partitions])$$);
SELECT count(*) AS partitions_of_p_gone FROM micromegas.lakehouse_partitions WHERE view_set_name = 'p_gone';
SELECT count(*) AS log_entries_swap_msgs FROM micromegas.mm_replace_partitions('log_entries', 'proc-swap', '2024-01-01 20:00', '2024-01-01 22:00',
         ARRAY[ROW('log_entries', 'proc-swap', '2024-01-01 20:00'::timestamptz, '2024-01-01 21:00'::timestamptz, NULL, NULL, NULL,
                   's3://b/log-swap', 7, '\x01'::bytea, NULL, 3, 1, NULL, NULL)::micromegas.lakehouse_partitions]);
SELECT count(*) AS retire_msgs FROM micromegas.retire_partitions('log_entries', 'proc-swap', '2024-01-01', '2024-01-02');

-- 9. The regeneration plan: buckets, or the partition that does not fit.
SELECT * FROM micromegas.mm_plan_regeneration('p_logs', '2024-01-01 20:00', '2024-01-02 00:00', '2 hours');
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_plan_regeneration('p_logs', '2024-01-01 20:00', '2024-01-02 00:00', '1 hour')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_plan_regeneration('p_logs', '2024-01-01 21:00', '2024-01-02 00:00', '3 hours')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_plan_regeneration('p_logs', '2024-01-01 20:00', '2024-01-01 23:00', '3 hours')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_plan_regeneration('p_logs', '2024-01-01 20:00', '2024-01-02 00:00', '90 minutes')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_plan_regeneration('p_logs', '2024-01-01', '2024-03-01', '1 month')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_plan_regeneration('p_logs', '2024-01-01', '2024-01-01', '1 hour')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_plan_regeneration('p_logs', '2024-01-01', '2025-01-01', '1 minute')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_plan_regeneration('nope', '2024-01-01', '2024-01-02', '1 hour')$$);
-- Other instances do not constrain a regeneration of the global instance.
SELECT mmv_part('proc-2', 20.5, 21.5, :'h2', 's3://b/proc2');
SELECT count(*) FROM micromegas.mm_plan_regeneration('p_logs', '2024-01-01 20:00', '2024-01-02 00:00', '2 hours');

-- 10. Who may do what: readers list; the services write; admins retire.
CREATE ROLE mmv_part_reader IN ROLE micromegas_reader;
CREATE ROLE mmv_part_service IN ROLE micromegas_service;
CREATE ROLE mmv_part_admin IN ROLE micromegas_admin;
GRANT EXECUTE ON FUNCTION mmv_part(text, numeric, numeric, text, text, bigint) TO PUBLIC;
SET ROLE mmv_part_reader;
SELECT count(*) > 0 AS reader_lists FROM micromegas.list_partitions();
SELECT count(*) >= 0 AS reader_lists_incompatible FROM micromegas.list_incompatible_partitions();
SELECT sqlstate FROM mmv_try($$SELECT micromegas.retire_partition_by_file('s3://b/proc2')$$);
SELECT sqlstate FROM mmv_try(format($$SELECT mmv_part('proc-3', 0, 1, %L, 's3://b/r')$$, :'h2'));
SELECT sqlstate FROM mmv_try($$DELETE FROM micromegas.lakehouse_partitions$$);
RESET ROLE;
SET ROLE mmv_part_service;
SELECT mmv_part('proc-3', 0, 1, :'h2', 's3://b/s');
SELECT count(*) FROM micromegas.mm_expired_files();
DELETE FROM micromegas.lakehouse_partitions WHERE file_path = 's3://b/s';
SELECT sqlstate FROM mmv_try($$SELECT micromegas.retire_partition_by_file('s3://b/proc2')$$);
RESET ROLE;
-- The service's direct DELETE queued the file too.
SELECT file_path FROM micromegas.temporary_files WHERE file_path = 's3://b/s';
SET ROLE mmv_part_admin;
SELECT micromegas.retire_partition_by_file('s3://b/proc2');
SELECT sqlstate FROM mmv_try($$DELETE FROM micromegas.lakehouse_partitions$$);
SELECT sqlstate FROM mmv_try($$DELETE FROM micromegas.temporary_files$$);
RESET ROLE;
DROP ROLE mmv_part_reader, mmv_part_service, mmv_part_admin;

-- 11. DROP retires the global partitions of every schema (reported by a
-- NOTICE and by mm_drop_view); other instances stay for their owners.
SELECT mmv_part('global', 30, 31, '02', 's3://b/h30-old');
SELECT mmv_part('proc-4', 30, 31, :'h2', 's3://b/proc4');
DELETE FROM micromegas.temporary_files;
SELECT view_set_name, status, partitions_retired, bytes_queued FROM micromegas.mm_drop_view('p_logs');
SELECT view_instance_id, file_path FROM micromegas.list_partitions('p_logs');
SELECT file_path, file_size FROM micromegas.temporary_files ORDER BY 1;
-- A direct DELETE of a definition retires the same way; a rolled-back DROP
-- retires nothing.
SELECT status FROM micromegas.mm_create_view(format($$CREATE MATERIALIZED VIEW p_logs WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries',
  count_src_query = %s, merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')$$, :'blocks_count'));
SELECT mmv_part('global', 40, 41, :'h1', 's3://b/h40');
BEGIN;
SELECT partitions_retired FROM micromegas.mm_drop_view('p_logs');
ROLLBACK;
SELECT count(*) AS still_there FROM micromegas.list_partitions('p_logs', 'global');
DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'p_logs';
SELECT count(*) AS global_left FROM micromegas.list_partitions('p_logs', 'global');
-- What a lagging writer leaves after the DROP is cleaned up by range.
SELECT count(*) FROM micromegas.retire_partitions('p_logs', 'proc-4', '-infinity', 'infinity');
SELECT count(*) AS left_over FROM micromegas.lakehouse_partitions WHERE view_set_name = 'p_logs';
DELETE FROM micromegas.temporary_files;
DROP FUNCTION mmv_part(text, numeric, numeric, text, text, bigint);
DROP FUNCTION mmv_new(numeric, numeric, text, text, text);
