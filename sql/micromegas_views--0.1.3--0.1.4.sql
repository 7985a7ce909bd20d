-- micromegas_views 0.1.3 -> 0.1.4. What changes:
-- * partition metadata (sql/partitions.sql, all new): lakehouse_partitions
--   and temporary_files, listing, retiring, incompatible partitions, the
--   write path and the atomic swap, the regeneration plan;
-- * options with_no_data (false: a CREATE queues a refresh; mm_create_view
--   returns its job_id, one more column) and auto_refresh (carried in
--   mm_view_set_snapshot, one more column);
-- * a DROP retires the view's global partitions: mm_drop_view reports how
--   many and how many bytes (two more result columns); mm_create_view
--   reports how many partitions do not match the new schema (one more);
-- * the role micromegas_service (the services that write partitions);
-- * definition history (sql/history.sql, all new): every version of every
--   definition, describe / restore / prune; the redirect of a CREATE OR
--   REPLACE into an UPDATE marks itself so the history says "replace";
-- * jobs (sql/jobs.sql, all new): refresh and regeneration requests, the
--   workers' claim / heartbeat / finish with leases, cancel;
-- * the overlap guard needs btree_gist: CREATE EXTENSION btree_gist before
--   ALTER EXTENSION micromegas_views UPDATE.

-- The roles, as CREATE EXTENSION makes them.
-- The roles: micromegas_reader reads the catalog (the daemon, a FlightSQL
-- replica that only loads it), micromegas_admin (a member of the reader)
-- changes it, micromegas_service (a member of the reader: the daemon and the
-- ingestion services) writes partitions. Roles belong to the cluster, not to a database, so
-- they are created only when missing and DROP EXTENSION leaves them. A role
-- that already exists and can log in or is a superuser is reported: every
-- member of these roles gets their privileges.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT rolname, rolcanlogin, rolsuper FROM pg_catalog.pg_roles
            WHERE rolname IN ('micromegas_admin', 'micromegas_reader', 'micromegas_service')
              AND (rolcanlogin OR rolsuper) LOOP
    RAISE WARNING 'role "%" already exists and %', r.rolname,
      CASE WHEN r.rolsuper THEN 'is a superuser' ELSE 'can log in' END
      USING HINT = 'These roles are meant to be NOLOGIN groups: grant them to the services'' login roles.';
  END LOOP;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'micromegas_reader') THEN
    CREATE ROLE micromegas_reader NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'micromegas_admin') THEN
    CREATE ROLE micromegas_admin NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'micromegas_service') THEN
    CREATE ROLE micromegas_service NOLOGIN;
  END IF;
  IF NOT pg_catalog.pg_has_role('micromegas_admin', 'micromegas_reader', 'MEMBER') THEN
    GRANT micromegas_reader TO micromegas_admin;
  END IF;
  IF NOT pg_catalog.pg_has_role('micromegas_service', 'micromegas_reader', 'MEMBER') THEN
    GRANT micromegas_reader TO micromegas_service;
  END IF;
END
$$;

CREATE FUNCTION micromegas."_mm_file_retention_seconds"() RETURNS INT /* i32 */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'file_retention_seconds_wrapper';

CREATE FUNCTION micromegas."_mm_job_lease_seconds"() RETURNS INT /* i32 */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'job_lease_seconds_wrapper';

CREATE FUNCTION micromegas."_mm_job_max_attempts"() RETURNS INT /* i32 */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'job_max_attempts_wrapper';

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
CREATE INDEX temporary_files_expiration ON micromegas.temporary_files (expiration);
COMMENT ON TABLE micromegas.temporary_files IS
  'Files of retired partitions; the daemon deletes them after their expiration (mm_expired_files)';

-- When a file retired now may be deleted.
CREATE FUNCTION micromegas._mm_file_expiration() RETURNS timestamptz
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN now() + make_interval(secs => micromegas._mm_file_retention_seconds());
END
$$;

-- Every deleted partition's file goes to temporary_files (empty partitions
-- have none). One INSERT per statement, whatever deleted the rows.
CREATE FUNCTION micromegas._mm_partitions_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  INSERT INTO micromegas.temporary_files (file_path, file_size, expiration)
  SELECT g.file_path, coalesce(g.file_size, 0), micromegas._mm_file_expiration()
    FROM gone g
   WHERE g.file_path IS NOT NULL;
  RETURN NULL;
END
$$;
CREATE TRIGGER partitions_queue_files
  AFTER DELETE ON micromegas.lakehouse_partitions
  REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_partitions_after_delete();
CREATE TRIGGER partitions_no_truncate
  BEFORE TRUNCATE ON micromegas.lakehouse_partitions
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- How messages name a time and a partition: RFC 3339 in UTC, whatever the
-- session's TimeZone.
CREATE FUNCTION micromegas._mm_time_text(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT coalesce(regexp_replace(to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '\.?0+$', '') || 'Z', 'NULL')
$$;

CREATE FUNCTION micromegas._mm_partition_label(
  view_set_name text, view_instance_id text, begin_insert_time timestamptz,
  end_insert_time timestamptz, file_schema_hash bytea) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT format('%s/%s [%s, %s) schema_hash=%s', $1, $2, micromegas._mm_time_text($3),
                micromegas._mm_time_text($4), coalesce(encode($5, 'hex'), 'NULL'))
$$;

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

-- As micromegas: every partition, optionally of one view set and instance.
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

-- As micromegas: retires every partition of one view instance lying within
-- [begin, end] (both inclusive), whatever its schema. One row per action.
CREATE FUNCTION micromegas.retire_partitions(
  view_set_name text, view_instance_id text, begin_time timestamptz, end_time timestamptz)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  target text := format('%s/%s', $1, $2);
  n bigint := 0;
  bytes bigint := 0;
  r record;
BEGIN
  PERFORM micromegas._mm_check_range('retire_partitions', begin_time, end_time);
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'retire_partitions: view_set_name and view_instance_id must not be NULL'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  FOR r IN
    WITH gone AS (
      DELETE FROM micromegas.lakehouse_partitions p
       WHERE p.view_set_name = $1 AND p.view_instance_id = $2
         AND p.begin_insert_time >= begin_time AND p.end_insert_time <= end_time
      RETURNING p.*)
    SELECT * FROM gone g ORDER BY g.begin_insert_time, g.end_insert_time, g.file_schema_hash
  LOOP
    n := n + 1;
    bytes := bytes + coalesce(r.file_size, 0);
    RETURN QUERY SELECT clock_timestamp(), format('retired partition %s; %s',
      micromegas._mm_partition_label(r.view_set_name, r.view_instance_id, r.begin_insert_time,
                                     r.end_insert_time, r.file_schema_hash),
      CASE WHEN r.file_path IS NULL THEN 'empty, no file'
           ELSE format('file %s (%s bytes) queued for deletion', r.file_path, coalesce(r.file_size, 0)) END);
  END LOOP;
  RETURN QUERY SELECT clock_timestamp(), format('retired %s partition(s) of %s within [%s, %s]; %s bytes queued for deletion',
    n, target, micromegas._mm_time_text(begin_time), micromegas._mm_time_text(end_time), bytes);
END
$$;

-- As micromegas: retires exactly one partition, named by its natural key and
-- schema hash (empty partitions too). Not found or ambiguous: an error, and
-- nothing is retired.
CREATE FUNCTION micromegas.retire_partition_by_metadata(
  view_set_name text, view_instance_id text, begin_insert_time timestamptz,
  end_insert_time timestamptz, file_schema_hash bytea)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
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

-- As micromegas: retires the one partition with this file.
CREATE FUNCTION micromegas.retire_partition_by_file(file_path text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
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

-- The daemon's claim of expired files: deletes up to max_files expired rows
-- and returns them. Rows another transaction holds are skipped, so two
-- daemons never get the same file. Call it in a transaction and commit
-- after deleting the files: a daemon that dies first gives them back.
CREATE FUNCTION micromegas.mm_expired_files(max_files integer DEFAULT 1000)
RETURNS TABLE (file_path text, file_size bigint, expiration timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF max_files IS NULL OR max_files < 1 THEN
    RAISE EXCEPTION 'mm_expired_files: max_files must be a positive number, not %', coalesce(max_files::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN QUERY
    DELETE FROM micromegas.temporary_files t
     WHERE t.ctid = ANY (ARRAY(
             SELECT x.ctid FROM micromegas.temporary_files x
              WHERE x.expiration <= now()
              ORDER BY x.expiration
              LIMIT max_files
                FOR UPDATE SKIP LOCKED))
    RETURNING t.file_path::text, t.file_size, t.expiration;
END
$$;

-- Every view set's current schema hash: the registered built-ins and the
-- DDL definitions.
CREATE VIEW micromegas.view_set_schema_hashes AS
  SELECT b.view_set_name, b.schema_hash FROM micromegas.builtin_view_sets b
  UNION ALL
  SELECT d.view_set_name, d.schema_hash FROM micromegas.lakehouse_view_set_definitions d;

-- As micromegas: every partition whose schema hash is not its view set's current
-- one (partitions of a view set that no longer exists are not listed: see
-- list_partitions). A row type, so the argument can keep micromegas' name.
CREATE TYPE micromegas.incompatible_partition AS (
  view_set_name text, view_instance_id text, begin_insert_time timestamptz,
  end_insert_time timestamptz, incompatible_schema_hash bytea, current_schema_hash bytea,
  file_path text, file_size bigint);
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

-- How many partitions of a view set do not match its current schema.
CREATE FUNCTION micromegas._mm_incompatible_count(name text) RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT count(*) FROM micromegas.lakehouse_partitions p
    JOIN micromegas.view_set_schema_hashes v ON v.view_set_name = p.view_set_name
   WHERE p.view_set_name = $1 AND v.view_set_name = $1 AND p.file_schema_hash <> v.schema_hash
$$;

-- As micromegas: retires every incompatible partition; one row per view set and
-- instance. A partition another transaction holds is not waited for: it
-- counts as failed, with a message, and the others are retired.
CREATE TYPE micromegas.partition_retirement AS (
  view_set_name text, view_instance_id text, partitions_retired bigint,
  partitions_failed bigint, storage_freed_bytes bigint, retirement_messages text[]);
CREATE FUNCTION micromegas.retire_incompatible_partitions(view_set_name text DEFAULT NULL)
RETURNS SETOF micromegas.partition_retirement
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
      RETURNING l.tid, coalesce(p.file_size, 0) AS file_size
    )
    SELECT c.vs, c.inst,
           count(g.tid), count(*) - count(g.tid), coalesce(sum(g.file_size), 0)::bigint,
           array_agg(CASE WHEN g.tid IS NOT NULL THEN 'SUCCESS: Retired partition ' || c.label
                          ELSE 'ERROR: Partition ' || c.label || ' is being changed by another transaction; not retired' END
                     ORDER BY c.begin_insert_time, c.file_schema_hash)
      FROM candidates c LEFT JOIN gone g ON g.tid = c.tid
     GROUP BY c.vs, c.inst
     ORDER BY c.vs, c.inst;
END
$$;

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
  p micromegas.lakehouse_partitions;
BEGIN
  p := ROW($1, $2, $3, $4, $5, $6, now(), $7, $8, $9, $10, $11, $12, $13, $14);
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

-- The atomic swap behind regeneration: retires every partition of the
-- instance within [begin, end] and writes the new ones (each of this view
-- set and instance, within the range), in one transaction.
CREATE FUNCTION micromegas.mm_replace_partitions(
  view_set_name text, view_instance_id text, begin_time timestamptz, end_time timestamptz,
  partitions micromegas.lakehouse_partitions[])
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  q micromegas.lakehouse_partitions;
  o micromegas.lakehouse_partitions;
  n bigint;
BEGIN
  PERFORM micromegas._mm_check_range('mm_replace_partitions', begin_time, end_time);
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'mm_replace_partitions: view_set_name and view_instance_id must not be NULL'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
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

-- Upstream's regeneration rules: delta tiles [begin, end) exactly and every
-- partition of the view set's global instance that overlaps the range lies
-- within one bucket. Returns the buckets, or names the partition that does
-- not fit.
CREATE FUNCTION micromegas.mm_plan_regeneration(
  view_set_name text, begin_time timestamptz, end_time timestamptz, delta interval)
RETURNS TABLE (bucket_begin timestamptz, bucket_end timestamptz)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  span numeric;
  step numeric;
  buckets numeric;
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
  IF buckets > 100000 THEN
    RAISE EXCEPTION 'mm_plan_regeneration: % buckets of % over [%, %) are too many', buckets, delta,
        micromegas._mm_time_text(begin_time), micromegas._mm_time_text(end_time)
      USING ERRCODE = 'program_limit_exceeded', HINT = 'At most 100000 buckets: split the range or use a larger delta.';
  END IF;
  SELECT p.*, begin_time + floor((extract(epoch FROM p.begin_insert_time) - extract(epoch FROM begin_time)) / step) * delta AS b
    INTO bad
    FROM micromegas.lakehouse_partitions p
   WHERE p.view_set_name = $1 AND p.view_instance_id = 'global'
     AND tstzrange(p.begin_insert_time, p.end_insert_time) && tstzrange(begin_time, end_time)
     AND (p.begin_insert_time < begin_time OR p.end_insert_time > end_time
          OR p.end_insert_time > begin_time + (floor((extract(epoch FROM p.begin_insert_time) - extract(epoch FROM begin_time)) / step) + 1) * delta)
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
                          ELSE format('It crosses the bucket boundary at %s.', micromegas._mm_time_text(bad.b + delta)) END,
            HINT = 'Choose a range and delta whose boundaries match the existing partitions (list_partitions), '
                   'or retire the partition first (retire_partition_by_metadata).';
  END IF;
  RETURN QUERY SELECT begin_time + k * delta, begin_time + (k + 1) * delta
                 FROM generate_series(0, buckets::bigint - 1) k;
END
$$;

-- DROP retires the view's global partitions (every schema) in the same
-- transaction; a REPLACE retires nothing. mm_drop_view reports the counts.
CREATE FUNCTION micromegas._mm_definitions_retire_dropped() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n bigint;
  bytes bigint;
BEGIN
  WITH gone AS (
    DELETE FROM micromegas.lakehouse_partitions p
     WHERE p.view_set_name = OLD.view_set_name AND p.view_instance_id = 'global'
    RETURNING coalesce(p.file_size, 0) AS file_size)
  SELECT count(*), coalesce(sum(g.file_size), 0) INTO n, bytes FROM gone g;
  PERFORM pg_catalog.set_config('micromegas_views.retired', n || ' ' || bytes, true);
  IF n > 0 THEN
    RAISE NOTICE 'retired % partition(s) of materialized view "%"; % bytes of files queued for deletion',
      n, OLD.view_set_name, bytes;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER definitions_retire_dropped
  AFTER DELETE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_retire_dropped();

-- A definition whose schema hash changed (or a name created again): how
-- many of its partitions no longer match.
CREATE FUNCTION micromegas._mm_definitions_report_incompatible() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n bigint := micromegas._mm_incompatible_count(NEW.view_set_name);
BEGIN
  IF n > 0 THEN
    RAISE NOTICE '% partition(s) of materialized view "%" do not match its schema', n, NEW.view_set_name
      USING HINT = format('list_incompatible_partitions(%L) lists them; retire_incompatible_partitions(%L) retires them.',
                          NEW.view_set_name, NEW.view_set_name);
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER definitions_report_incompatible_insert
  AFTER INSERT ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_report_incompatible();
CREATE TRIGGER definitions_report_incompatible_update
  AFTER UPDATE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW WHEN (OLD.schema_hash IS DISTINCT FROM NEW.schema_hash)
  EXECUTE FUNCTION micromegas._mm_definitions_report_incompatible();

-- micromegas_views: every version of every definition. One row per
-- committed row change of the definitions table (whatever wrote it), the
-- definition as it was after the change (before it, for a drop), so an
-- operator can see what a view was, who changed it, and put it back.

-- No surrogate key: a pg_restore loads the dumped rows and, restoring the
-- definitions, adds one row per definition; nothing there may collide.
CREATE TABLE micromegas.lakehouse_view_set_definition_history (
  view_set_name text NOT NULL,
  -- The catalog version of the change (what mm_create_view returned).
  version bigint NOT NULL,
  -- 'upgrade': the definition as ALTER EXTENSION UPDATE found it, when
  -- the history began (0.1.4).
  operation text NOT NULL CHECK (operation IN ('install', 'upgrade', 'create', 'replace', 'recheck', 'drop', 'restore')),
  definition_sql text NOT NULL,
  extract_query text NOT NULL,
  count_src_query text NOT NULL,
  merge_partitions_query text NOT NULL,
  update_group integer NOT NULL,
  view_options jsonb NOT NULL,
  schema_ipc text NOT NULL,
  schema_hash bytea NOT NULL,
  load_status text NOT NULL,
  load_error text,
  updated_by text,
  updated_by_role text,
  changed_at timestamptz NOT NULL
);
CREATE INDEX lakehouse_view_set_definition_history_name
  ON micromegas.lakehouse_view_set_definition_history (view_set_name, version);
CREATE INDEX lakehouse_view_set_definition_history_changed
  ON micromegas.lakehouse_view_set_definition_history (changed_at);
COMMENT ON TABLE micromegas.lakehouse_view_set_definition_history IS
  'Every committed version of every materialized view definition (written by a trigger)';

-- What kind of write an INSERT or UPDATE of a definition is: the extension's
-- own (install, a re-check of a dependent), a restore, or an admin's create
-- or replace (a CREATE OR REPLACE turned into an UPDATE marks itself). The
-- history records it; with_no_data = false acts on creates and replaces only.
CREATE FUNCTION micromegas._mm_write_kind(tg_op text, view_set_name text) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE
    WHEN micromegas._mm_installing() THEN 'install'
    WHEN pg_catalog.current_setting('micromegas_views.restoring', true) = $2 THEN 'restore'
    WHEN pg_catalog.current_setting('micromegas_views.replacing', true) = $2 THEN 'replace'
    WHEN pg_catalog.pg_trigger_depth() > 1 THEN 'recheck'
    WHEN $1 = 'INSERT' THEN 'create'
    ELSE 'replace' END
$$;

-- AFTER each row change. Named to fire first among the table's AFTER
-- triggers (Postgres fires them by name), before a re-check of dependents
-- moves the catalog version on.
CREATE FUNCTION micromegas._mm_definitions_history() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r micromegas.lakehouse_view_set_definitions;
  op text;
BEGIN
  IF TG_OP = 'DELETE' THEN
    r := OLD;
    op := 'drop';
  ELSE
    r := NEW;
    op := micromegas._mm_write_kind(TG_OP, NEW.view_set_name);
  END IF;
  INSERT INTO micromegas.lakehouse_view_set_definition_history
    (view_set_name, version, operation, definition_sql, extract_query, count_src_query, merge_partitions_query,
     update_group, view_options, schema_ipc, schema_hash, load_status, load_error, updated_by, updated_by_role,
     changed_at)
  SELECT r.view_set_name, s.version, op, r.definition_sql, r.extract_query, r.count_src_query,
         r.merge_partitions_query, r.update_group, r.view_options, r.schema_ipc, r.schema_hash, r.load_status,
         r.load_error,
         CASE WHEN op = 'drop' THEN micromegas._mm_actor() ELSE r.updated_by END,
         CASE WHEN op = 'drop' THEN session_user::text ELSE r.updated_by_role END,
         CASE WHEN op = 'drop' THEN clock_timestamp() ELSE r.updated_at END
    FROM micromegas.catalog_state s;
  RETURN NULL;
END
$$;
CREATE TRIGGER definitions_0_history
  AFTER INSERT OR UPDATE OR DELETE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_history();
CREATE TRIGGER definition_history_no_truncate
  BEFORE TRUNCATE ON micromegas.lakehouse_view_set_definition_history
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- Every version of one view, oldest first.
CREATE FUNCTION micromegas.mm_view_history(name text)
RETURNS TABLE (version bigint, operation text, changed_at timestamptz, updated_by text, updated_by_role text,
               update_group integer, schema_hash bytea, load_status text, definition_sql text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT h.version, h.operation, h.changed_at, h.updated_by, h.updated_by_role, h.update_group, h.schema_hash,
         h.load_status, h.definition_sql
    FROM micromegas.lakehouse_view_set_definition_history h
   WHERE h.view_set_name = $1
   ORDER BY h.version, h.changed_at
$$;

-- The history row of a view at a version (the latest, should a restore
-- have recorded one twice), or P0002.
CREATE FUNCTION micromegas._mm_history_version(name text, version bigint)
RETURNS micromegas.lakehouse_view_set_definition_history
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  h micromegas.lakehouse_view_set_definition_history;
BEGIN
  SELECT * INTO h FROM micromegas.lakehouse_view_set_definition_history x
   WHERE x.view_set_name = $1 AND x.version = $2 ORDER BY x.changed_at DESC LIMIT 1;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'materialized view "%" has no version %', $1, $2
      USING ERRCODE = 'no_data_found',
            HINT = format('mm_view_history(%L) lists its versions.', $1);
  END IF;
  RETURN h;
END
$$;

-- A view as it is (version NULL) or as it was at a version of its history.
-- Row types, so that the arguments keep their names (name, version).
CREATE TYPE micromegas.view_version AS (
  view_set_name text, version bigint, operation text, current boolean, definition_sql text,
  update_group integer, schema text, schema_hash bytea, load_status text, load_error text,
  updated_by text, changed_at timestamptz);
CREATE TYPE micromegas.view_change AS (
  view_set_name text, status text, version bigint, incompatible_partitions bigint);
CREATE FUNCTION micromegas.mm_describe_view(name text, version bigint DEFAULT NULL)
RETURNS SETOF micromegas.view_version
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  h micromegas.lakehouse_view_set_definition_history;
  latest bigint;
BEGIN
  SELECT max(x.version) INTO latest FROM micromegas.lakehouse_view_set_definition_history x
   WHERE x.view_set_name = $1;
  IF $2 IS NULL THEN
    IF NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = $1) THEN
      IF latest IS NULL THEN
        RAISE EXCEPTION 'materialized view "%" does not exist', $1 USING ERRCODE = 'undefined_object';
      END IF;
      RAISE EXCEPTION 'materialized view "%" does not exist', $1
        USING ERRCODE = 'undefined_object',
              HINT = format('It was dropped; mm_view_history(%L) lists its versions.', $1);
    END IF;
    RETURN QUERY
      SELECT d.view_set_name, latest, 'current'::text, true, d.definition_sql, d.update_group,
             micromegas._mm_format_schema(d.schema_ipc), d.schema_hash, d.load_status, d.load_error,
             d.updated_by, d.updated_at
        FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = $1;
    RETURN;
  END IF;
  h := micromegas._mm_history_version($1, $2);
  RETURN QUERY SELECT h.view_set_name, h.version, h.operation,
                      h.version = latest AND h.operation <> 'drop'
                        AND EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = $1),
                      h.definition_sql, h.update_group, micromegas._mm_format_schema(h.schema_ipc), h.schema_hash,
                      h.load_status, h.load_error, h.updated_by, h.changed_at;
END
$$;

-- Puts a view back as it was at a version: written like a CREATE OR
-- REPLACE (or a CREATE, when the view was dropped), so validated, its
-- dependents re-checked, announced, and recorded as a 'restore'.
CREATE FUNCTION micromegas.mm_restore_view(name text, version bigint)
RETURNS SETOF micromegas.view_change
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  h micromegas.lakehouse_view_set_definition_history;
  outcome text := 'restored';
BEGIN
  PERFORM micromegas._mm_lock_catalog();
  h := micromegas._mm_history_version(mm_restore_view.name, mm_restore_view.version);
  PERFORM pg_catalog.set_config('micromegas_views.restoring', h.view_set_name, true);
  UPDATE micromegas.lakehouse_view_set_definitions d
     SET definition_sql = h.definition_sql, extract_query = h.extract_query, count_src_query = h.count_src_query,
         merge_partitions_query = h.merge_partitions_query, update_group = h.update_group,
         view_options = h.view_options
   WHERE d.view_set_name = h.view_set_name;
  IF NOT FOUND THEN
    INSERT INTO micromegas.lakehouse_view_set_definitions
           (view_set_name, definition_sql, extract_query, count_src_query, merge_partitions_query, update_group,
            view_options)
    VALUES (h.view_set_name, h.definition_sql, h.extract_query, h.count_src_query, h.merge_partitions_query,
            h.update_group, h.view_options);
    outcome := 'recreated';
  END IF;
  PERFORM pg_catalog.set_config('micromegas_views.restoring', '', true);
  RETURN QUERY SELECT h.view_set_name, outcome, micromegas.mm_catalog_version(),
                      micromegas._mm_incompatible_count(h.view_set_name);
END
$$;

-- Forgets versions older than the interval, except each view's latest.
CREATE FUNCTION micromegas.mm_prune_view_history(older_than interval)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n bigint;
BEGIN
  IF older_than IS NULL OR older_than < interval '0' THEN
    RAISE EXCEPTION 'mm_prune_view_history: older_than must be a non-negative interval, not %',
        coalesce(older_than::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  DELETE FROM micromegas.lakehouse_view_set_definition_history h
   WHERE h.changed_at < now() - older_than
     AND h.version < (SELECT max(l.version) FROM micromegas.lakehouse_view_set_definition_history l
                       WHERE l.view_set_name = h.view_set_name);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;

-- micromegas_views: refresh jobs. Admins request work on a view set (a
-- refresh, a regeneration bucket); the maintenance daemon's workers claim
-- it with a lease (FOR UPDATE SKIP LOCKED: no job runs twice at once),
-- heartbeat, and finish it. Every state change is announced on
-- micromegas_jobs.

CREATE TABLE micromegas.jobs (
  job_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  kind text NOT NULL CHECK (kind IN ('refresh', 'regenerate', 'materialize')),
  view_set_name text NOT NULL,
  -- The insert-time range; a NULL bound is unbounded (everything).
  begin_time timestamptz,
  end_time timestamptz,
  params jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(params) = 'object'),
  state text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
  cancel_requested boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  created_by text NOT NULL,
  created_by_role text NOT NULL DEFAULT session_user,
  started_at timestamptz,
  finished_at timestamptz,
  -- The worker that holds the job (running), or held it last.
  worker text,
  lease_expires_at timestamptz,
  attempts integer NOT NULL DEFAULT 0,
  failure_phase text,
  failure_message text,
  failure_retryable boolean,
  CONSTRAINT jobs_range CHECK (begin_time IS NULL OR end_time IS NULL OR begin_time <= end_time),
  CONSTRAINT jobs_lease CHECK ((state = 'running') = (lease_expires_at IS NOT NULL) AND (state <> 'running' OR worker IS NOT NULL))
);
CREATE INDEX jobs_queued ON micromegas.jobs (created_at) WHERE state = 'queued';
CREATE INDEX jobs_running ON micromegas.jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_view ON micromegas.jobs (view_set_name, state);
COMMENT ON TABLE micromegas.jobs IS
  'Work requested on view sets (refresh, regeneration), claimed by the daemon''s workers with a lease';

-- Every state change (and a cancellation request) is announced, once, at commit.
CREATE FUNCTION micromegas._mm_jobs_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state OR NEW.cancel_requested IS DISTINCT FROM OLD.cancel_requested THEN
    PERFORM pg_notify('micromegas_jobs', json_build_object(
      'job_id', NEW.job_id, 'kind', NEW.kind, 'view_set_name', NEW.view_set_name, 'state', NEW.state,
      'cancel_requested', NEW.cancel_requested)::text);
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER jobs_notify
  AFTER INSERT OR UPDATE ON micromegas.jobs
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_jobs_notify();
CREATE TRIGGER jobs_no_truncate
  BEFORE TRUNCATE ON micromegas.jobs
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- A request: the view set must exist and load. A queued job of the same
-- kind whose range covers the requested one is returned instead of a new one.
CREATE FUNCTION micromegas._mm_request_job(
  kind text, name text, begin_time timestamptz, end_time timestamptz, params jsonb,
  OUT job_id uuid, OUT existing boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  problem text;
BEGIN
  IF name IS NULL THEN
    RAISE EXCEPTION 'a job needs a view set name' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF begin_time > end_time THEN
    RAISE EXCEPTION 'the range of a % job on "%" begins after it ends', kind, name
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = name) THEN
    SELECT coalesce(d.load_error, '') INTO problem FROM micromegas.lakehouse_view_set_definitions d
     WHERE d.view_set_name = name AND d.load_status <> 'ok';
    IF FOUND THEN
      RAISE EXCEPTION 'materialized view "%" does not load', name
        USING ERRCODE = 'object_not_in_prerequisite_state', DETAIL = problem,
              HINT = 'Replace it (or what it reads) so that it validates, then request the job again.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = name) THEN
      RAISE EXCEPTION 'view set "%" does not exist', name
        USING ERRCODE = 'undefined_object', HINT = 'list_view_sets() shows the view sets.';
    END IF;
  END IF;
  -- One requester at a time per view set, so two equal requests get one job.
  PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('micromegas_views.jobs:' || name, 0));
  SELECT j.job_id INTO job_id FROM micromegas.jobs j
   WHERE j.kind = _mm_request_job.kind AND j.view_set_name = name AND j.state = 'queued' AND NOT j.cancel_requested
     AND (j.begin_time IS NULL OR (_mm_request_job.begin_time IS NOT NULL AND j.begin_time <= _mm_request_job.begin_time))
     AND (j.end_time IS NULL OR (_mm_request_job.end_time IS NOT NULL AND j.end_time >= _mm_request_job.end_time))
   ORDER BY j.created_at LIMIT 1;
  IF FOUND THEN
    existing := true;
    RETURN;
  END IF;
  INSERT INTO micromegas.jobs (kind, view_set_name, begin_time, end_time, params, created_by)
  VALUES (_mm_request_job.kind, name, _mm_request_job.begin_time, _mm_request_job.end_time,
          coalesce(_mm_request_job.params, '{}'), micromegas._mm_actor())
  RETURNING jobs.job_id INTO job_id;
  existing := false;
END
$$;

-- A refresh of a view set over a range (NULL bounds: everything).
CREATE FUNCTION micromegas.mm_refresh_view(
  name text, begin_time timestamptz DEFAULT NULL, end_time timestamptz DEFAULT NULL, params jsonb DEFAULT '{}')
RETURNS uuid
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT r.job_id FROM micromegas._mm_request_job('refresh', $1, $2, $3, $4) r
$$;

-- As micromegas: regenerate [begin, end) in buckets of partition_delta_seconds —
-- checked by mm_plan_regeneration's rules, one queued job per bucket.
CREATE FUNCTION micromegas.regenerate_partitions(
  view_set_name text, begin_time timestamptz, end_time timestamptz, partition_delta_seconds integer)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  bucket record;
  r record;
BEGIN
  IF partition_delta_seconds IS NULL OR partition_delta_seconds <= 0 THEN
    RAISE EXCEPTION 'regenerate_partitions: partition_delta_seconds must be a positive number of seconds, not %',
        coalesce(partition_delta_seconds::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOR bucket IN SELECT * FROM micromegas.mm_plan_regeneration($1, $2, $3, make_interval(secs => partition_delta_seconds)) LOOP
    SELECT * INTO r FROM micromegas._mm_request_job('regenerate', $1, bucket.bucket_begin, bucket.bucket_end,
                                                     jsonb_build_object('partition_delta_seconds', partition_delta_seconds));
    RETURN QUERY SELECT clock_timestamp(), format('%s regeneration of %s [%s, %s): job %s',
      CASE WHEN r.existing THEN 'already queued:' ELSE 'queued' END, $1,
      micromegas._mm_time_text(bucket.bucket_begin), micromegas._mm_time_text(bucket.bucket_end), r.job_id);
  END LOOP;
END
$$;

-- Leases that ran out: back to the queue, or failed after
-- micromegas_views.job_max_attempts claims; a job whose cancellation was
-- requested is cancelled.
CREATE FUNCTION micromegas._mm_expire_leases() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  max_attempts integer := micromegas._mm_job_max_attempts();
  n integer;
BEGIN
  UPDATE micromegas.jobs j
     SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                      WHEN j.attempts >= max_attempts THEN 'failed' ELSE 'queued' END,
         finished_at = CASE WHEN j.cancel_requested OR j.attempts >= max_attempts THEN clock_timestamp() END,
         failure_phase = 'lease',
         failure_message = format('the lease of worker %s expired at %s (claim %s of %s)', j.worker,
                                  micromegas._mm_time_text(j.lease_expires_at), j.attempts, max_attempts),
         failure_retryable = NOT j.cancel_requested AND j.attempts < max_attempts,
         lease_expires_at = NULL
   WHERE j.job_id = ANY (ARRAY(
           SELECT x.job_id FROM micromegas.jobs x
            WHERE x.state = 'running' AND x.lease_expires_at < clock_timestamp()
              FOR UPDATE SKIP LOCKED));
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;

-- A worker claims the oldest queued job (of the given kinds), with a lease
-- of micromegas_views.job_lease. No row: nothing to do.
CREATE FUNCTION micromegas.mm_claim_job(worker text, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.jobs
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF coalesce(btrim(worker), '') = '' THEN
    RAISE EXCEPTION 'mm_claim_job: a worker name is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM micromegas._mm_expire_leases();
  RETURN QUERY
    UPDATE micromegas.jobs j
       SET state = 'running', worker = mm_claim_job.worker, started_at = clock_timestamp(),
           lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds()),
           attempts = j.attempts + 1
     WHERE j.job_id = (SELECT x.job_id FROM micromegas.jobs x
                        WHERE x.state = 'queued' AND (kinds IS NULL OR x.kind = ANY (kinds))
                        ORDER BY x.created_at LIMIT 1
                          FOR UPDATE SKIP LOCKED)
    RETURNING j.*;
END
$$;

-- The row of a job this worker holds, locked; otherwise 55000 saying why.
CREATE FUNCTION micromegas._mm_held_job(id uuid, worker text) RETURNS micromegas.jobs
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j micromegas.jobs;
BEGIN
  SELECT * INTO j FROM micromegas.jobs x WHERE x.job_id = id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % does not exist', id USING ERRCODE = 'no_data_found';
  END IF;
  IF j.state <> 'running' OR j.worker IS DISTINCT FROM _mm_held_job.worker THEN
    RAISE EXCEPTION 'job % is not held by worker %', id, worker
      USING ERRCODE = 'object_not_in_prerequisite_state',
            DETAIL = format('The job is %s%s.', j.state,
                            CASE WHEN j.worker IS NOT NULL THEN format(', held by %s', j.worker) ELSE '' END),
            HINT = 'Its lease may have expired: the job went back to the queue. Stop working on it.';
  END IF;
  RETURN j;
END
$$;

-- The worker is alive: extends the lease. Returns 'running', or
-- 'cancel_requested' when the worker should stop (and finish the job).
CREATE FUNCTION micromegas.mm_heartbeat_job(job_id uuid, worker text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j micromegas.jobs := micromegas._mm_held_job($1, $2);
BEGIN
  UPDATE micromegas.jobs x
     SET lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds())
   WHERE x.job_id = $1;
  RETURN CASE WHEN j.cancel_requested THEN 'cancel_requested' ELSE 'running' END;
END
$$;

-- The worker's result. Returns the job's new state: done; failed (or queued
-- again when retryable and claims remain); cancelled when that was requested.
CREATE FUNCTION micromegas.mm_finish_job(
  job_id uuid, worker text, ok boolean, phase text DEFAULT NULL, message text DEFAULT NULL,
  retryable boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j micromegas.jobs := micromegas._mm_held_job($1, $2);
  next_state text;
BEGIN
  IF ok IS NULL THEN
    RAISE EXCEPTION 'mm_finish_job: ok must be true or false' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  next_state := CASE WHEN j.cancel_requested THEN 'cancelled'
                     WHEN ok THEN 'done'
                     WHEN retryable AND j.attempts < micromegas._mm_job_max_attempts() THEN 'queued'
                     ELSE 'failed' END;
  UPDATE micromegas.jobs x
     SET state = next_state, lease_expires_at = NULL,
         finished_at = CASE WHEN next_state = 'queued' THEN NULL ELSE clock_timestamp() END,
         failure_phase = CASE WHEN ok THEN NULL ELSE $4 END,
         failure_message = CASE WHEN ok THEN NULL ELSE $5 END,
         failure_retryable = CASE WHEN ok THEN NULL ELSE coalesce($6, false) END
   WHERE x.job_id = $1;
  RETURN next_state;
END
$$;

-- Cancels a job: a queued one at once; a running one is marked, and its
-- worker sees it on its next heartbeat.
CREATE FUNCTION micromegas.mm_cancel_job(job_id uuid) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j micromegas.jobs;
BEGIN
  SELECT * INTO j FROM micromegas.jobs x WHERE x.job_id = $1 FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % does not exist', $1 USING ERRCODE = 'no_data_found';
  END IF;
  IF j.state = 'queued' THEN
    UPDATE micromegas.jobs x SET state = 'cancelled', finished_at = clock_timestamp(), cancel_requested = true
     WHERE x.job_id = $1;
    RETURN 'cancelled';
  ELSIF j.state = 'running' THEN
    UPDATE micromegas.jobs x SET cancel_requested = true WHERE x.job_id = $1;
    RETURN 'cancel_requested';
  END IF;
  RAISE EXCEPTION 'job % is already %', $1, j.state
    USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

-- One job, or jobs by state and view set, newest first.
CREATE FUNCTION micromegas.mm_job(job_id uuid) RETURNS SETOF micromegas.jobs
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN QUERY SELECT * FROM micromegas.jobs x WHERE x.job_id = $1;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % does not exist', $1 USING ERRCODE = 'no_data_found';
  END IF;
END
$$;

CREATE FUNCTION micromegas.list_jobs(state text DEFAULT NULL, view_set_name text DEFAULT NULL)
RETURNS SETOF micromegas.jobs
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM micromegas.jobs x
   WHERE ($1 IS NULL OR x.state = $1) AND ($2 IS NULL OR x.view_set_name = $2)
   ORDER BY x.created_at DESC
$$;

-- Dropping a view cancels its queued jobs and asks its running ones to stop.
CREATE FUNCTION micromegas._mm_definitions_cancel_jobs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  UPDATE micromegas.jobs j
     SET state = CASE WHEN j.state = 'queued' THEN 'cancelled' ELSE j.state END,
         finished_at = CASE WHEN j.state = 'queued' THEN clock_timestamp() ELSE j.finished_at END,
         cancel_requested = true,
         failure_phase = CASE WHEN j.state = 'queued' THEN 'drop' ELSE j.failure_phase END,
         failure_message = CASE WHEN j.state = 'queued' THEN format('materialized view "%s" was dropped', OLD.view_set_name)
                                ELSE j.failure_message END
   WHERE j.view_set_name = OLD.view_set_name AND j.state IN ('queued', 'running');
  RETURN NULL;
END
$$;
CREATE TRIGGER definitions_cancel_jobs
  AFTER DELETE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_cancel_jobs();

-- with_no_data = false: creating (or replacing) the view also queues a
-- refresh of everything; mm_create_view returns its id. Not for the
-- extension's own re-checks, installs or restores.
CREATE FUNCTION micromegas._mm_definitions_refresh_on_create() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r record;
BEGIN
  IF NEW.load_status <> 'ok'
     OR micromegas._mm_write_kind(TG_OP, NEW.view_set_name) NOT IN ('create', 'replace') THEN
    RETURN NULL;
  END IF;
  SELECT * INTO r FROM micromegas._mm_request_job('refresh', NEW.view_set_name, NULL, NULL, '{}');
  PERFORM pg_catalog.set_config('micromegas_views.created_job', r.job_id::text, true);
  RETURN NULL;
END
$$;
CREATE TRIGGER definitions_refresh_on_create
  AFTER INSERT OR UPDATE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW WHEN (NEW.view_options->>'with_no_data' = 'false')
  EXECUTE FUNCTION micromegas._mm_definitions_refresh_on_create();

-- The history begins with every definition as it is now.
INSERT INTO micromegas.lakehouse_view_set_definition_history
  (view_set_name, version, operation, definition_sql, extract_query, count_src_query, merge_partitions_query,
   update_group, view_options, schema_ipc, schema_hash, load_status, load_error, updated_by, updated_by_role,
   changed_at)
SELECT d.view_set_name, s.version, CASE WHEN d.shipped THEN 'install' ELSE 'upgrade' END, d.definition_sql,
       d.extract_query, d.count_src_query, d.merge_partitions_query, d.update_group, d.view_options, d.schema_ipc,
       d.schema_hash, d.load_status, d.load_error, d.updated_by, d.updated_by_role, d.updated_at
  FROM micromegas.lakehouse_view_set_definitions d, micromegas.catalog_state s;

CREATE OR REPLACE FUNCTION micromegas._mm_definitions_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  internal boolean := pg_catalog.pg_trigger_depth() > 1;
  statement_sql text := NEW.definition_sql;
  p record;
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM micromegas._mm_lock_catalog();
    NEW.shipped := micromegas._mm_installing();
    IF NOT NEW.shipped AND EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d
                                    WHERE d.view_set_name = NEW.view_set_name AND d.shipped) THEN
      -- An INSERT over a row still exactly as shipped becomes an UPDATE of
      -- it (validated like any other, keeping the given timestamps and
      -- actor): this is how a restore (CREATE EXTENSION, then the dumped
      -- rows) brings back a replaced log_stats.
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = NEW.definition_sql, extract_query = NEW.extract_query,
             count_src_query = NEW.count_src_query, merge_partitions_query = NEW.merge_partitions_query,
             update_group = NEW.update_group, view_options = NEW.view_options,
             created_at = NEW.created_at, updated_at = NEW.updated_at, updated_by = NEW.updated_by,
             load_status = coalesce(NEW.load_status, 'ok')
       WHERE d.view_set_name = NEW.view_set_name;
      RETURN NULL;
    END IF;
  ELSE
    PERFORM micromegas._mm_next_version();
    -- Rows stay "as shipped" only through the extension's own scripts.
    NEW.shipped := OLD.shipped AND micromegas._mm_installing();
    IF internal AND NEW.load_status = 'failed' AND OLD.load_status IS DISTINCT FROM 'failed'
       AND (NEW.view_set_name, NEW.definition_sql, NEW.extract_query, NEW.count_src_query,
            NEW.merge_partitions_query, NEW.update_group, NEW.view_options)
           IS NOT DISTINCT FROM
           (OLD.view_set_name, OLD.definition_sql, OLD.extract_query, OLD.count_src_query,
            OLD.merge_partitions_query, OLD.update_group, OLD.view_options) THEN
      -- The extension marks a definition whose source changed as failed to load.
      RETURN NEW;
    END IF;
    IF NEW.view_set_name IS DISTINCT FROM OLD.view_set_name THEN
      RAISE EXCEPTION 'cannot rename materialized view "%"', OLD.view_set_name
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Create the view under the new name, then drop the old one.';
    END IF;
    IF NEW.definition_sql IS NOT DISTINCT FROM OLD.definition_sql
       AND (NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query, NEW.update_group, NEW.view_options)
           IS DISTINCT FROM
           (OLD.extract_query, OLD.count_src_query, OLD.merge_partitions_query, OLD.update_group, OLD.view_options)
       AND num_nonnulls(NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query,
                        NEW.update_group, NEW.view_options) > 0 THEN
      -- Only the columns changed: the stored text is re-rendered from them.
      statement_sql := NULL;
    END IF;
  END IF;

  SELECT * INTO p FROM micromegas._mm_prepare_definition(
    NEW.view_set_name, statement_sql, NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query,
    NEW.update_group, NEW.view_options,
    -- A restored row that had failed to load is validated again: it loads
    -- if it plans now, and is kept as failed with the fresh reason if its
    -- queries still do not plan. Any other problem is refused as usual.
    (TG_OP = 'INSERT' OR internal) AND NEW.load_status = 'failed');

  IF EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = p.view_set_name) THEN
    RAISE EXCEPTION 'view set "%" already exists as a built-in view set', p.view_set_name
      USING ERRCODE = 'duplicate_object',
            DETAIL = 'Built-in view sets (registered by the services) and materialized views share one namespace.',
            HINT = 'Choose another name for the materialized view.';
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = p.view_set_name) THEN
      IF NOT p.or_replace THEN
        RAISE EXCEPTION 'materialized view "%" already exists', p.view_set_name
          USING ERRCODE = 'duplicate_object',
                HINT = 'Use CREATE OR REPLACE MATERIALIZED VIEW to replace it.';
      END IF;
      -- CREATE OR REPLACE of an existing view: an UPDATE of its row. Its
      -- trigger asks the same question again and gets the answer just
      -- computed, from the backend's memory; it re-checks the dependents.
      -- The history records it as a replace, not as the extension's own
      -- re-check (sql/history.sql).
      PERFORM pg_catalog.set_config('micromegas_views.replacing', p.view_set_name, true);
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = NEW.definition_sql, extract_query = NEW.extract_query,
             count_src_query = NEW.count_src_query, merge_partitions_query = NEW.merge_partitions_query,
             update_group = NEW.update_group, view_options = NEW.view_options,
             updated_at = clock_timestamp(), updated_by = coalesce(NEW.updated_by, micromegas._mm_actor()),
             load_status = 'ok'
       WHERE d.view_set_name = p.view_set_name;
      PERFORM pg_catalog.set_config('micromegas_views.replacing', '', true);
      -- mm_create_view reports the replace (a skipped INSERT returns no row).
      PERFORM pg_catalog.set_config('micromegas_views.replaced', p.view_set_name, true);
      RETURN NULL;
    END IF;
    PERFORM micromegas._mm_next_version();
  END IF;

  NEW.view_set_name := p.view_set_name;
  NEW.definition_sql := p.definition_sql;
  NEW.extract_query := p.extract_query;
  NEW.count_src_query := p.count_src_query;
  NEW.merge_partitions_query := p.merge_partitions_query;
  NEW.update_group := p.update_group;
  NEW.view_options := p.view_options;
  NEW.schema_ipc := p.schema_ipc;
  NEW.schema_json := p.schema_json;
  NEW.schema_hash := p.schema_hash;
  NEW.reads := p.reads;
  NEW.load_status := CASE WHEN p.load_error IS NULL THEN 'ok' ELSE 'failed' END;
  NEW.load_error := p.load_error;
  -- The Postgres role that made the change: no setting can change it.
  NEW.updated_by_role := session_user;
  IF TG_OP = 'INSERT' OR internal THEN
    -- Given timestamps and actor are kept (a restore reproduces them; a
    -- re-validation by the extension changes no definition).
    NEW.updated_at := coalesce(NEW.updated_at, clock_timestamp());
    NEW.updated_by := coalesce(NEW.updated_by, micromegas._mm_actor());
    NEW.created_at := coalesce(NEW.created_at, OLD.created_at, NEW.updated_at);
  ELSE
    NEW.updated_at := clock_timestamp();
    NEW.updated_by := micromegas._mm_actor();
    NEW.created_at := OLD.created_at;
  END IF;
  RETURN NEW;
END
$$;

-- Result columns added: dropped and created again.
DROP FUNCTION micromegas.mm_create_view(text);
DROP FUNCTION micromegas.mm_create_view(text, text, text, text, integer, text, text, text, text, text, text, boolean);
DROP FUNCTION micromegas.mm_drop_view(text);
DROP FUNCTION micromegas.mm_drop_view(micromegas.view_set_name, boolean);
DROP FUNCTION micromegas._mm_drop(text, boolean);
DROP FUNCTION micromegas.mm_view_set_snapshot();

CREATE FUNCTION micromegas.mm_create_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint, incompatible_partitions bigint, job_id uuid)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  target text;
  outcome text;
BEGIN
  PERFORM pg_catalog.set_config('micromegas_views.replaced', '', true);
  PERFORM pg_catalog.set_config('micromegas_views.created_job', '', true);
  INSERT INTO micromegas.lakehouse_view_set_definitions AS d (definition_sql) VALUES (statement)
  RETURNING d.view_set_name INTO target;
  outcome := CASE WHEN target IS NULL THEN 'replaced' ELSE 'created' END;
  target := coalesce(target, pg_catalog.current_setting('micromegas_views.replaced'));
  RETURN QUERY SELECT target, outcome, s.version, micromegas._mm_incompatible_count(target),
                      NULLIF(pg_catalog.current_setting('micromegas_views.created_job'), '')::uuid
                 FROM micromegas.catalog_state s;
END
$$;

CREATE FUNCTION micromegas.mm_create_view(
  name text,
  extract_query text,
  count_src_query text,
  merge_partitions_query text,
  update_group integer,
  time_column text DEFAULT NULL,
  min_time_column text DEFAULT NULL,
  max_time_column text DEFAULT NULL,
  source_partition_delta text DEFAULT NULL,
  merge_partition_delta text DEFAULT NULL,
  merge_sort_order text DEFAULT NULL,
  with_no_data boolean DEFAULT NULL,
  auto_refresh boolean DEFAULT NULL,
  or_replace boolean DEFAULT false)
RETURNS TABLE (view_set_name text, status text, version bigint, incompatible_partitions bigint, job_id uuid)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  options jsonb := pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
    'time_column', time_column, 'min_time_column', min_time_column, 'max_time_column', max_time_column,
    'source_partition_delta', source_partition_delta, 'merge_partition_delta', merge_partition_delta,
    'merge_sort_order', merge_sort_order, 'with_no_data', with_no_data, 'auto_refresh', auto_refresh));
  outcome text := 'created';
BEGIN
  PERFORM pg_catalog.set_config('micromegas_views.created_job', '', true);
  PERFORM micromegas._mm_lock_catalog();
  IF EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = name) THEN
    IF NOT or_replace THEN
      RAISE EXCEPTION 'materialized view "%" already exists', name
        USING ERRCODE = 'duplicate_object', HINT = 'Pass or_replace => true to replace it.';
    END IF;
    UPDATE micromegas.lakehouse_view_set_definitions d
       SET definition_sql = NULL, extract_query = mm_create_view.extract_query,
           count_src_query = mm_create_view.count_src_query,
           merge_partitions_query = mm_create_view.merge_partitions_query,
           update_group = mm_create_view.update_group, view_options = options
     WHERE d.view_set_name = name;
    outcome := 'replaced';
  ELSE
    INSERT INTO micromegas.lakehouse_view_set_definitions AS d
           (view_set_name, extract_query, count_src_query, merge_partitions_query, update_group, view_options)
    VALUES (name, extract_query, count_src_query, merge_partitions_query, update_group, options);
  END IF;
  RETURN QUERY SELECT name, outcome, micromegas.mm_catalog_version(), micromegas._mm_incompatible_count(name),
                      NULLIF(pg_catalog.current_setting('micromegas_views.created_job'), '')::uuid;
END
$$;

CREATE FUNCTION micromegas._mm_drop(target text, if_exists boolean)
RETURNS TABLE (view_set_name text, status text, version bigint, partitions_retired bigint, bytes_queued bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  retired text[];
BEGIN
  PERFORM micromegas._mm_lock_catalog();
  DELETE FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = target;
  IF FOUND THEN
    -- What the DELETE trigger retired (sql/partitions.sql): "count bytes".
    retired := pg_catalog.string_to_array(pg_catalog.current_setting('micromegas_views.retired'), ' ');
    RETURN QUERY SELECT target, 'dropped'::text, micromegas.mm_catalog_version(),
                        retired[1]::bigint, retired[2]::bigint;
    RETURN;
  END IF;
  IF NOT if_exists THEN
    IF EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = target) THEN
      RAISE EXCEPTION '"%" is a built-in view set, not a materialized view', target
        USING ERRCODE = 'wrong_object_type',
              DETAIL = 'Built-in view sets are defined in the services'' code.';
    END IF;
    RAISE EXCEPTION 'materialized view "%" does not exist', target
      USING ERRCODE = 'undefined_object';
  END IF;
  RETURN QUERY SELECT target, 'not_found'::text, micromegas.mm_catalog_version(), 0::bigint, 0::bigint;
END
$$;

CREATE FUNCTION micromegas.mm_drop_view(name micromegas.view_set_name, if_exists boolean DEFAULT false)
RETURNS TABLE (view_set_name text, status text, version bigint, partitions_retired bigint, bytes_queued bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM micromegas._mm_check_name(name::text, 'reference');
  RETURN QUERY SELECT * FROM micromegas._mm_drop(name::text, if_exists);
END
$$;

CREATE FUNCTION micromegas.mm_drop_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint, partitions_retired bigint, bytes_queued bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  t record;
BEGIN
  SELECT * INTO t FROM micromegas._mm_statement_target(statement);
  IF t.kind <> 'drop' THEN
    RAISE EXCEPTION 'mm_drop_view expects DROP MATERIALIZED VIEW, not CREATE'
      USING ERRCODE = 'syntax_error', HINT = 'Use micromegas.mm_create_view() to create a view.';
  END IF;
  RETURN QUERY SELECT * FROM micromegas._mm_drop(t.view_set_name, t.if_exists);
END
$$;

CREATE FUNCTION micromegas.mm_view_set_snapshot()
RETURNS TABLE (catalog_version bigint, view_set_name text, update_group integer,
               extract_query text, count_src_query text, merge_partitions_query text,
               view_options jsonb, schema_ipc text, schema_hash bytea, reads text[], updated_at timestamptz,
               auto_refresh boolean)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT s.version, d.view_set_name, d.update_group, d.extract_query, d.count_src_query,
         d.merge_partitions_query, d.view_options, d.schema_ipc, d.schema_hash, d.reads, d.updated_at,
         coalesce((d.view_options->>'auto_refresh')::boolean, false)
    FROM micromegas.catalog_state s
    LEFT JOIN micromegas.lakehouse_view_set_definitions d ON d.load_status = 'ok'
   ORDER BY d.update_group, d.view_set_name
$$;

SELECT pg_catalog.pg_extension_config_dump('micromegas.lakehouse_partitions', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.temporary_files', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.lakehouse_view_set_definition_history',
                                           $$WHERE operation <> 'install'$$);
SELECT pg_catalog.pg_extension_config_dump('micromegas.jobs', '');

-- What \df+ shows.
COMMENT ON FUNCTION micromegas.mm_create_view(text) IS
  'CREATE [OR REPLACE] MATERIALIZED VIEW name WITH (...): validate and store a view set definition';
COMMENT ON FUNCTION micromegas.mm_create_view(text, text, text, text, integer, text, text, text, text, text, text, boolean, boolean, boolean) IS
  'Create or replace a view set definition from named arguments; stores a canonical statement';
COMMENT ON FUNCTION micromegas.mm_drop_view(text) IS
  'DROP MATERIALIZED VIEW [IF EXISTS] name, or a bare name';
COMMENT ON FUNCTION micromegas.mm_drop_view(micromegas.view_set_name, boolean) IS
  'Drop a view set definition by name';
COMMENT ON FUNCTION micromegas.list_partitions(text, text) IS
  'Every partition, optionally of one view set and instance';
COMMENT ON FUNCTION micromegas.retire_partitions(text, text, timestamptz, timestamptz) IS
  'Retire every partition of a view instance within [begin, end], whatever its schema';
COMMENT ON FUNCTION micromegas.retire_partition_by_metadata(text, text, timestamptz, timestamptz, bytea) IS
  'Retire exactly one partition, named by view set, instance, insert range and schema hash';
COMMENT ON FUNCTION micromegas.retire_partition_by_file(text) IS
  'Retire the one partition with this file';
COMMENT ON FUNCTION micromegas.list_incompatible_partitions(text) IS
  'Partitions whose schema hash is not their view set''s current one';
COMMENT ON FUNCTION micromegas.retire_incompatible_partitions(text) IS
  'Retire every incompatible partition; one row per view set and instance';
COMMENT ON FUNCTION micromegas.mm_write_partition(text, text, timestamptz, timestamptz, timestamptz, timestamptz, text, bigint, bytea, bytea, bigint, integer, text[], timestamptz) IS
  'A service writes one partition (an overlap is refused, naming both partitions)';
COMMENT ON FUNCTION micromegas.mm_replace_partitions(text, text, timestamptz, timestamptz, micromegas.lakehouse_partitions[]) IS
  'Retire a range of a view instance and write its new partitions, atomically';
COMMENT ON FUNCTION micromegas.mm_plan_regeneration(text, timestamptz, timestamptz, interval) IS
  'The buckets a regeneration of [begin, end) by delta would write, or the partition that does not fit';
COMMENT ON FUNCTION micromegas.mm_expired_files(integer) IS
  'The daemon claims expired files of retired partitions (commit after deleting them)';
COMMENT ON FUNCTION micromegas.mm_view_history(text) IS
  'Every version of a view: operation, catalog version, who and when';
COMMENT ON FUNCTION micromegas.mm_describe_view(text, bigint) IS
  'A view as it is, or as it was at a version, with its schema';
COMMENT ON FUNCTION micromegas.mm_restore_view(text, bigint) IS
  'Put a view back as it was at a version (validated like CREATE OR REPLACE)';
COMMENT ON FUNCTION micromegas.mm_prune_view_history(interval) IS
  'Forget versions older than the interval (each view keeps its latest)';
COMMENT ON FUNCTION micromegas.mm_refresh_view(text, timestamptz, timestamptz, jsonb) IS
  'Request a refresh of a view set over a range (NULL bounds: everything); returns the job id';
COMMENT ON FUNCTION micromegas.regenerate_partitions(text, timestamptz, timestamptz, integer) IS
  'Queue one regeneration job per bucket of [begin, end), checked like mm_plan_regeneration';
COMMENT ON FUNCTION micromegas.mm_claim_job(text, text[]) IS
  'A worker claims the oldest queued job, with a lease';
COMMENT ON FUNCTION micromegas.mm_heartbeat_job(uuid, text) IS
  'A worker extends its lease; says whether the job should stop';
COMMENT ON FUNCTION micromegas.mm_finish_job(uuid, text, boolean, text, text, boolean) IS
  'A worker reports a job''s result';
COMMENT ON FUNCTION micromegas.mm_cancel_job(uuid) IS
  'Cancel a queued job, or ask a running one to stop';
COMMENT ON FUNCTION micromegas.mm_job(uuid) IS
  'One job';
COMMENT ON FUNCTION micromegas.list_jobs(text, text) IS
  'Jobs by state and view set, newest first';
COMMENT ON FUNCTION micromegas.mm_explain_view(text) IS
  'Dry run of mm_create_view: every check, nothing written';
COMMENT ON FUNCTION micromegas.list_view_set_definitions() IS
  'Every stored definition, including those that failed to load';
COMMENT ON FUNCTION micromegas.list_view_sets() IS
  'Every view set the services should load, with its current schema and hash';
COMMENT ON FUNCTION micromegas.mm_view_set_snapshot() IS
  'The catalog version and every loadable definition, in materialization order';
COMMENT ON FUNCTION micromegas.list_view_dependencies() IS
  'Which view sets each definition reads, with both update groups';
COMMENT ON FUNCTION micromegas.mm_materialization_order() IS
  'The order the maintenance daemon materializes in';
COMMENT ON FUNCTION micromegas.mm_catalog_violations() IS
  'Definitions reading a missing view set or out of update_group order (always empty)';
COMMENT ON FUNCTION micromegas.mm_register_builtin_view_set(text, text, integer, text, boolean, boolean) IS
  'A service registers the current schema of a code-defined view set (base64 Arrow IPC or JSON)';

-- Privileges. PUBLIC may read the catalog version and the list of view
-- sets; micromegas_reader reads the catalog; micromegas_admin (a member of
-- the reader) changes it. The internal functions (_mm_*: version, lock,
-- validation steps) are callable by neither role: the SECURITY DEFINER
-- functions and triggers call them.
GRANT USAGE ON SCHEMA micromegas TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA micromegas FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA micromegas FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON micromegas.lakehouse_view_set_definitions TO micromegas_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON micromegas.builtin_view_sets TO micromegas_admin;
GRANT SELECT, INSERT, DELETE ON micromegas.removed_shipped_rows TO micromegas_admin;
GRANT SELECT ON micromegas.lakehouse_view_set_definitions, micromegas.builtin_view_sets,
                micromegas.catalog_state TO micromegas_reader;
-- The deny list and the grants (sql/access.sql): admins write them; the
-- services (readers) load the rules, match, record hits, and list the grants
-- their caller may see.
GRANT SELECT, INSERT, UPDATE, DELETE ON micromegas.query_deny_list, micromegas.audience_grants TO micromegas_admin;
GRANT SELECT ON micromegas.query_deny_list TO micromegas_reader;
-- Partitions (sql/partitions.sql): readers list them; the services
-- (micromegas_service) write them and claim expired files, directly or through
-- mm_write_partition / mm_replace_partitions / mm_expired_files; admins retire
-- them through the retire functions only.
GRANT SELECT ON micromegas.lakehouse_partitions, micromegas.temporary_files,
                micromegas.view_set_schema_hashes TO micromegas_reader;
GRANT INSERT, UPDATE, DELETE ON micromegas.lakehouse_partitions TO micromegas_service;
GRANT INSERT, DELETE ON micromegas.temporary_files TO micromegas_service;
-- Definition history: readers read it; only the trigger and the admin
-- functions write it.
GRANT SELECT ON micromegas.lakehouse_view_set_definition_history TO micromegas_reader;
-- Jobs: readers see them; admins request and cancel (functions); the
-- services' workers claim, heartbeat and finish (functions).
GRANT SELECT ON micromegas.jobs TO micromegas_reader;
DO $$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'micromegas'::regnamespace AND p.proname NOT LIKE '\_mm\_%' LOOP
    EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO micromegas_admin', f);
  END LOOP;
END
$$;
GRANT EXECUTE ON FUNCTION micromegas.mm_catalog_version() TO PUBLIC;
GRANT EXECUTE ON FUNCTION micromegas.list_view_sets() TO PUBLIC;
GRANT EXECUTE ON FUNCTION micromegas.list_view_set_definitions(), micromegas.list_view_sets(),
  micromegas.mm_view_set_snapshot(), micromegas.mm_materialization_order(),
  micromegas.list_view_dependencies(), micromegas.mm_catalog_version(),
  micromegas.mm_explain_view(text), micromegas.mm_catalog_violations() TO micromegas_reader;
GRANT EXECUTE ON FUNCTION micromegas.list_audience_grants(), micromegas.mm_sql_hash(text),
  micromegas.mm_match_query_denial(text, text, text, text, text, text, text, text, text, text, text, text),
  micromegas.mm_match_query_denial_context(jsonb), micromegas.mm_record_query_denial_hits(uuid[], timestamptz),
  micromegas.mm_query_deny_list_snapshot(), micromegas.mm_audience_grants_snapshot(), micromegas.mm_access_versions()
  TO micromegas_reader;
GRANT EXECUTE ON FUNCTION micromegas.mm_view_history(text), micromegas.mm_describe_view(text, bigint)
  TO micromegas_reader;
GRANT EXECUTE ON FUNCTION micromegas.list_partitions(text, text), micromegas.list_incompatible_partitions(text),
  micromegas.mm_plan_regeneration(text, timestamptz, timestamptz, interval) TO micromegas_reader;
GRANT EXECUTE ON FUNCTION
  micromegas.mm_write_partition(text, text, timestamptz, timestamptz, timestamptz, timestamptz, text, bigint,
                                bytea, bytea, bigint, integer, text[], timestamptz),
  micromegas.mm_replace_partitions(text, text, timestamptz, timestamptz, micromegas.lakehouse_partitions[]),
  micromegas.mm_expired_files(integer) TO micromegas_service;
GRANT EXECUTE ON FUNCTION micromegas.mm_job(uuid), micromegas.list_jobs(text, text) TO micromegas_reader;
GRANT EXECUTE ON FUNCTION micromegas.mm_claim_job(text, text[]), micromegas.mm_heartbeat_job(uuid, text),
  micromegas.mm_finish_job(uuid, text, boolean, text, text, boolean) TO micromegas_service;
