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
-- Who is working on a file path, and which files were handed out for
-- deletion. A statement that writes or retires partitions takes each path
-- it touches by inserting a row here, in path order, and deletes it again
-- before it returns: the row is dead once the transaction ends, but until
-- then another transaction inserting the same path waits for this one to
-- end (a unique index waits for an insert in flight). The daemon's claim
-- inserts a row that stays (handed_out_at set): a writer that would put a
-- handed-out file back in use meets it and is refused, whether it came
-- before the claim committed or after. Rows, not advisory locks: no role but
-- the extension's own functions can write this table, so no session can
-- hold a path (advisory locks are open to anyone), and a wait is a
-- transaction's, released with it whatever ends it.
CREATE TABLE micromegas.file_claims (
  file_path varchar(2047) PRIMARY KEY,
  -- NULL: a statement's own row, deleted by it; otherwise when the file was
  -- handed out for deletion (kept for micromegas_views.file_retention).
  handed_out_at timestamptz
);
COMMENT ON TABLE micromegas.file_claims IS
  'File paths being written or retired (rows deleted by their own transaction) and files handed out for deletion';

-- The file queue follows what the partitions reference, whatever wrote
-- them: a file a statement took out of use (the file of a deleted
-- partition, the old file of one whose file_path an UPDATE changed) goes to
-- temporary_files once, and only when no remaining partition references it
-- (two partitions may share a file); a file a statement put (back) in use
-- (a swap writing back a partition it retired, a service re-inserting one)
-- leaves the queue, unless the daemon was handed it for deletion: then the
-- statement is refused. Empty partitions have no file.
CREATE FUNCTION micromegas._mm_partitions_queue_files() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  paths text[];
  taken text[];
  lost text;
BEGIN
  -- (A transition table exists only for its own event: each is read only
  -- there.)
  IF TG_OP = 'INSERT' THEN
    paths := ARRAY(SELECT DISTINCT b.file_path FROM born b WHERE b.file_path IS NOT NULL ORDER BY 1);
  ELSIF TG_OP = 'DELETE' THEN
    paths := ARRAY(SELECT DISTINCT g.file_path FROM gone g WHERE g.file_path IS NOT NULL ORDER BY 1);
  ELSE
    paths := ARRAY(SELECT b.file_path FROM born b WHERE b.file_path IS NOT NULL
                   UNION
                   SELECT g.file_path FROM gone g WHERE g.file_path IS NOT NULL
                   ORDER BY 1);
  END IF;
  IF cardinality(paths) = 0 THEN
    RETURN NULL;
  END IF;
  -- One transaction at a time per path, in path order (two writers of
  -- partitions sharing a file, or a writer and a retirement, each see the
  -- other's committed rows in the checks below; the daemon's claim waits
  -- for them). A path not taken is one handed out for deletion.
  WITH mine AS (
    INSERT INTO micromegas.file_claims AS c (file_path)
    SELECT p FROM unnest(paths) p ORDER BY p
    ON CONFLICT (file_path) DO NOTHING
    RETURNING c.file_path)
  SELECT coalesce(array_agg(m.file_path::text), '{}') INTO taken FROM mine m;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    SELECT b.file_path INTO lost FROM born b
     WHERE b.file_path IS NOT NULL AND NOT b.file_path = ANY (taken)
     ORDER BY 1 LIMIT 1;
    IF FOUND THEN
      RAISE EXCEPTION 'file % was handed out for deletion', lost
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The file daemon claimed it (mm_expired_files): it is being deleted, or is gone.',
              HINT = 'Write the partition''s data to a new file.';
    END IF;
    DELETE FROM micromegas.temporary_files t
     WHERE t.file_path IN (SELECT b.file_path FROM born b WHERE b.file_path IS NOT NULL);
  END IF;
  IF TG_OP IN ('DELETE', 'UPDATE') THEN
    INSERT INTO micromegas.temporary_files (file_path, file_size, expiration)
    SELECT DISTINCT ON (g.file_path) g.file_path, coalesce(g.file_size, 0), micromegas._mm_file_expiration()
      FROM gone g
     WHERE g.file_path IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p WHERE p.file_path = g.file_path)
     ORDER BY g.file_path, g.file_size DESC NULLS LAST;
  END IF;
  -- Our rows go: dead when this transaction ends, whatever ends it.
  DELETE FROM micromegas.file_claims c WHERE c.file_path = ANY (taken) AND c.handed_out_at IS NULL;
  RETURN NULL;
END
$$;
CREATE TRIGGER partitions_queue_files
  AFTER DELETE ON micromegas.lakehouse_partitions
  REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_partitions_queue_files();
CREATE TRIGGER partitions_queue_replaced_files
  AFTER UPDATE ON micromegas.lakehouse_partitions
  REFERENCING OLD TABLE AS gone NEW TABLE AS born
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_partitions_queue_files();
CREATE TRIGGER partitions_unqueue_files
  AFTER INSERT ON micromegas.lakehouse_partitions
  REFERENCING NEW TABLE AS born
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_partitions_queue_files();
COMMENT ON COLUMN micromegas.file_claims.file_path IS 'A file path being written or retired, or handed out for deletion';
COMMENT ON COLUMN micromegas.file_claims.handed_out_at IS 'When mm_expired_files handed the file out (NULL: a statement''s own row, gone when it ends)';
COMMENT ON FUNCTION micromegas._mm_partitions_queue_files() IS
  'Trigger: takes the paths a statement touches in turn, queues the files no partition references any more, takes a file out of the queue when one does again, refuses a file handed out for deletion';
SELECT pg_catalog.pg_extension_config_dump('micromegas.file_claims', '');

CREATE OR REPLACE FUNCTION micromegas.mm_expired_files(max_files integer DEFAULT 1000)
RETURNS TABLE (file_path text, file_size bigint, expiration timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_expired_files');
  claimed micromegas.temporary_files[];
  fresh text[];
  live text[];
BEGIN
  IF max_files IS NULL OR max_files < 1 THEN
    RAISE EXCEPTION 'mm_expired_files: max_files must be a positive number, not %', coalesce(max_files::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- The check below must see what the writers it waited for committed: a
  -- snapshot per statement.
  IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'mm_expired_files: call it in a READ COMMITTED transaction, not %',
        pg_catalog.upper(pg_catalog.current_setting('transaction_isolation'))
      USING ERRCODE = 'invalid_transaction_state',
            HINT = 'Its check that no partition references a file must see the writers it waited for.';
  END IF;
  -- Handed-out records older than the retention go.
  DELETE FROM micromegas.file_claims c
   WHERE c.handed_out_at < now() - make_interval(secs => micromegas._mm_file_retention_seconds());
  WITH picked AS (
    DELETE FROM micromegas.temporary_files t
     WHERE t.ctid = ANY (ARRAY(SELECT y.ctid FROM micromegas.temporary_files y
                                WHERE y.expiration <= now()
                                ORDER BY y.expiration
                                LIMIT max_files
                                  FOR UPDATE SKIP LOCKED))
    RETURNING t.*)
  SELECT coalesce(array_agg(p), '{}') INTO claimed FROM picked p;
  -- Record them as handed out, in path order: each insert waits for the
  -- writers and retirements of its path in flight; a path already handed
  -- out (by another daemon) is not inserted.
  WITH handed AS (
    INSERT INTO micromegas.file_claims AS c (file_path, handed_out_at)
    SELECT DISTINCT x.file_path, now() FROM unnest(claimed) x ORDER BY 1
    ON CONFLICT (file_path) DO NOTHING
    RETURNING c.file_path)
  SELECT coalesce(array_agg(h.file_path::text), '{}') INTO fresh FROM handed h;
  -- A file a partition references (now, those writers committed) is not
  -- handed out: its queue row is gone with the rest, and its record too.
  -- What is returned is exactly what stays recorded.
  WITH referenced AS (
    DELETE FROM micromegas.file_claims c
     WHERE c.file_path = ANY (fresh)
       AND EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p WHERE p.file_path = c.file_path)
    RETURNING c.file_path)
  SELECT coalesce(array_agg(r.file_path::text), '{}') INTO live FROM referenced r;
  RETURN QUERY
    SELECT DISTINCT ON (x.file_path) x.file_path::text, x.file_size, x.expiration
      FROM unnest(claimed) x
     WHERE x.file_path = ANY (fresh) AND NOT x.file_path = ANY (live)
     ORDER BY x.file_path, x.expiration;
END
$$;
COMMENT ON FUNCTION micromegas.mm_expired_files(integer) IS
  'The daemon claims expired files of retired partitions that no partition references (READ COMMITTED; commit after deleting them)';

CREATE OR REPLACE FUNCTION micromegas._mm_audience_grants_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  -- Only what changed and the version, as for the deny list: any role may
  -- LISTEN, and a grant names people and audiences that readers may not see.
  PERFORM pg_notify('micromegas_audience_grants', json_build_object(
    'op', lower(TG_OP), 'version', (SELECT a.audience_grants_version FROM micromegas.access_state a))::text);
  RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_time_text(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE WHEN t IS NULL THEN 'NULL'
              WHEN NOT isfinite(t) THEN t::text
              ELSE regexp_replace(to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '\.?0+$', '') || 'Z'
                   || CASE WHEN t AT TIME ZONE 'UTC' < '0001-01-01 00:00'::timestamp THEN ' BC' ELSE '' END END
$$;

-- Privileges, from the matrix (a new table, functions created again).
SELECT micromegas._mm_apply_privileges();
