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
--   be handed to two daemons. mm_expired_files now requires READ COMMITTED,
--   and takes a path before its queue rows (the writers' order). A record
--   stays for the retention, then until every transaction that held a
--   transaction id when its claim committed has ended. Call it in a
--   transaction of its own and delete the objects after it commits.
-- * an audience grant's notification carries only the operation and the
--   version: any role may LISTEN, and a grant names people and audiences.
-- * messages name an infinite time as infinity and a BC one with its era.
-- * a NULL job id (mm_job, mm_cancel_job, a heartbeat or finish) is 22004;
--   remove_query_denial(NULL) says no id was given; a worker name or deny
--   reason of tabs and newlines is blank; micromegas_views.actor over 255
--   characters is refused by name (22001) wherever an actor is recorded; an
--   invalid audience, axis or selector is quoted up to 80 characters.
-- * retire_partitions, a DROP and retire_incompatible_partitions report as
--   queued only the files no remaining partition references, once each.
-- * (Rust) a deny rule may use coalesce and nvl: rules are simplified before
--   they run, as DataFusion's planner does.
DROP TRIGGER partitions_queue_files ON micromegas.lakehouse_partitions;
DROP TRIGGER partitions_queue_replaced_files ON micromegas.lakehouse_partitions;
DROP TRIGGER partitions_unqueue_files ON micromegas.lakehouse_partitions;
DROP FUNCTION micromegas._mm_partitions_queue_files();
DROP FUNCTION micromegas._mm_lock_file_buckets(integer[]);
DROP FUNCTION micromegas._mm_file_bucket(text);
--@verbatim partitions.sql:file queue
COMMENT ON COLUMN micromegas.file_claims.file_path IS 'A file path being written or retired, or handed out for deletion';
COMMENT ON COLUMN micromegas.file_claims.handed_out_at IS 'When mm_expired_files handed the file out (NULL: a statement''s own row, gone when it ends)';
COMMENT ON COLUMN micromegas.file_claims.handed_out_horizon IS 'Set past the retention: the record goes once every transaction below this id has ended';
COMMENT ON FUNCTION micromegas._mm_unreferenced_files(micromegas.lakehouse_partitions[]) IS
  'The files of the given deleted partitions that no partition references any more, once each: what the queue trigger queues and a retirement reports';
COMMENT ON FUNCTION micromegas._mm_partitions_queue_files() IS
  'Trigger: takes the paths a statement touches in turn, queues the files no partition references any more, takes a file out of the queue when one does again, refuses a file handed out for deletion';
SELECT pg_catalog.pg_extension_config_dump('micromegas.file_claims', '');

--@replace CREATE FUNCTION micromegas.mm_expired_files(
COMMENT ON FUNCTION micromegas.mm_expired_files(integer) IS
  'The daemon claims expired files of retired partitions that no partition references, recorded as handed out (READ COMMITTED; delete them after it commits)';

--@replace CREATE FUNCTION micromegas._mm_audience_grants_notify(
--@replace CREATE FUNCTION micromegas._mm_time_text(

-- Bad input named: a NULL job id or rule id, a blank worker name or deny
-- reason made of tabs or newlines.
--@replace CREATE FUNCTION micromegas.remove_query_denial(
--@replace CREATE FUNCTION micromegas._mm_deny_list_before_write(
--@replace CREATE FUNCTION micromegas.mm_claim_jobs(
--@replace CREATE FUNCTION micromegas._mm_held_job(
--@replace CREATE FUNCTION micromegas.mm_cancel_job(
--@replace CREATE FUNCTION micromegas.mm_job(
--@replace CREATE FUNCTION micromegas._mm_actor(
--@replace CREATE FUNCTION micromegas._mm_audience_problem(

-- A retirement reports the files it queued (_mm_unreferenced_files, with
-- the queue trigger, above): a file another partition still references is
-- kept, not counted as freed.
--@replace CREATE FUNCTION micromegas.retire_partitions(
--@replace CREATE FUNCTION micromegas._mm_definitions_retire_dropped(
--@replace CREATE FUNCTION micromegas.retire_incompatible_partitions(

-- Privileges, from the matrix (a new table, functions created again).
--@replace CREATE FUNCTION micromegas.mm_privilege_matrix(
SELECT micromegas._mm_apply_privileges();
