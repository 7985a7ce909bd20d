-- micromegas_views 0.1.9 -> 0.1.10. What changes:
-- * the file queue no longer takes advisory locks (any role could take
--   them, freezing every partition write; a cancelled daemon could keep
--   one for the rest of its session): a statement that writes or retires
--   partitions takes each path it touches as a row of the new
--   micromegas.file_claims, held until its transaction ends; the daemon's
--   claim records each file it hands out there, after waiting for every
--   writer of that path in flight, and a writer that would put a handed-out
--   file back in use is refused (55000). Before, a writer whose partition
--   row existed before its lock (waiting on the overlap guard) or a second
--   daemon skipping the first's rows could see a file a live partition
--   references handed out for deletion; two queue rows of one path could
--   be handed to two daemons. mm_expired_files now requires READ COMMITTED.
-- * an audience grant's notification carries only the operation and the
--   version: any role may LISTEN, and a grant names people and audiences.
-- * messages name an infinite time as infinity and a BC one with its era.
DROP TRIGGER partitions_queue_files ON micromegas.lakehouse_partitions;
DROP TRIGGER partitions_queue_replaced_files ON micromegas.lakehouse_partitions;
DROP TRIGGER partitions_unqueue_files ON micromegas.lakehouse_partitions;
DROP FUNCTION micromegas._mm_partitions_queue_files();
DROP FUNCTION micromegas._mm_lock_file_buckets(integer[]);
DROP FUNCTION micromegas._mm_file_bucket(text);
--@verbatim partitions.sql:file queue
COMMENT ON COLUMN micromegas.file_claims.file_path IS 'A file path being written or retired, or handed out for deletion';
COMMENT ON COLUMN micromegas.file_claims.handed_out_at IS 'When mm_expired_files handed the file out (NULL: a statement''s own row, gone when it ends)';
COMMENT ON FUNCTION micromegas._mm_partitions_queue_files() IS
  'Trigger: takes the paths a statement touches in turn, queues the files no partition references any more, takes a file out of the queue when one does again, refuses a file handed out for deletion';
SELECT pg_catalog.pg_extension_config_dump('micromegas.file_claims', '');

--@replace CREATE FUNCTION micromegas.mm_expired_files(
COMMENT ON FUNCTION micromegas.mm_expired_files(integer) IS
  'The daemon claims expired files of retired partitions that no partition references (READ COMMITTED; commit after deleting them)';

--@replace CREATE FUNCTION micromegas._mm_audience_grants_notify(
--@replace CREATE FUNCTION micromegas._mm_time_text(

-- Privileges, from the matrix (a new table, functions created again).
SELECT micromegas._mm_apply_privileges();
