-- micromegas_views: the partition metadata (micromegas' lakehouse_partitions
-- and temporary_files, same columns as micromegas' writers and readers use),
-- and everything that reads, writes and retires it.
--
-- Rules, each in one place:
-- * a partition row is well formed and never overlaps another partition of
--   the same view instance and schema: table constraints (every writer);
-- * a deleted partition's file is queued for deletion, expiring after
--   micromegas_views.file_retention: the AFTER DELETE trigger below, so a
--   retire function, a DROP and a direct DELETE all queue it;
-- * a readable overlap error: _mm_raise_overlap, for both write functions.

-- The overlap guard needs btree_gist (the control file requires it). In
-- schema public, DROP SCHEMA public CASCADE would drop btree_gist and,
-- through it, this extension with every definition and partition: said now.
DO $$
BEGIN
  IF (SELECT e.extnamespace FROM pg_catalog.pg_extension e WHERE e.extname = 'btree_gist')
     = 'public'::regnamespace THEN
    RAISE WARNING 'btree_gist is installed in schema public: DROP SCHEMA public CASCADE would drop micromegas_views with it'
      USING HINT = 'Move it to a schema of its own: CREATE SCHEMA btree_gist; ALTER EXTENSION btree_gist SET SCHEMA btree_gist;';
  END IF;
END
$$;

CREATE TABLE micromegas.lakehouse_partitions (
  view_set_name varchar(255) NOT NULL,
  view_instance_id varchar(255) NOT NULL,
  begin_insert_time timestamptz NOT NULL,
  end_insert_time timestamptz NOT NULL,
  min_event_time timestamptz,
  max_event_time timestamptz,
  updated timestamptz NOT NULL DEFAULT now(),
  file_path varchar(2047),
  file_size bigint,
  file_schema_hash bytea NOT NULL,
  source_data_hash bytea,
  num_rows bigint NOT NULL,
  partition_format_version integer NOT NULL DEFAULT 1,
  sort_order text[],
  max_sort_key_time timestamptz,
  CONSTRAINT lakehouse_partitions_insert_range CHECK (begin_insert_time <= end_insert_time),
  CONSTRAINT lakehouse_partitions_sizes CHECK (file_size >= 0 AND num_rows >= 0),
  -- Two partitions of one view instance and schema never share insert
  -- time. Zero-width partitions (begin = end) are empty ranges: they
  -- overlap nothing. Partitions of different schema hashes may coexist
  -- (old and new schema during a migration).
  CONSTRAINT lakehouse_partitions_no_overlap EXCLUDE USING gist (
    view_set_name WITH =, view_instance_id WITH =, file_schema_hash WITH =,
    tstzrange(begin_insert_time, end_insert_time) WITH &&)
);
COMMENT ON COLUMN micromegas.lakehouse_partitions.view_set_name IS 'The view set';
COMMENT ON COLUMN micromegas.lakehouse_partitions.view_instance_id IS 'The instance (global for the view set as a whole)';
COMMENT ON COLUMN micromegas.lakehouse_partitions.begin_insert_time IS 'Start of the insert range it covers';
COMMENT ON COLUMN micromegas.lakehouse_partitions.end_insert_time IS 'End of it (exclusive)';
COMMENT ON COLUMN micromegas.lakehouse_partitions.min_event_time IS 'Its earliest event time';
COMMENT ON COLUMN micromegas.lakehouse_partitions.max_event_time IS 'Its latest event time';
COMMENT ON COLUMN micromegas.lakehouse_partitions.updated IS 'When it was written';
COMMENT ON COLUMN micromegas.lakehouse_partitions.file_path IS 'Its file in object storage, or NULL for an empty partition';
COMMENT ON COLUMN micromegas.lakehouse_partitions.file_size IS 'The file''s size in bytes';
COMMENT ON COLUMN micromegas.lakehouse_partitions.file_schema_hash IS 'The schema hash it was written with';
COMMENT ON COLUMN micromegas.lakehouse_partitions.source_data_hash IS 'The source count it was materialized from';
COMMENT ON COLUMN micromegas.lakehouse_partitions.num_rows IS 'Its rows';
COMMENT ON COLUMN micromegas.lakehouse_partitions.partition_format_version IS 'The file format''s version';
COMMENT ON COLUMN micromegas.lakehouse_partitions.sort_order IS 'The columns its rows are sorted by';
COMMENT ON COLUMN micromegas.lakehouse_partitions.max_sort_key_time IS 'The latest time of its sort key';
CREATE INDEX lakehouse_partitions_begin_insert_time
  ON micromegas.lakehouse_partitions (view_set_name, view_instance_id, begin_insert_time);
CREATE INDEX lakehouse_partitions_end_insert_time
  ON micromegas.lakehouse_partitions (view_set_name, view_instance_id, end_insert_time);
CREATE INDEX lakehouse_partitions_min_event_time
  ON micromegas.lakehouse_partitions (view_set_name, view_instance_id, min_event_time);
CREATE INDEX lakehouse_partitions_max_event_time
  ON micromegas.lakehouse_partitions (view_set_name, view_instance_id, max_event_time);
CREATE INDEX lakehouse_partitions_file_path ON micromegas.lakehouse_partitions (file_path);
COMMENT ON TABLE micromegas.lakehouse_partitions IS
  'Materialized partitions of the view sets: one row per file (or empty partition)';

-- Files of retired partitions, deleted by the daemon once expired.
CREATE TABLE micromegas.temporary_files (
  file_path varchar(2047) NOT NULL,
  file_size bigint NOT NULL,
  expiration timestamptz NOT NULL
);
COMMENT ON COLUMN micromegas.temporary_files.file_path IS 'A file no partition references';
COMMENT ON COLUMN micromegas.temporary_files.file_size IS 'Its size in bytes';
COMMENT ON COLUMN micromegas.temporary_files.expiration IS 'When the daemon may delete it (mm_expired_files)';
CREATE INDEX temporary_files_expiration ON micromegas.temporary_files (expiration);
CREATE INDEX temporary_files_file_path ON micromegas.temporary_files (file_path);
COMMENT ON TABLE micromegas.temporary_files IS
  'Files of retired partitions; the daemon deletes them after their expiration (mm_expired_files)';

-- When a file retired now may be deleted.
CREATE FUNCTION micromegas._mm_file_expiration() RETURNS timestamptz
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN now() + make_interval(secs => micromegas._mm_file_retention_seconds());
END
$$;
COMMENT ON FUNCTION micromegas._mm_file_expiration() IS
  'When a file queued now may be deleted: now plus micromegas_views.file_retention';

-- <file queue>
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
  -- handed out for deletion.
  handed_out_at timestamptz,
  -- Set once the record is past micromegas_views.file_retention: the id of
  -- a later mm_expired_files call that saw it committed before taking that
  -- id. The record goes when every transaction below it has ended (a writer
  -- whose row waited on the overlap guard, say, may not have reached its
  -- trigger yet).
  handed_out_horizon xid8
);
COMMENT ON COLUMN micromegas.file_claims.file_path IS 'A file path being written or retired, or handed out for deletion';
COMMENT ON COLUMN micromegas.file_claims.handed_out_at IS 'When mm_expired_files handed the file out (NULL: a statement''s own row, gone when it ends)';
COMMENT ON COLUMN micromegas.file_claims.handed_out_horizon IS 'Set past the retention: the record goes once every transaction below this id has ended';
COMMENT ON TABLE micromegas.file_claims IS
  'File paths being written or retired (rows deleted by their own transaction) and files handed out for deletion';

-- The files of these (deleted) partitions that no partition references any
-- more, once each (with the largest size given for it): what the queue
-- trigger queues, and what a retirement reports as queued.
CREATE FUNCTION micromegas._mm_unreferenced_files(gone micromegas.lakehouse_partitions[])
RETURNS TABLE (file_path text, file_size bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT DISTINCT ON (g.file_path) g.file_path::text, coalesce(g.file_size, 0)
    FROM unnest(gone) g
   WHERE g.file_path IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p WHERE p.file_path = g.file_path)
   ORDER BY g.file_path, g.file_size DESC NULLS LAST
$$;
COMMENT ON FUNCTION micromegas._mm_unreferenced_files(micromegas.lakehouse_partitions[]) IS
  'The files of the given deleted partitions that no partition references any more, once each: what the queue trigger queues and a retirement reports';

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
    ON CONFLICT ON CONSTRAINT file_claims_pkey DO NOTHING
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
    SELECT u.file_path, u.file_size, micromegas._mm_file_expiration()
      FROM micromegas._mm_unreferenced_files(ARRAY(SELECT g::micromegas.lakehouse_partitions FROM gone g)) u;
  END IF;
  -- Our rows go: dead when this transaction ends, whatever ends it.
  DELETE FROM micromegas.file_claims c WHERE c.file_path = ANY (taken) AND c.handed_out_at IS NULL;
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_partitions_queue_files() IS
  'Trigger: takes the paths a statement touches in turn, queues the files no partition references any more, takes a file out of the queue when one does again, refuses a file handed out for deletion';
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
-- </file queue>
CREATE TRIGGER partitions_no_truncate
  BEFORE TRUNCATE ON micromegas.lakehouse_partitions
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- How messages name a time and a partition: RFC 3339 in UTC, whatever the
-- session's TimeZone.
CREATE FUNCTION micromegas._mm_time_text(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE WHEN t IS NULL THEN 'NULL'
              WHEN NOT isfinite(t) THEN t::text
              ELSE regexp_replace(to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '\.?0+$', '') || 'Z'
                   || CASE WHEN t AT TIME ZONE 'UTC' < '0001-01-01 00:00'::timestamp THEN ' BC' ELSE '' END END
$$;
COMMENT ON FUNCTION micromegas._mm_time_text(timestamp with time zone) IS
  'A timestamp as messages show it (RFC 3339, UTC)';

CREATE FUNCTION micromegas._mm_partition_label(
  view_set_name text, view_instance_id text, begin_insert_time timestamptz,
  end_insert_time timestamptz, file_schema_hash bytea) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT format('%s/%s [%s, %s) schema_hash=%s', $1, $2, micromegas._mm_time_text($3),
                micromegas._mm_time_text($4), coalesce(encode($5, 'hex'), 'NULL'))
$$;
COMMENT ON FUNCTION micromegas._mm_partition_label(text,text,timestamp with time zone,timestamp with time zone,bytea) IS
  'A partition named in messages: view set/instance [begin, end) schema_hash';

-- Arguments every partition function refuses: NULLs and a reversed range.
CREATE FUNCTION micromegas._mm_check_range(what text, range_begin timestamptz, range_end timestamptz)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF range_begin IS NULL OR range_end IS NULL THEN
    RAISE EXCEPTION '%: the time range bounds must not be NULL', what
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF range_begin > range_end THEN
    RAISE EXCEPTION '%: the range begins after it ends', what
      USING ERRCODE = 'invalid_parameter_value',
            DETAIL = format('begin %s, end %s', micromegas._mm_time_text(range_begin),
                            micromegas._mm_time_text(range_end));
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas._mm_check_range(text,timestamp with time zone,timestamp with time zone) IS
  'Refuses a time range whose begin is not before its end, naming what it ranges';

-- The readable form of an exclusion violation: raises naming the partition
-- being written and the one it overlaps, if there is one (SQLSTATE 23P01
-- kept); returns when nothing overlaps it. Called from exception handlers.
CREATE FUNCTION micromegas._mm_raise_overlap(p micromegas.lakehouse_partitions) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  other micromegas.lakehouse_partitions;
BEGIN
  SELECT * INTO other FROM micromegas.lakehouse_partitions o
   WHERE o.view_set_name = p.view_set_name AND o.view_instance_id = p.view_instance_id
     AND o.file_schema_hash = p.file_schema_hash
     AND tstzrange(o.begin_insert_time, o.end_insert_time) && tstzrange(p.begin_insert_time, p.end_insert_time)
   ORDER BY o.begin_insert_time LIMIT 1;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  RAISE EXCEPTION 'partition % overlaps partition %',
      micromegas._mm_partition_label(p.view_set_name, p.view_instance_id, p.begin_insert_time,
                                     p.end_insert_time, p.file_schema_hash),
      micromegas._mm_partition_label(other.view_set_name, other.view_instance_id,
                                     other.begin_insert_time, other.end_insert_time, other.file_schema_hash)
    USING ERRCODE = 'exclusion_violation',
          DETAIL = format('New file %s; existing file %s.', coalesce(p.file_path, 'NULL (empty partition)'),
                          coalesce(other.file_path, 'NULL (empty partition)')),
          HINT = 'Partitions of one view instance and schema may not share insert time. Retire the existing '
                 'partition first (retire_partition_by_metadata), or swap the range in one transaction with '
                 'mm_replace_partitions; if another writer committed it just now, check list_partitions() and retry.';
END
$$;
COMMENT ON FUNCTION micromegas._mm_raise_overlap(micromegas.lakehouse_partitions) IS
  'Raises the overlap of a partition with a stored one, naming both';

-- micromegas' list_partitions: every partition, optionally of one view set and instance.
CREATE FUNCTION micromegas.list_partitions(view_set_name text DEFAULT NULL, view_instance_id text DEFAULT NULL)
RETURNS SETOF micromegas.lakehouse_partitions
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  -- One statement per filter shape, so each uses its index.
  IF $1 IS NULL AND $2 IS NULL THEN
    RETURN QUERY SELECT * FROM micromegas.lakehouse_partitions p
                  ORDER BY p.view_set_name, p.view_instance_id, p.begin_insert_time;
  ELSIF $2 IS NULL THEN
    RETURN QUERY SELECT * FROM micromegas.lakehouse_partitions p WHERE p.view_set_name = $1
                  ORDER BY p.view_set_name, p.view_instance_id, p.begin_insert_time;
  ELSIF $1 IS NULL THEN
    RETURN QUERY SELECT * FROM micromegas.lakehouse_partitions p WHERE p.view_instance_id = $2
                  ORDER BY p.view_set_name, p.view_instance_id, p.begin_insert_time;
  ELSE
    RETURN QUERY SELECT * FROM micromegas.lakehouse_partitions p
                  WHERE p.view_set_name = $1 AND p.view_instance_id = $2
                  ORDER BY p.view_set_name, p.view_instance_id, p.begin_insert_time;
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas.list_partitions(text, text) IS
  'Every partition, optionally of one view set and instance';

-- micromegas' retire_partitions: retires every partition of one view instance lying within
-- [begin, end] (both inclusive), whatever its schema. One row per action.
CREATE FUNCTION micromegas.retire_partitions(
  view_set_name text, view_instance_id text, begin_time timestamptz, end_time timestamptz)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('retire_partitions');
  target text := format('%s/%s', $1, $2);
  gone_rows micromegas.lakehouse_partitions[];
  r micromegas.lakehouse_partitions;
BEGIN
  PERFORM micromegas._mm_check_range('retire_partitions', begin_time, end_time);
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'retire_partitions: view_set_name and view_instance_id must not be NULL'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  -- The statement ends (its queue trigger runs) before the messages say
  -- what became of each file.
  WITH gone AS (
    DELETE FROM micromegas.lakehouse_partitions p
     WHERE p.view_set_name = $1 AND p.view_instance_id = $2
       AND p.begin_insert_time >= begin_time AND p.end_insert_time <= end_time
    RETURNING p.*)
  SELECT coalesce(array_agg(g ORDER BY g.begin_insert_time, g.end_insert_time, g.file_schema_hash), '{}')
    INTO gone_rows FROM gone g;
  FOREACH r IN ARRAY gone_rows LOOP
    RETURN QUERY SELECT clock_timestamp(), format('retired partition %s; %s',
      micromegas._mm_partition_label(r.view_set_name, r.view_instance_id, r.begin_insert_time,
                                     r.end_insert_time, r.file_schema_hash),
      CASE WHEN r.file_path IS NULL THEN 'empty, no file'
           WHEN EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p WHERE p.file_path = r.file_path)
             THEN format('file %s kept: another partition references it', r.file_path)
           ELSE format('file %s (%s bytes) queued for deletion', r.file_path, coalesce(r.file_size, 0)) END);
  END LOOP;
  RETURN QUERY SELECT clock_timestamp(), format('retired %s partition(s) of %s within [%s, %s]; %s bytes queued for deletion',
    cardinality(gone_rows), target, micromegas._mm_time_text(begin_time), micromegas._mm_time_text(end_time),
    (SELECT coalesce(sum(u.file_size), 0) FROM micromegas._mm_unreferenced_files(gone_rows) u));
END
$$;
COMMENT ON FUNCTION micromegas.retire_partitions(text, text, timestamptz, timestamptz) IS
  'Retire every partition of a view instance within [begin, end], whatever its schema';

-- micromegas' retire_partition_by_metadata: retires exactly one partition, named by its natural key and
-- schema hash (empty partitions too). Not found or ambiguous: an error, and
-- nothing is retired.
CREATE FUNCTION micromegas.retire_partition_by_metadata(
  view_set_name text, view_instance_id text, begin_insert_time timestamptz,
  end_insert_time timestamptz, file_schema_hash bytea)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('retire_partition_by_metadata');
  label text := micromegas._mm_partition_label($1, $2, $3, $4, $5);
  n bigint;
  paths text;
BEGIN
  WITH gone AS (
    DELETE FROM micromegas.lakehouse_partitions p
     WHERE p.view_set_name = $1 AND p.view_instance_id = $2 AND p.begin_insert_time = $3
       AND p.end_insert_time = $4 AND p.file_schema_hash = $5
    RETURNING p.file_path)
  SELECT count(*), string_agg(coalesce(g.file_path, 'NULL'), ', ' ORDER BY g.file_path) INTO n, paths FROM gone g;
  IF n = 0 THEN
    RAISE EXCEPTION 'Partition not found: %', label
      USING ERRCODE = 'no_data_found', HINT = 'list_partitions() shows the partitions and their schema hashes.';
  ELSIF n > 1 THEN
    RAISE EXCEPTION 'Ambiguous match: % rows for %, file_paths=[%]; use retire_partition_by_file when file_paths are distinct and non-NULL',
        n, label, paths
      USING ERRCODE = 'too_many_rows', DETAIL = 'Nothing was retired.';
  END IF;
  RETURN 'SUCCESS: Retired partition ' || label;
END
$$;
COMMENT ON FUNCTION micromegas.retire_partition_by_metadata(text, text, timestamptz, timestamptz, bytea) IS
  'Retire exactly one partition, named by view set, instance, insert range and schema hash';

-- micromegas' retire_partition_by_file: retires the one partition with this file.
CREATE FUNCTION micromegas.retire_partition_by_file(file_path text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('retire_partition_by_file');
  n bigint;
BEGIN
  WITH gone AS (DELETE FROM micromegas.lakehouse_partitions p WHERE p.file_path = $1 RETURNING 1)
  SELECT count(*) INTO n FROM gone;
  IF n = 0 THEN
    RAISE EXCEPTION 'Partition not found: %', coalesce($1, 'NULL')
      USING ERRCODE = 'no_data_found',
            HINT = CASE WHEN $1 IS NULL THEN 'An empty partition has no file: use retire_partition_by_metadata.'
                        ELSE 'list_partitions() shows the partitions and their files.' END;
  ELSIF n > 1 THEN
    RAISE EXCEPTION 'Ambiguous match: % rows for file %', n, $1
      USING ERRCODE = 'too_many_rows', DETAIL = 'Nothing was retired.',
            HINT = 'Retire each with retire_partition_by_metadata.';
  END IF;
  RETURN 'SUCCESS: Retired partition ' || $1;
END
$$;
COMMENT ON FUNCTION micromegas.retire_partition_by_file(text) IS
  'Retire the one partition with this file';

-- Whether each statement of this transaction sees what committed before it
-- (READ COMMITTED, and READ UNCOMMITTED, which PostgreSQL runs as READ
-- COMMITTED): what a check that waited for other writers needs.
CREATE FUNCTION micromegas._mm_snapshot_per_statement() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT pg_catalog.current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')
$$;
COMMENT ON FUNCTION micromegas._mm_snapshot_per_statement() IS
  'Whether each statement of the transaction takes its own snapshot (READ COMMITTED or READ UNCOMMITTED)';

-- The daemon's claim of expired files: returns up to max_files expired
-- files that no partition references, oldest first, each recorded as handed
-- out (micromegas.file_claims) and its queue rows deleted. A path is taken
-- (its record inserted) before its queue rows, the order a writer takes a
-- path and then the queue rows of its files, and the record first waits for
-- every writer or retirement of that path in flight; the reference check
-- comes after, so a partition those writers committed keeps its file. A
-- writer that would put a recorded file back in use is refused, before the
-- claim commits or after. Rows another transaction holds are skipped, and a
-- path is handed out once (the queue rows of a path already handed out are
-- dropped): two daemons never get the same file. Call it in a READ
-- COMMITTED transaction of its own and delete the objects after it commits
-- (a daemon that dies in between leaves the files behind, listed in
-- file_claims; one that deletes before committing and then fails would let
-- a waiting writer put a deleted file back in use).
CREATE FUNCTION micromegas.mm_expired_files(max_files integer DEFAULT 1000)
RETURNS TABLE (file_path text, file_size bigint, expiration timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_expired_files');
  candidates text[];
  fresh text[];
  claimed micromegas.temporary_files[];
  dropped text[];
  old_tids tid[];
  old_xmins xid[];
  retained_until timestamptz;
BEGIN
  IF max_files IS NULL OR max_files < 1 THEN
    RAISE EXCEPTION 'mm_expired_files: max_files must be a positive number, not %', coalesce(max_files::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- The check below must see what the writers it waited for committed: a
  -- snapshot per statement.
  IF NOT micromegas._mm_snapshot_per_statement() THEN
    RAISE EXCEPTION 'mm_expired_files: call it in a READ COMMITTED transaction, not %',
        pg_catalog.upper(pg_catalog.current_setting('transaction_isolation'))
      USING ERRCODE = 'invalid_transaction_state',
            HINT = 'Its check that no partition references a file must see the writers it waited for.';
  END IF;
  -- The records past the retention, as they are before this transaction
  -- takes an id: each was committed before that id exists, so the id is
  -- above the id of every transaction that held one when its claim
  -- committed (the horizon set below). A horizon not below this snapshot's
  -- xmax (no committed transaction has such an id) came from another
  -- cluster (a restore) and is set again. In a transaction that already
  -- has an id, none is set.
  retained_until := clock_timestamp() - make_interval(secs => micromegas._mm_file_retention_seconds());
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NULL THEN
    SELECT coalesce(array_agg(x.ctid), '{}'), coalesce(array_agg(x.xmin), '{}') INTO old_tids, old_xmins
      FROM micromegas.file_claims x
     WHERE x.handed_out_at < retained_until
       AND (x.handed_out_horizon IS NULL
            OR x.handed_out_horizon >= pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()));
  ELSIF EXISTS (SELECT 1 FROM micromegas.file_claims x
                 WHERE x.handed_out_at < retained_until AND x.handed_out_horizon IS NULL) THEN
    RAISE NOTICE 'mm_expired_files: records of handed-out files past the retention are not purged in a transaction that has already written'
      USING HINT = 'Call it in a transaction of its own.';
  END IF;
  -- The candidates: the paths of the oldest expired queue rows no other
  -- transaction holds (another daemon's, a writer's). Their locks are taken
  -- only to skip the held rows, and let go at once (the block's rollback):
  -- holding a queue row while waiting for a writer below, who may be
  -- waiting for that row, would deadlock.
  BEGIN
    candidates := ARRAY(SELECT DISTINCT c.file_path FROM (
                          SELECT y.file_path FROM micromegas.temporary_files y
                           WHERE y.expiration <= now() ORDER BY y.expiration LIMIT max_files
                             FOR UPDATE SKIP LOCKED) c);
    RAISE EXCEPTION USING ERRCODE = 'MMV01';
  EXCEPTION WHEN SQLSTATE 'MMV01' THEN
    NULL;
  END;
  -- Their records, in path order: each insert waits for the writers of its
  -- path in flight; a path already handed out is not recorded again.
  WITH handed AS (
    INSERT INTO micromegas.file_claims AS c (file_path, handed_out_at)
    SELECT p, clock_timestamp() FROM unnest(candidates) p ORDER BY p
    ON CONFLICT ON CONSTRAINT file_claims_pkey DO NOTHING
    RETURNING c.file_path)
  SELECT coalesce(array_agg(h.file_path::text), '{}') INTO fresh FROM handed h;
  -- Then their expired queue rows, skipping those another transaction
  -- holds; a candidate not recorded now was handed out already (its record
  -- existed, or another daemon's committed): its queue rows go, unreturned.
  WITH picked AS (
    DELETE FROM micromegas.temporary_files t
     WHERE t.ctid = ANY (ARRAY(SELECT y.ctid FROM micromegas.temporary_files y
                                WHERE y.expiration <= now() AND y.file_path = ANY (candidates)
                                  FOR UPDATE SKIP LOCKED))
    RETURNING t.*)
  SELECT coalesce(array_agg(p), '{}') INTO claimed FROM picked p WHERE p.file_path = ANY (fresh);
  -- A path with no queue row taken, or that a partition references (now,
  -- the writers it waited for committed), is not handed out: its record
  -- goes (its queue rows too, when it is in use). What is returned is
  -- exactly what stays recorded, its time the end of the waits.
  WITH unclaimed AS (
    DELETE FROM micromegas.file_claims c
     WHERE c.file_path = ANY (fresh)
       AND (NOT EXISTS (SELECT 1 FROM unnest(claimed) x WHERE x.file_path = c.file_path)
            OR EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p WHERE p.file_path = c.file_path))
    RETURNING c.file_path)
  SELECT coalesce(array_agg(u.file_path::text), '{}') INTO dropped FROM unclaimed u;
  UPDATE micromegas.file_claims c SET handed_out_at = clock_timestamp()
   WHERE c.file_path = ANY (fresh);
  -- Old records, last (a record being purged makes a daemon recording its
  -- path wait; purged first, it could wait on one that waits on this one).
  -- Those found past the retention at the start (the same row versions)
  -- get this transaction's id as their horizon; a record goes once every
  -- transaction below its horizon has ended (the snapshot's xmin is at most
  -- the oldest running id) — a writer whose row waited on the overlap guard
  -- before reaching its trigger, say. Records another daemon holds are left
  -- to it.
  IF cardinality(old_tids) > 0 THEN
    UPDATE micromegas.file_claims c
       SET handed_out_horizon = pg_catalog.pg_current_xact_id()
     WHERE c.ctid = ANY (ARRAY(
             SELECT x.ctid FROM micromegas.file_claims x
              WHERE x.ctid = ANY (old_tids)
                AND EXISTS (SELECT 1 FROM unnest(old_tids, old_xmins) o(tid, xmin)
                             WHERE o.tid = x.ctid AND o.xmin = x.xmin)
                FOR UPDATE SKIP LOCKED));
  END IF;
  DELETE FROM micromegas.file_claims c
   WHERE c.ctid = ANY (ARRAY(
           SELECT x.ctid FROM micromegas.file_claims x
            WHERE x.handed_out_horizon <= pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())
              FOR UPDATE SKIP LOCKED));
  RETURN QUERY
    SELECT DISTINCT ON (x.file_path) x.file_path::text, x.file_size, x.expiration
      FROM unnest(claimed) x
     WHERE NOT x.file_path = ANY (dropped)
     ORDER BY x.file_path, x.expiration;
END
$$;
COMMENT ON FUNCTION micromegas.mm_expired_files(integer) IS
  'The daemon claims expired files of retired partitions that no partition references, recorded as handed out (READ COMMITTED; delete them after it commits)';

-- Every view set's current schema hash: the registered built-ins and the
-- DDL definitions.
CREATE VIEW micromegas.view_set_schema_hashes AS
  SELECT b.view_set_name, b.schema_hash FROM micromegas.builtin_view_sets b
  UNION ALL
  SELECT d.view_set_name, d.schema_hash FROM micromegas.lakehouse_view_set_definitions d;
COMMENT ON VIEW micromegas.view_set_schema_hashes IS
  'Every view set (built-in and defined) with its current schema hash';
COMMENT ON COLUMN micromegas.view_set_schema_hashes.view_set_name IS 'The view set';
COMMENT ON COLUMN micromegas.view_set_schema_hashes.schema_hash IS 'Its current schema hash';

-- micromegas' list_incompatible_partitions: every partition whose schema hash is not its view set's current
-- one (partitions of a view set that no longer exists are not listed: see
-- list_partitions). A row type, so the argument can keep micromegas' name.
CREATE TYPE micromegas.incompatible_partition AS (
  view_set_name text, view_instance_id text, begin_insert_time timestamptz,
  end_insert_time timestamptz, incompatible_schema_hash bytea, current_schema_hash bytea,
  file_path text, file_size bigint);
COMMENT ON TYPE micromegas.incompatible_partition IS
  'A partition whose schema hash is not its view set''s current one (list_incompatible_partitions)';
COMMENT ON COLUMN micromegas.incompatible_partition.view_set_name IS 'The view set';
COMMENT ON COLUMN micromegas.incompatible_partition.view_instance_id IS 'The instance';
COMMENT ON COLUMN micromegas.incompatible_partition.begin_insert_time IS 'Start of the partition''s insert range';
COMMENT ON COLUMN micromegas.incompatible_partition.end_insert_time IS 'End of it';
COMMENT ON COLUMN micromegas.incompatible_partition.incompatible_schema_hash IS 'The hash the partition was written with';
COMMENT ON COLUMN micromegas.incompatible_partition.current_schema_hash IS 'The view set''s current hash';
COMMENT ON COLUMN micromegas.incompatible_partition.file_path IS 'The partition''s file';
COMMENT ON COLUMN micromegas.incompatible_partition.file_size IS 'Its size in bytes';
CREATE FUNCTION micromegas.list_incompatible_partitions(view_set_name text DEFAULT NULL)
RETURNS SETOF micromegas.incompatible_partition
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF $1 IS NULL THEN
    RETURN QUERY
      SELECT p.view_set_name::text, p.view_instance_id::text, p.begin_insert_time, p.end_insert_time,
             p.file_schema_hash, v.schema_hash, p.file_path::text, p.file_size
        FROM micromegas.lakehouse_partitions p
        JOIN micromegas.view_set_schema_hashes v ON v.view_set_name = p.view_set_name
       WHERE p.file_schema_hash <> v.schema_hash
       ORDER BY 1, 2, 3, 4;
  ELSE
    RETURN QUERY
      SELECT p.view_set_name::text, p.view_instance_id::text, p.begin_insert_time, p.end_insert_time,
             p.file_schema_hash, v.schema_hash, p.file_path::text, p.file_size
        FROM micromegas.lakehouse_partitions p
        JOIN micromegas.view_set_schema_hashes v ON v.view_set_name = p.view_set_name
       WHERE p.view_set_name = $1 AND v.view_set_name = $1 AND p.file_schema_hash <> v.schema_hash
       ORDER BY 1, 2, 3, 4;
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas.list_incompatible_partitions(text) IS
  'Partitions whose schema hash is not their view set''s current one';

-- How many partitions of a view set do not match its current schema.
CREATE FUNCTION micromegas._mm_incompatible_count(name text) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (SELECT count(*) FROM micromegas.lakehouse_partitions p
            JOIN micromegas.view_set_schema_hashes v ON v.view_set_name = p.view_set_name
           WHERE p.view_set_name = $1 AND v.view_set_name = $1 AND p.file_schema_hash <> v.schema_hash);
END
$$;
COMMENT ON FUNCTION micromegas._mm_incompatible_count(text) IS
  'How many partitions of a view set do not have its current schema hash';

-- micromegas' retire_incompatible_partitions: retires every incompatible partition; one row per view set and
-- instance. A partition another transaction holds is not waited for: it
-- counts as failed, with a message, and the others are retired.
CREATE TYPE micromegas.partition_retirement AS (
  view_set_name text, view_instance_id text, partitions_retired bigint,
  partitions_failed bigint, storage_freed_bytes bigint, retirement_messages text[]);
COMMENT ON TYPE micromegas.partition_retirement IS
  'What a retirement did, per view set and instance: partitions retired and failed, bytes queued, messages';
COMMENT ON COLUMN micromegas.partition_retirement.view_set_name IS 'The view set';
COMMENT ON COLUMN micromegas.partition_retirement.view_instance_id IS 'The instance';
COMMENT ON COLUMN micromegas.partition_retirement.partitions_retired IS 'Partitions retired';
COMMENT ON COLUMN micromegas.partition_retirement.partitions_failed IS 'Partitions that could not be';
COMMENT ON COLUMN micromegas.partition_retirement.storage_freed_bytes IS 'Bytes of files queued for deletion';
COMMENT ON COLUMN micromegas.partition_retirement.retirement_messages IS 'What happened';
CREATE FUNCTION micromegas.retire_incompatible_partitions(view_set_name text DEFAULT NULL)
RETURNS SETOF micromegas.partition_retirement
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('retire_incompatible_partitions');
BEGIN
  RETURN QUERY
    WITH candidates AS (
      SELECT p.ctid AS tid, p.view_set_name::text AS vs, p.view_instance_id::text AS inst,
             micromegas._mm_partition_label(p.view_set_name, p.view_instance_id, p.begin_insert_time,
                                            p.end_insert_time, p.file_schema_hash) AS label,
             p.begin_insert_time, p.file_schema_hash
        FROM micromegas.lakehouse_partitions p
        JOIN micromegas.view_set_schema_hashes v ON v.view_set_name = p.view_set_name
       WHERE p.file_schema_hash <> v.schema_hash AND ($1 IS NULL OR p.view_set_name = $1)
    ), locked AS (
      SELECT p.ctid AS tid FROM micromegas.lakehouse_partitions p
       WHERE p.ctid = ANY (ARRAY(SELECT c.tid FROM candidates c))
         FOR UPDATE SKIP LOCKED
    ), gone AS (
      DELETE FROM micromegas.lakehouse_partitions p USING locked l
       WHERE p.ctid = l.tid
      RETURNING l.tid, p.file_path, coalesce(p.file_size, 0) AS file_size
    ), freed AS (
      -- The files the queue trigger queues: those no partition left
      -- references, once per path (_mm_unreferenced_files' rule, written
      -- out here because this statement still sees the rows it retires:
      -- they are the locked ones).
      SELECT DISTINCT ON (c.vs, c.inst, g.file_path) c.vs, c.inst, g.file_size
        FROM gone g JOIN candidates c ON c.tid = g.tid
       WHERE g.file_path IS NOT NULL
         AND NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p
                          WHERE p.file_path = g.file_path AND NOT p.ctid = ANY (ARRAY(SELECT l.tid FROM locked l)))
       ORDER BY c.vs, c.inst, g.file_path, g.file_size DESC
    )
    SELECT c.vs, c.inst,
           count(g.tid), count(*) - count(g.tid),
           (SELECT coalesce(sum(f.file_size), 0) FROM freed f WHERE f.vs = c.vs AND f.inst = c.inst)::bigint,
           array_agg(CASE WHEN g.tid IS NOT NULL THEN 'SUCCESS: Retired partition ' || c.label
                          ELSE 'ERROR: Partition ' || c.label || ' is being changed by another transaction; not retired' END
                     ORDER BY c.begin_insert_time, c.file_schema_hash)
      FROM candidates c LEFT JOIN gone g ON g.tid = c.tid
     GROUP BY c.vs, c.inst
     ORDER BY c.vs, c.inst;
END
$$;
COMMENT ON FUNCTION micromegas.retire_incompatible_partitions(text) IS
  'Retire every incompatible partition; one row per view set and instance';

-- A partition is recorded only for a view set that exists. A definition's
-- row is held until the writing transaction ends, so a drop committed first
-- is seen here (and refused), and a drop that comes later waits (before it
-- takes the catalog lock: _mm_drop) and then retires what was written.
-- Without it, a daemon that materialized a view while it was dropped would
-- record partitions for a view that no longer exists, and a view created
-- again under that name with the same schema would read them as its own. A
-- built-in need only exist: deleting one retires none of its partitions, so
-- there is nothing to wait for (and the shipped rows every process instance
-- writes under stay free of row locks). Both are asked in one statement, with
-- one snapshot: a definition dropped while this waited is not taken for a
-- built-in registered under its name in the same transaction.
CREATE FUNCTION micromegas._mm_hold_view_set(caller text, name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  known boolean;
BEGIN
  IF name IS NULL THEN
    RETURN;  -- the caller's own NULL check names the column
  END IF;
  WITH held AS (
    SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = name FOR KEY SHARE)
  SELECT EXISTS (SELECT 1 FROM held)
         OR EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = name)
    INTO known;
  IF NOT known THEN
    RAISE EXCEPTION '%: view set "%" does not exist', caller, name
      USING ERRCODE = 'undefined_object', DETAIL = 'Nothing was retired or written.',
            HINT = 'It may have been dropped while its partitions were being materialized; list_view_sets() shows the view sets.';
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas._mm_hold_view_set(text, text) IS
  'Holds a definition''s row until the transaction ends, or refuses a view set that is neither a definition nor a built-in';

-- A service writes one partition. An overlap with a partition of the same
-- instance and schema is refused (23P01) naming both.
CREATE FUNCTION micromegas.mm_write_partition(
  view_set_name text, view_instance_id text, begin_insert_time timestamptz, end_insert_time timestamptz,
  min_event_time timestamptz, max_event_time timestamptz, file_path text, file_size bigint,
  file_schema_hash bytea, source_data_hash bytea, num_rows bigint,
  partition_format_version integer DEFAULT 1, sort_order text[] DEFAULT NULL,
  max_sort_key_time timestamptz DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_write_partition');
  p micromegas.lakehouse_partitions;
BEGIN
  p := ROW($1, $2, $3, $4, $5, $6, now(), $7, $8, $9, $10, $11, $12, $13, $14);
  PERFORM micromegas._mm_hold_view_set('mm_write_partition', $1);
  BEGIN
    INSERT INTO micromegas.lakehouse_partitions VALUES (p.*);
  EXCEPTION WHEN exclusion_violation THEN
    PERFORM micromegas._mm_raise_overlap(p);
    -- The other writer's partition is gone again: nothing to name.
    RAISE EXCEPTION 'partition % overlapped a partition written concurrently',
        micromegas._mm_partition_label(p.view_set_name, p.view_instance_id, p.begin_insert_time,
                                       p.end_insert_time, p.file_schema_hash)
      USING ERRCODE = 'exclusion_violation', HINT = 'Check list_partitions() and retry.';
  END;
END
$$;
COMMENT ON FUNCTION micromegas.mm_write_partition(text, text, timestamptz, timestamptz, timestamptz, timestamptz, text, bigint, bytea, bytea, bigint, integer, text[], timestamptz) IS
  'A service writes one partition (an overlap is refused, naming both partitions)';

-- The atomic swap behind regeneration: retires every partition of the
-- instance within [begin, end] and writes the new ones (each of this view
-- set and instance, within the range), in one transaction.
CREATE FUNCTION micromegas.mm_replace_partitions(
  view_set_name text, view_instance_id text, begin_time timestamptz, end_time timestamptz,
  partitions micromegas.lakehouse_partitions[])
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_replace_partitions');
  q micromegas.lakehouse_partitions;
  o micromegas.lakehouse_partitions;
  n bigint;
BEGIN
  PERFORM micromegas._mm_check_range('mm_replace_partitions', begin_time, end_time);
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'mm_replace_partitions: view_set_name and view_instance_id must not be NULL'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  PERFORM micromegas._mm_hold_view_set('mm_replace_partitions', $1);
  FOREACH q IN ARRAY coalesce(partitions, '{}') LOOP
    IF q.view_set_name IS DISTINCT FROM $1 OR q.view_instance_id IS DISTINCT FROM $2 THEN
      RAISE EXCEPTION 'mm_replace_partitions: new partition % is not of %/%',
          micromegas._mm_partition_label(q.view_set_name, q.view_instance_id, q.begin_insert_time,
                                         q.end_insert_time, q.file_schema_hash), $1, $2
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (q.begin_insert_time >= begin_time AND q.end_insert_time <= end_time) THEN
      RAISE EXCEPTION 'mm_replace_partitions: new partition % is not within [%, %]',
          micromegas._mm_partition_label(q.view_set_name, q.view_instance_id, q.begin_insert_time,
                                         q.end_insert_time, q.file_schema_hash),
          micromegas._mm_time_text(begin_time), micromegas._mm_time_text(end_time)
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'A swap writes only inside the range it retires.';
    END IF;
  END LOOP;
  RETURN QUERY SELECT * FROM micromegas.retire_partitions($1, $2, begin_time, end_time);
  BEGIN
    INSERT INTO micromegas.lakehouse_partitions
    SELECT x.view_set_name, x.view_instance_id, x.begin_insert_time, x.end_insert_time, x.min_event_time,
           x.max_event_time, now(), x.file_path, x.file_size, x.file_schema_hash, x.source_data_hash,
           x.num_rows, coalesce(x.partition_format_version, 1), x.sort_order, x.max_sort_key_time
      FROM unnest(partitions) x;
    GET DIAGNOSTICS n = ROW_COUNT;
  EXCEPTION WHEN exclusion_violation THEN
    -- Which new partition: one overlapping another new one, or one
    -- overlapping a partition this swap did not retire.
    FOR i IN 1 .. coalesce(array_length(partitions, 1), 0) LOOP
      q := partitions[i];
      FOR j IN i + 1 .. array_length(partitions, 1) LOOP
        o := partitions[j];
        IF o.file_schema_hash = q.file_schema_hash
           AND tstzrange(o.begin_insert_time, o.end_insert_time) && tstzrange(q.begin_insert_time, q.end_insert_time) THEN
          RAISE EXCEPTION 'mm_replace_partitions: new partitions % and % overlap',
              micromegas._mm_partition_label(q.view_set_name, q.view_instance_id, q.begin_insert_time,
                                             q.end_insert_time, q.file_schema_hash),
              micromegas._mm_partition_label(o.view_set_name, o.view_instance_id, o.begin_insert_time,
                                             o.end_insert_time, o.file_schema_hash)
            USING ERRCODE = 'exclusion_violation', DETAIL = 'Nothing was retired or written.';
        END IF;
      END LOOP;
    END LOOP;
    FOREACH q IN ARRAY partitions LOOP
      PERFORM micromegas._mm_raise_overlap(q);
    END LOOP;
    RAISE;
  END;
  RETURN QUERY SELECT clock_timestamp(), format('wrote %s partition(s) of %s/%s within [%s, %s]', n, $1, $2,
    micromegas._mm_time_text(begin_time), micromegas._mm_time_text(end_time));
END
$$;
COMMENT ON FUNCTION micromegas.mm_replace_partitions(text, text, timestamptz, timestamptz, micromegas.lakehouse_partitions[]) IS
  'Retire a range of a view instance and write its new partitions, atomically';

-- Upstream's regeneration rules: delta tiles [begin, end) exactly and every
-- partition of the view set's global instance that overlaps the range lies
-- within one bucket. Returns the buckets, or names the partition that does
-- not fit.
CREATE FUNCTION micromegas.mm_plan_regeneration(
  view_set_name text, begin_time timestamptz, end_time timestamptz, delta interval)
RETURNS TABLE (bucket_begin timestamptz, bucket_end timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  span numeric;
  step numeric;
  buckets numeric;
  fixed interval;
  bad record;
BEGIN
  PERFORM micromegas._mm_check_range('mm_plan_regeneration', begin_time, end_time);
  IF NOT EXISTS (SELECT 1 FROM micromegas.view_set_schema_hashes v WHERE v.view_set_name = $1) THEN
    RAISE EXCEPTION 'view set "%" does not exist', $1
      USING ERRCODE = 'undefined_object', HINT = 'list_view_sets() shows the view sets.';
  END IF;
  IF delta IS NULL OR extract(year FROM delta) <> 0 OR extract(month FROM delta) <> 0 OR delta <= interval '0' THEN
    RAISE EXCEPTION 'mm_plan_regeneration: delta must be a positive fixed duration, not %', coalesce(delta::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Use seconds, minutes, hours or days (months vary in length).';
  END IF;
  span := trim_scale(extract(epoch FROM end_time) - extract(epoch FROM begin_time));
  step := trim_scale(extract(epoch FROM delta));
  IF span = 0 OR mod(span, step) <> 0 THEN
    RAISE EXCEPTION 'mm_plan_regeneration: % does not tile [%, %) exactly', delta,
        micromegas._mm_time_text(begin_time), micromegas._mm_time_text(end_time)
      USING ERRCODE = 'invalid_parameter_value',
            DETAIL = format('The range is %s seconds long; %s seconds do not divide it into a whole, non-zero number of buckets.', span, step);
  END IF;
  buckets := trim_scale(span / step);
  -- The same length in seconds only: adding '1 day' to a timestamptz moves
  -- the calendar day in the session's TimeZone (23 or 25 hours across a DST
  -- change); buckets tile absolute time.
  fixed := make_interval(secs => step);
  IF buckets > 100000 THEN
    RAISE EXCEPTION 'mm_plan_regeneration: % buckets of % over [%, %) are too many', buckets, delta,
        micromegas._mm_time_text(begin_time), micromegas._mm_time_text(end_time)
      USING ERRCODE = 'program_limit_exceeded', HINT = 'At most 100000 buckets: split the range or use a larger delta.';
  END IF;
  SELECT p.*, begin_time + floor((extract(epoch FROM p.begin_insert_time) - extract(epoch FROM begin_time)) / step) * fixed AS b
    INTO bad
    FROM micromegas.lakehouse_partitions p
   WHERE p.view_set_name = $1 AND p.view_instance_id = 'global'
     AND tstzrange(p.begin_insert_time, p.end_insert_time) && tstzrange(begin_time, end_time)
     AND (p.begin_insert_time < begin_time OR p.end_insert_time > end_time
          OR p.end_insert_time > begin_time + (floor((extract(epoch FROM p.begin_insert_time) - extract(epoch FROM begin_time)) / step) + 1) * fixed)
   ORDER BY p.begin_insert_time
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'mm_plan_regeneration: partition % does not fit the buckets of % over [%, %)',
        micromegas._mm_partition_label(bad.view_set_name, bad.view_instance_id, bad.begin_insert_time,
                                       bad.end_insert_time, bad.file_schema_hash),
        delta, micromegas._mm_time_text(begin_time), micromegas._mm_time_text(end_time)
      USING ERRCODE = 'invalid_parameter_value',
            DETAIL = CASE WHEN bad.begin_insert_time < begin_time THEN 'It begins before the range.'
                          WHEN bad.end_insert_time > end_time THEN 'It ends after the range.'
                          ELSE format('It crosses the bucket boundary at %s.', micromegas._mm_time_text(bad.b + fixed)) END,
            HINT = 'Choose a range and delta whose boundaries match the existing partitions (list_partitions), '
                   'or retire the partition first (retire_partition_by_metadata).';
  END IF;
  RETURN QUERY SELECT begin_time + k * fixed, begin_time + (k + 1) * fixed
                 FROM generate_series(0, buckets::bigint - 1) k;
END
$$;
COMMENT ON FUNCTION micromegas.mm_plan_regeneration(text, timestamptz, timestamptz, interval) IS
  'The buckets a regeneration of [begin, end) by delta would write, or the partition that does not fit';

-- DROP retires the view's global partitions (every schema) in the same
-- transaction; a REPLACE retires nothing. mm_drop_view reports the counts.
-- Only in READ COMMITTED: at REPEATABLE READ or SERIALIZABLE the DELETE
-- below sees the transaction's snapshot, and a partition recorded after it
-- (a writer that held the row until it committed) would be left behind.
CREATE FUNCTION micromegas._mm_definitions_retire_dropped() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n bigint;
  bytes bigint;
  gone_rows micromegas.lakehouse_partitions[];
BEGIN
  IF NOT micromegas._mm_snapshot_per_statement() THEN
    RAISE EXCEPTION 'cannot drop materialized view "%" in a % transaction', OLD.view_set_name,
        upper(pg_catalog.current_setting('transaction_isolation'))
      USING ERRCODE = 'invalid_transaction_state',
            DETAIL = 'Its partitions are retired as the statement sees them: a partition recorded after the transaction''s snapshot would be left behind.',
            HINT = 'Drop it in a READ COMMITTED transaction.';
  END IF;
  WITH gone AS (
    DELETE FROM micromegas.lakehouse_partitions p
     WHERE p.view_set_name = OLD.view_set_name AND p.view_instance_id = 'global'
    RETURNING p.*)
  SELECT count(*), coalesce(array_agg(g), '{}') INTO n, gone_rows FROM gone g;
  SELECT coalesce(sum(u.file_size), 0) INTO bytes FROM micromegas._mm_unreferenced_files(gone_rows) u;
  PERFORM micromegas._mm_report('retired', n || ' ' || bytes);
  IF n > 0 THEN
    RAISE NOTICE 'retired % partition(s) of materialized view "%"; % bytes of files queued for deletion',
      n, OLD.view_set_name, bytes;
  END IF;
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_definitions_retire_dropped() IS
  'Trigger: retires the global partitions of a dropped view set and queues their files';
CREATE TRIGGER definitions_retire_dropped
  AFTER DELETE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_retire_dropped();

-- A name created again over partitions left from an earlier definition:
-- how many of them no longer match. (A changed definition is reported by
-- _mm_definition_changed.)
CREATE FUNCTION micromegas._mm_definitions_report_incompatible() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM micromegas._mm_report_incompatible(NEW.view_set_name, NEW.schema_hash);
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_definitions_report_incompatible() IS
  'Trigger: a NOTICE when a definition created over left-over partitions does not match some of them';

-- The notice of a definition written with `schema_hash` (or, in a read-only
-- dry run, that would be) whose partitions were written under another.
CREATE FUNCTION micromegas._mm_report_incompatible(name text, schema_hash bytea) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n bigint;
BEGIN
  SELECT count(*) INTO n FROM micromegas.lakehouse_partitions p
   WHERE p.view_set_name = name AND p.file_schema_hash <> schema_hash;
  IF n > 0 THEN
    RAISE NOTICE '% partition(s) of materialized view "%" do not match its schema', n, name
      USING HINT = format('list_incompatible_partitions(%L) lists them; retire_incompatible_partitions(%L) retires them.',
                          name, name);
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas._mm_report_incompatible(text,bytea) IS
  'The NOTICE of a view set''s partitions that another schema hash makes incompatible';
CREATE TRIGGER definitions_report_incompatible_insert
  AFTER INSERT ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_report_incompatible();
