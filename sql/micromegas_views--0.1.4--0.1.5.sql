-- micromegas_views 0.1.4 -> 0.1.5. What changes:
-- * privileges come from one declared matrix (sql/privileges.sql):
--   everything is revoked and granted again from it; micromegas_admin no
--   longer holds the service's functions (partition writes, file claims,
--   job claim/heartbeat/finish), a plain reader no longer loads the deny
--   rules, records hits or reads the grant snapshot;
-- * the extension's own writes are marked by backend memory its code sets
--   (intents, src/pg/trust.rs), never by trigger depth or a setting; derived
--   and audit columns are always computed; a plain CREATE of any existing
--   name (log_stats included) is 42710;
-- * the file queue follows what the partitions reference (a shared or
--   rewritten file is never queued, an UPDATE of file_path queues the old
--   one, mm_expired_files never hands out a live file);
-- * leases carry tokens: mm_claim_job / mm_claim_jobs return one,
--   mm_heartbeat_job and mm_finish_job take it instead of the worker name.
--   Jobs that were running when the upgrade ran go back to the queue (their
--   workers' heartbeats and finishes would use the old signatures);
-- * deny hits live in query_deny_hits (never locking a rule), clamped to now;
-- * list_audience_grants follows the claims of a service or admin;
-- * job requests take the catalog lock and fold only equal parameters;
--   regeneration buckets tile absolute time.

CREATE FUNCTION micromegas."_mm_intent_begin"(
	"kind" TEXT, /* & str */
	"name" TEXT /* Option < & str > */
) RETURNS void
VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'intent_begin_wrapper';

CREATE FUNCTION micromegas."_mm_intent_end"(
	"kind" TEXT /* & str */
) RETURNS void
STRICT VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'intent_end_wrapper';

CREATE FUNCTION micromegas."_mm_intent"(
	"name" TEXT /* Option < & str > */
) RETURNS TEXT /* Option < & '_ str > */
VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'intent_wrapper';

CREATE FUNCTION micromegas."_mm_caller"() RETURNS TEXT /* String */
STRICT STABLE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'caller_wrapper';

CREATE FUNCTION micromegas."_mm_caller_is_superuser"() RETURNS bool /* bool */
STRICT STABLE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'caller_is_superuser_wrapper';

CREATE FUNCTION micromegas._mm_loading(given_created_at timestamptz) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN given_created_at IS NOT NULL AND micromegas._mm_caller_is_superuser();
END
$$;

CREATE FUNCTION micromegas._mm_keeps_creation(given_created_at timestamptz, given_created_by text) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN micromegas._mm_installing()
      OR (nullif(btrim(given_created_by), '') IS NOT NULL AND micromegas._mm_loading(given_created_at));
END
$$;

CREATE OR REPLACE FUNCTION micromegas._mm_recheck_dependents(source text, strict boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dep micromegas.lakehouse_view_set_definitions;
  checked_schema text;
  problem text;
BEGIN
  -- Every write below is the extension's own re-check (src/pg/trust.rs).
  PERFORM micromegas._mm_intent_begin('recheck', NULL);
  FOR dep IN SELECT * FROM micromegas.lakehouse_view_set_definitions d
              WHERE d.reads @> ARRAY[source] ORDER BY d.update_group, d.view_set_name LOOP
    BEGIN
      SELECT p.schema_ipc INTO checked_schema
        FROM micromegas._mm_prepare_definition(dep.view_set_name, NULL, dep.extract_query, dep.count_src_query,
               dep.merge_partitions_query, dep.update_group, dep.view_options, false) p;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
      IF strict THEN
        RAISE EXCEPTION 'cannot change materialized view "%" because materialized view "%" depends on it', source, dep.view_set_name
          USING ERRCODE = 'dependent_objects_still_exist',
                DETAIL = format('materialized view "%s" would no longer be valid: %s', dep.view_set_name, problem),
                HINT = format('Keep what "%s" reads unchanged, or replace or drop it first.', dep.view_set_name);
      END IF;
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET load_status = 'failed', load_error = format('no longer valid after "%s" changed: %s', source, problem)
       WHERE d.view_set_name = dep.view_set_name;
      WITH RECURSIVE downstream(name) AS (
        SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x WHERE x.reads @> ARRAY[dep.view_set_name]
        UNION
        SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x, downstream w WHERE x.reads @> ARRAY[w.name]
      )
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET load_status = 'failed', load_error = format('reads a view set that failed to load (after "%s" changed)', source)
       WHERE d.view_set_name IN (SELECT name FROM downstream) AND d.load_status <> 'failed';
      CONTINUE;
    END;
    IF checked_schema IS DISTINCT FROM dep.schema_ipc OR dep.load_status <> 'ok' THEN
      -- A full rewrite stores the new schema, clears a failed mark,
      -- notifies, and re-checks its own dependents.
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = d.definition_sql
       WHERE d.view_set_name = dep.view_set_name;
    END IF;
  END LOOP;
  PERFORM micromegas._mm_intent_end('recheck');
END
$$;

CREATE OR REPLACE FUNCTION micromegas._mm_definitions_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  intent text := micromegas._mm_intent(NEW.view_set_name);
  keep_given boolean;
  statement_sql text := NEW.definition_sql;
  p record;
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM micromegas._mm_lock_catalog();
    NEW.shipped := micromegas._mm_installing();
    keep_given := micromegas._mm_loading(NEW.created_at);
    IF NOT NEW.shipped AND keep_given AND EXISTS (
         SELECT 1 FROM micromegas.lakehouse_view_set_definitions d
          WHERE d.view_set_name = NEW.view_set_name AND d.shipped) THEN
      -- A superuser loading a dumped row over one still exactly as shipped
      -- (a restore: CREATE EXTENSION, then the dumped rows) updates it,
      -- validated like any other, keeping the dumped timestamps and actor.
      PERFORM micromegas._mm_intent_begin('load', NEW.view_set_name);
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = NEW.definition_sql, extract_query = NEW.extract_query,
             count_src_query = NEW.count_src_query, merge_partitions_query = NEW.merge_partitions_query,
             update_group = NEW.update_group, view_options = NEW.view_options,
             created_at = NEW.created_at, updated_at = NEW.updated_at, updated_by = NEW.updated_by,
             load_status = coalesce(NEW.load_status, 'ok')
       WHERE d.view_set_name = NEW.view_set_name;
      PERFORM micromegas._mm_intent_end('load');
      RETURN NULL;
    END IF;
  ELSE
    PERFORM micromegas._mm_next_version();
    keep_given := coalesce(intent IN ('recheck', 'load'), false);
    -- Rows stay "as shipped" only through the extension's own scripts.
    NEW.shipped := OLD.shipped AND micromegas._mm_installing();
    IF intent IS NOT DISTINCT FROM 'recheck' AND NEW.load_status = 'failed'
       AND OLD.load_status IS DISTINCT FROM 'failed'
       AND (NEW.view_set_name, NEW.definition_sql, NEW.extract_query, NEW.count_src_query,
            NEW.merge_partitions_query, NEW.update_group, NEW.view_options)
           IS NOT DISTINCT FROM
           (OLD.view_set_name, OLD.definition_sql, OLD.extract_query, OLD.count_src_query,
            OLD.merge_partitions_query, OLD.update_group, OLD.view_options) THEN
      -- A re-check marks a definition whose source changed as failed to load
      -- (its UPDATE sets only load_status and load_error).
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
    -- A dumped row that had failed to load is validated again: it loads if
    -- it plans now, and is kept as failed with the fresh reason if its
    -- queries still do not plan. Any other problem is refused as usual.
    keep_given AND NEW.load_status = 'failed');

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
      -- The history records it as a replace (the intent), not as a re-check.
      PERFORM micromegas._mm_intent_begin('replace', p.view_set_name);
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = NEW.definition_sql, extract_query = NEW.extract_query,
             count_src_query = NEW.count_src_query, merge_partitions_query = NEW.merge_partitions_query,
             update_group = NEW.update_group, view_options = NEW.view_options, load_status = 'ok'
       WHERE d.view_set_name = p.view_set_name;
      PERFORM micromegas._mm_intent_end('replace');
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
  IF keep_given THEN
    -- A dumped row keeps its timestamps and actor; a re-validation by the
    -- extension changes no definition, so it keeps them too.
    NEW.updated_at := coalesce(NEW.updated_at, clock_timestamp());
    NEW.updated_by := coalesce(NEW.updated_by, micromegas._mm_actor());
    NEW.created_at := coalesce(NEW.created_at, OLD.created_at, NEW.updated_at);
  ELSE
    NEW.updated_at := clock_timestamp();
    NEW.updated_by := micromegas._mm_actor();
    NEW.created_at := CASE WHEN TG_OP = 'INSERT' THEN NEW.updated_at ELSE OLD.created_at END;
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION micromegas._mm_builtins_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  forms record;
  keep_given boolean;
BEGIN
  PERFORM micromegas._mm_next_version();
  IF TG_OP = 'UPDATE' AND NEW.view_set_name IS DISTINCT FROM OLD.view_set_name THEN
    RAISE EXCEPTION 'cannot rename built-in view set "%"', OLD.view_set_name
      USING ERRCODE = 'feature_not_supported';
  END IF;
  PERFORM micromegas._mm_check_name(NEW.view_set_name, 'builtin');
  IF EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = NEW.view_set_name) THEN
    RAISE EXCEPTION 'view set "%" already exists as a materialized view defined with DDL', NEW.view_set_name
      USING ERRCODE = 'duplicate_object',
            DETAIL = 'Built-in view sets (registered by the services) and materialized views share one namespace.',
            HINT = 'Drop the materialized view first, or register the built-in view set under another name.';
  END IF;
  IF TG_OP = 'INSERT' THEN
    NEW.shipped := micromegas._mm_installing();
    keep_given := micromegas._mm_loading(NEW.registered_at);
    IF NOT NEW.shipped AND EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b
                                    WHERE b.view_set_name = NEW.view_set_name AND b.shipped) THEN
      -- An INSERT over a shipped row updates it (a service registering
      -- today's schema of a shipped built-in; a restore, which keeps the
      -- dumped registration columns).
      IF keep_given THEN
        PERFORM micromegas._mm_intent_begin('load', NEW.view_set_name);
      END IF;
      UPDATE micromegas.builtin_view_sets b
         SET update_group = NEW.update_group, kind = NEW.kind, has_view_maker = NEW.has_view_maker,
             global_instance_available = NEW.global_instance_available, schema_ipc = NEW.schema_ipc,
             schema_json = NEW.schema_json, registered_at = NEW.registered_at, registered_by = NEW.registered_by
       WHERE b.view_set_name = NEW.view_set_name;
      IF keep_given THEN
        PERFORM micromegas._mm_intent_end('load');
      END IF;
      RETURN NULL;
    END IF;
  ELSE
    keep_given := micromegas._mm_intent(NEW.view_set_name) IS NOT DISTINCT FROM 'load';
    NEW.shipped := OLD.shipped AND micromegas._mm_installing();
  END IF;
  IF NEW.schema_ipc IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.schema_ipc IS DISTINCT FROM OLD.schema_ipc) THEN
    SELECT * INTO forms FROM micromegas._mm_schema_forms(NEW.schema_ipc);
  ELSIF NEW.schema_json IS NOT NULL THEN
    SELECT * INTO forms FROM micromegas._mm_schema_forms(NEW.schema_json::text);
  ELSE
    RAISE EXCEPTION 'built-in view set "%" needs a schema', NEW.view_set_name
      USING ERRCODE = 'not_null_violation', HINT = 'Set schema_json or schema_ipc.';
  END IF;
  NEW.schema_ipc := forms.schema_ipc;
  NEW.schema_json := forms.schema_json;
  NEW.schema_hash := forms.schema_hash;
  IF keep_given OR micromegas._mm_installing() THEN
    NEW.registered_at := coalesce(NEW.registered_at, clock_timestamp());
    NEW.registered_by := coalesce(NEW.registered_by, micromegas._mm_actor());
  ELSE
    NEW.registered_at := clock_timestamp();
    NEW.registered_by := micromegas._mm_actor();
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION micromegas._mm_write_kind(tg_op text, view_set_name text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  intent text := micromegas._mm_intent(view_set_name);
BEGIN
  IF micromegas._mm_installing() THEN
    RETURN 'install';
  END IF;
  RETURN coalesce(CASE WHEN intent = 'load' THEN 'recheck' ELSE intent END,
                  CASE WHEN tg_op = 'INSERT' THEN 'create' ELSE 'replace' END);
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_restore_view(name text, version bigint)
RETURNS SETOF micromegas.view_change
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  h micromegas.lakehouse_view_set_definition_history;
  outcome text := 'restored';
BEGIN
  PERFORM micromegas._mm_lock_catalog();
  h := micromegas._mm_history_version(mm_restore_view.name, mm_restore_view.version);
  PERFORM micromegas._mm_intent_begin('restore', h.view_set_name);
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
  PERFORM micromegas._mm_intent_end('restore');
  RETURN QUERY SELECT h.view_set_name, outcome, micromegas.mm_catalog_version(),
                      micromegas._mm_incompatible_count(h.view_set_name);
END
$$;

-- The file queue (its lock helpers are in the section below).
DROP TRIGGER partitions_queue_files ON micromegas.lakehouse_partitions;
DROP FUNCTION micromegas._mm_partitions_after_delete();
CREATE INDEX temporary_files_file_path ON micromegas.temporary_files (file_path);
-- Writers of partitions take turns per file path, through 64 lock buckets
-- of the path's hash: a statement holds at most 64 advisory locks however
-- many partitions it writes or retires (one lock per path ran out of
-- shared memory for a bulk insert or a DROP of a large view), at the cost
-- of two writers of unrelated files waiting for each other 1 time in 64.
-- Locks are (class, bucket) pairs, the class this extension's own.
CREATE FUNCTION micromegas._mm_file_bucket(file_path text) RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT pg_catalog.hashtext($1) & 63
$$;

-- Holds the buckets' locks until the transaction ends, in bucket order (no
-- deadlock between two writers).
CREATE FUNCTION micromegas._mm_lock_file_buckets(buckets integer[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  b integer;
BEGIN
  FOREACH b IN ARRAY coalesce(buckets, '{}') LOOP
    PERFORM pg_catalog.pg_advisory_xact_lock(1835890278, b);
  END LOOP;
END
$$;
-- The file queue follows what the partitions reference, whatever wrote
-- them: a file a statement took out of use (the file of a deleted
-- partition, the old file of one whose file_path an UPDATE changed) goes to
-- temporary_files once, and only when no remaining partition references it
-- (two partitions may share a file); a file a statement put (back) in use
-- (a swap writing back a partition it retired, a service re-inserting one)
-- leaves the queue. Empty partitions have no file.
CREATE FUNCTION micromegas._mm_partitions_queue_files() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  buckets integer[];
BEGIN
  -- One transaction at a time per file path (bucket), every bucket of the
  -- statement locked in one call, so two writers of partitions sharing a
  -- file, or a writer and a retirement, each see the other's committed rows
  -- in the checks below. (A transition table exists only for its own event:
  -- each is read only there.)
  IF TG_OP = 'INSERT' THEN
    buckets := ARRAY(SELECT DISTINCT micromegas._mm_file_bucket(b.file_path) FROM born b
                      WHERE b.file_path IS NOT NULL ORDER BY 1);
  ELSIF TG_OP = 'DELETE' THEN
    buckets := ARRAY(SELECT DISTINCT micromegas._mm_file_bucket(g.file_path) FROM gone g
                      WHERE g.file_path IS NOT NULL ORDER BY 1);
  ELSE
    buckets := ARRAY(SELECT micromegas._mm_file_bucket(b.file_path) FROM born b WHERE b.file_path IS NOT NULL
                     UNION
                     SELECT micromegas._mm_file_bucket(g.file_path) FROM gone g WHERE g.file_path IS NOT NULL
                     ORDER BY 1);
  END IF;
  PERFORM micromegas._mm_lock_file_buckets(buckets);
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
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

CREATE OR REPLACE FUNCTION micromegas.mm_expired_files(max_files integer DEFAULT 1000)
RETURNS TABLE (file_path text, file_size bigint, expiration timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rows tid[];
  b integer;
BEGIN
  IF max_files IS NULL OR max_files < 1 THEN
    RAISE EXCEPTION 'mm_expired_files: max_files must be a positive number, not %', coalesce(max_files::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- Wait for the writers in flight on the candidates' buckets (taking each
  -- lock and letting it go at once: holding them while the daemon deletes
  -- the objects would stall every writer), so that a partition written
  -- with one of these files is committed before the check below. Before
  -- any queue row is locked: a writer holds its bucket and then waits for
  -- the queue row of its file, so the other order could deadlock.
  FOREACH b IN ARRAY ARRAY(SELECT DISTINCT micromegas._mm_file_bucket(c.file_path)
                             FROM (SELECT y.file_path FROM micromegas.temporary_files y WHERE y.expiration <= now()
                                    ORDER BY y.expiration LIMIT max_files) c
                            ORDER BY 1) LOOP
    PERFORM pg_catalog.pg_advisory_lock(1835890278, b);
    PERFORM pg_catalog.pg_advisory_unlock(1835890278, b);
  END LOOP;
  SELECT array_agg(x.ctid) INTO rows
    FROM (SELECT y.ctid FROM micromegas.temporary_files y
           WHERE y.expiration <= now()
           ORDER BY y.expiration
           LIMIT max_files
             FOR UPDATE SKIP LOCKED) x;
  RETURN QUERY
    WITH claimed AS (
      DELETE FROM micromegas.temporary_files t
       WHERE t.ctid = ANY (rows)
      RETURNING t.file_path, t.file_size, t.expiration)
    SELECT DISTINCT ON (c.file_path) c.file_path::text, c.file_size, c.expiration
      FROM claimed c
     WHERE NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p WHERE p.file_path = c.file_path)
     ORDER BY c.file_path, c.expiration;
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_plan_regeneration(
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

-- Jobs: lease tokens. Running jobs are requeued (see above).
ALTER TABLE micromegas.jobs ADD COLUMN lease_token_hash bytea;
UPDATE micromegas.jobs
   SET state = 'queued', lease_expires_at = NULL, failure_phase = 'lease',
       failure_message = format('requeued by the upgrade to 0.1.5 (leases carry tokens now); worker %s', worker),
       failure_retryable = true
 WHERE state = 'running';
ALTER TABLE micromegas.jobs DROP CONSTRAINT jobs_lease;
ALTER TABLE micromegas.jobs ADD CONSTRAINT jobs_lease CHECK ((state = 'running') = (lease_expires_at IS NOT NULL)
                               AND (state = 'running') = (lease_token_hash IS NOT NULL)
                               AND (state <> 'running' OR worker IS NOT NULL));
DROP FUNCTION micromegas.mm_claim_job(text, text[]);
DROP FUNCTION micromegas.mm_heartbeat_job(uuid, text);
DROP FUNCTION micromegas.mm_finish_job(uuid, text, boolean, text, text, boolean);
DROP FUNCTION micromegas._mm_held_job(uuid, text);
-- What a claim returns: the job, and the lease token that proves the claim
-- to mm_heartbeat_job and mm_finish_job (returned once, stored only hashed).
CREATE TYPE micromegas.claimed_job AS (
  job_id uuid, kind text, view_set_name text, begin_time timestamptz, end_time timestamptz, params jsonb,
  attempts integer, worker text, lease_expires_at timestamptz, lease_token uuid);

-- The stored form of a lease token.
CREATE FUNCTION micromegas._mm_lease_hash(token uuid) RETURNS bytea
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT pg_catalog.sha256(pg_catalog.uuid_send($1))
$$;

-- A worker claims up to max_jobs of the oldest queued jobs (of the given
-- kinds), each with a lease of micromegas_views.job_lease and a token of
-- its own. No row: nothing to do.
CREATE FUNCTION micromegas.mm_claim_jobs(worker text, max_jobs integer DEFAULT 1, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF coalesce(btrim(worker), '') = '' THEN
    RAISE EXCEPTION 'mm_claim_jobs: a worker name is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_jobs IS NULL OR max_jobs < 1 OR max_jobs > 1000 THEN
    RAISE EXCEPTION 'mm_claim_jobs: max_jobs must be between 1 and 1000, not %', coalesce(max_jobs::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM micromegas._mm_expire_leases();
  RETURN QUERY
    WITH picked AS (
      SELECT x.job_id, gen_random_uuid() AS token FROM micromegas.jobs x
       WHERE x.state = 'queued' AND (kinds IS NULL OR x.kind = ANY (kinds))
       ORDER BY x.created_at LIMIT max_jobs
         FOR UPDATE SKIP LOCKED)
    UPDATE micromegas.jobs j
       SET state = 'running', worker = mm_claim_jobs.worker, started_at = clock_timestamp(),
           lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds()),
           lease_token_hash = micromegas._mm_lease_hash(p.token),
           attempts = j.attempts + 1
      FROM picked p
     WHERE j.job_id = p.job_id
    RETURNING j.job_id, j.kind, j.view_set_name, j.begin_time, j.end_time, j.params, j.attempts, j.worker,
              j.lease_expires_at, p.token;
END
$$;

-- One job at a time: mm_claim_jobs(worker, 1, kinds).
CREATE FUNCTION micromegas.mm_claim_job(worker text, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM micromegas.mm_claim_jobs($1, 1, $2)
$$;

-- The row of a job held by this lease, locked; otherwise 55000 saying why.
-- The worker's name proves nothing: two workers may share one, and anyone
-- may read it.
CREATE FUNCTION micromegas._mm_held_job(id uuid, lease_token uuid) RETURNS micromegas.jobs
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j micromegas.jobs;
BEGIN
  SELECT * INTO j FROM micromegas.jobs x WHERE x.job_id = id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % does not exist', id USING ERRCODE = 'no_data_found';
  END IF;
  IF j.state <> 'running' OR lease_token IS NULL
     OR j.lease_token_hash IS DISTINCT FROM micromegas._mm_lease_hash(lease_token) THEN
    RAISE EXCEPTION 'job % is not held by this lease', id
      USING ERRCODE = 'object_not_in_prerequisite_state',
            DETAIL = format('The job is %s%s.', j.state,
                            CASE WHEN j.state = 'running' THEN format(' under another lease (worker %s)', j.worker)
                                 ELSE '' END),
            HINT = 'The lease may have expired and the job been claimed again, or finished: stop working on it.';
  END IF;
  RETURN j;
END
$$;

-- The worker is alive: extends the lease. Returns 'running', or
-- 'cancel_requested' when the worker should stop (and finish the job).
CREATE FUNCTION micromegas.mm_heartbeat_job(job_id uuid, lease_token uuid) RETURNS text
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
  job_id uuid, lease_token uuid, ok boolean, phase text DEFAULT NULL, message text DEFAULT NULL,
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
     SET state = next_state, lease_expires_at = NULL, lease_token_hash = NULL,
         finished_at = CASE WHEN next_state = 'queued' THEN NULL ELSE clock_timestamp() END,
         failure_phase = CASE WHEN ok THEN NULL ELSE $4 END,
         failure_message = CASE WHEN ok THEN NULL ELSE $5 END,
         failure_retryable = CASE WHEN ok THEN NULL ELSE coalesce($6, false) END
   WHERE x.job_id = $1;
  RETURN next_state;
END
$$;

CREATE OR REPLACE FUNCTION micromegas._mm_request_job(
  kind text, name text, begin_time timestamptz, end_time timestamptz, params jsonb,
  OUT job_id uuid, OUT existing boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  problem text;
BEGIN
  IF name IS NULL THEN
    RAISE EXCEPTION 'a job needs a view set name' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  PERFORM micromegas._mm_lock_catalog();
  IF begin_time > end_time THEN
    RAISE EXCEPTION 'the range of a % job on "%" begins after it ends', kind, name
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF params IS NOT NULL AND jsonb_typeof(params) <> 'object' THEN
    RAISE EXCEPTION 'the parameters of a % job on "%" must be a JSON object, not %', kind, name, jsonb_typeof(params)
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
  SELECT j.job_id INTO job_id FROM micromegas.jobs j
   WHERE j.kind = _mm_request_job.kind AND j.view_set_name = name AND j.state = 'queued' AND NOT j.cancel_requested
     AND j.params = coalesce(_mm_request_job.params, '{}')
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

CREATE OR REPLACE FUNCTION micromegas._mm_expire_leases() RETURNS integer
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
         lease_expires_at = NULL, lease_token_hash = NULL
   WHERE j.job_id = ANY (ARRAY(
           SELECT x.job_id FROM micromegas.jobs x
            WHERE x.state = 'running' AND x.lease_expires_at < clock_timestamp()
              FOR UPDATE SKIP LOCKED));
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;

-- Deny hits, apart from the rules.
-- When each rule last fired, as the services report it. A table of its own,
-- with no foreign key: recording a hit never locks a rule, so a service can
-- never hold up remove_query_denial (the listings join it back as seed
-- 002's last_hit_at).
CREATE TABLE micromegas.query_deny_hits (
  rule_id uuid PRIMARY KEY,
  last_hit_at timestamptz NOT NULL
);
COMMENT ON TABLE micromegas.query_deny_hits IS
  'The last time each deny rule matched a query, recorded by the services (mm_record_query_denial_hits)';
INSERT INTO micromegas.query_deny_hits (rule_id, last_hit_at)
SELECT q.rule_id, least(q.last_hit_at, now()) FROM micromegas.query_deny_list q WHERE q.last_hit_at IS NOT NULL;
ALTER TABLE micromegas.query_deny_list DROP COLUMN last_hit_at;
DROP TRIGGER query_deny_list_notify_update ON micromegas.query_deny_list;
CREATE TRIGGER query_deny_list_notify_update
  AFTER UPDATE ON micromegas.query_deny_list
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_deny_list_notify();
SELECT pg_catalog.pg_extension_config_dump('micromegas.query_deny_hits', '');

CREATE OR REPLACE FUNCTION micromegas._mm_deny_list_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  cap integer;
  held bigint;
BEGIN
  UPDATE micromegas.access_state SET deny_list_version = deny_list_version + 1;
  IF TG_OP = 'DELETE' THEN
    -- Its hit time goes too, unless a service is recording one right now
    -- (never waited for: the listings only show hits of existing rules).
    DELETE FROM micromegas.query_deny_hits h
     WHERE h.ctid = ANY (ARRAY(SELECT x.ctid FROM micromegas.query_deny_hits x
                                WHERE x.rule_id = OLD.rule_id FOR UPDATE SKIP LOCKED));
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' AND (NEW.rule_id, NEW.created_at, NEW.created_by)
                          IS DISTINCT FROM (OLD.rule_id, OLD.created_at, OLD.created_by) THEN
    RAISE EXCEPTION 'cannot change the id or creation of deny rule %', OLD.rule_id
      USING ERRCODE = 'feature_not_supported',
            HINT = 'Remove the rule and add a new one.';
  END IF;
  IF NEW.reason IS NULL OR btrim(NEW.reason) = '' THEN
    RAISE EXCEPTION 'reason must not be empty'
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Say why the queries are denied: it is stored with the rule and shown to a denied caller.';
  END IF;
  IF TG_OP = 'INSERT' OR NEW.match_expr IS DISTINCT FROM OLD.match_expr THEN
    PERFORM micromegas._mm_check_deny_rule(NEW.match_expr);
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NOT micromegas._mm_keeps_creation(NEW.created_at, NEW.created_by) THEN
      NEW.created_at := clock_timestamp();
      NEW.created_by := micromegas._mm_actor();
    END IF;
    cap := micromegas._mm_deny_max_rules();
    SELECT count(*) INTO held FROM micromegas.query_deny_list;
    IF held >= cap THEN
      RAISE EXCEPTION 'the query deny list is full: it holds % rules, the limit is %', held, cap
        USING ERRCODE = 'program_limit_exceeded',
              HINT = 'Remove a rule with remove_query_denial(rule_id), or have a superuser raise micromegas_views.query_deny_max_rules.';
    END IF;
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION micromegas.list_query_denials()
RETURNS TABLE (rule_id text, created_at timestamptz, created_by text, reason text, match_expr text,
               last_hit_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT q.rule_id::text, q.created_at, q.created_by::text, q.reason, q.match_expr, h.last_hit_at
    FROM micromegas.query_deny_list q LEFT JOIN micromegas.query_deny_hits h ON h.rule_id = q.rule_id
   ORDER BY q.created_at, q.rule_id
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_record_query_denial_hits(rule_ids uuid[], at timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  touched integer;
  hit timestamptz := least(coalesce(at, now()), now());
BEGIN
  INSERT INTO micromegas.query_deny_hits AS h (rule_id, last_hit_at)
  SELECT DISTINCT q.rule_id, hit FROM micromegas.query_deny_list q WHERE q.rule_id = ANY (rule_ids)
  ON CONFLICT (rule_id) DO UPDATE SET last_hit_at = greatest(h.last_hit_at, EXCLUDED.last_hit_at);
  GET DIAGNOSTICS touched = ROW_COUNT;
  RETURN touched;
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_query_deny_list_snapshot()
RETURNS TABLE (version bigint, rule_id uuid, created_at timestamptz, created_by text, reason text,
               match_expr text, last_hit_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT a.deny_list_version, q.rule_id, q.created_at, q.created_by::text, q.reason, q.match_expr, h.last_hit_at
    FROM micromegas.access_state a LEFT JOIN micromegas.query_deny_list q ON true
    LEFT JOIN micromegas.query_deny_hits h ON h.rule_id = q.rule_id
   ORDER BY q.created_at, q.rule_id
$$;

CREATE OR REPLACE FUNCTION micromegas._mm_audience_grants_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  problem text;
BEGIN
  UPDATE micromegas.access_state SET audience_grants_version = audience_grants_version + 1;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  problem := micromegas._mm_audience_problem(NEW.audience, NEW.axis, NEW.selector);
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION '%', problem USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF TG_OP = 'INSERT' AND NOT micromegas._mm_keeps_creation(NEW.created_at, NEW.created_by) THEN
    NEW.created_at := clock_timestamp();
    NEW.created_by := micromegas._mm_actor();
  ELSIF TG_OP = 'UPDATE' THEN
    NEW.created_at := OLD.created_at;
    NEW.created_by := OLD.created_by;
  END IF;
  RETURN NEW;
END
$$;

-- Audience-grant visibility.
DROP FUNCTION micromegas._mm_caller_selectors();
CREATE FUNCTION micromegas._mm_caller_claims(OUT is_admin boolean, OUT selectors text[], OUT claimed boolean)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT coalesce(lower(btrim(current_setting('micromegas_views.caller_is_admin', true))) IN ('on', 'true', 'yes', '1'), false),
         array_remove(
           ARRAY['user:' || nullif(btrim(current_setting('micromegas_views.caller_email', true)), '')]
           || ARRAY(SELECT 'group:' || btrim(g)
                      FROM unnest(string_to_array(current_setting('micromegas_views.caller_groups', true), ',')) g
                     WHERE btrim(g) <> ''),
           NULL),
         coalesce(nullif(btrim(current_setting('micromegas_views.caller_email', true)), ''),
                  nullif(btrim(current_setting('micromegas_views.caller_groups', true)), ''),
                  nullif(btrim(current_setting('micromegas_views.caller_is_admin', true)), '')) IS NOT NULL
$$;

CREATE OR REPLACE FUNCTION micromegas.list_audience_grants()
RETURNS TABLE (audience text, axis text, selector text, created_at timestamptz, created_by text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  caller text := micromegas._mm_caller();
  is_admin boolean := pg_catalog.pg_has_role(caller, 'micromegas_admin', 'MEMBER');
  c record;
BEGIN
  IF NOT (is_admin OR pg_catalog.pg_has_role(caller, 'micromegas_service', 'MEMBER')) THEN
    RETURN;
  END IF;
  SELECT * INTO c FROM micromegas._mm_caller_claims();
  RETURN QUERY
    SELECT g.audience::text, g.axis::text, g.selector::text, g.created_at, g.created_by::text
      FROM micromegas.audience_grants g
     WHERE CASE WHEN c.claimed THEN
                  c.is_admin OR (g.audience, g.axis) IN (SELECT h.audience, h.axis FROM micromegas.audience_grants h
                                                          WHERE h.selector = ANY (c.selectors))
                ELSE is_admin END
     ORDER BY g.audience, g.axis, g.selector;
END
$$;

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
  'A worker claims the oldest queued job, with a lease and the lease token that proves the claim';
COMMENT ON FUNCTION micromegas.mm_claim_jobs(text, integer, text[]) IS
  'A worker claims up to max_jobs of the oldest queued jobs, each with a lease and a token of its own';
COMMENT ON FUNCTION micromegas.mm_heartbeat_job(uuid, uuid) IS
  'A worker extends its lease (proved by the token mm_claim_job returned); says whether the job should stop';
COMMENT ON FUNCTION micromegas.mm_finish_job(uuid, uuid, boolean, text, text, boolean) IS
  'A worker reports a job''s result under its lease token; any other caller gets 55000 and changes nothing';
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

-- Privileges, from the matrix.
-- micromegas_views: who may do what, declared once. _mm_apply_privileges()
-- runs last in CREATE EXTENSION (the end of sql/api.sql) and in every
-- upgrade: every privilege on every function, table and view of schema
-- micromegas is revoked from PUBLIC and the three roles, then granted from
-- the matrix below, so nothing is granted by a naming rule and nothing
-- survives that the matrix does not say.
--
-- The roles (sql/schema.sql): micromegas_reader reads; micromegas_service
-- (a member of the reader) writes partitions, claims files, runs jobs,
-- records deny hits and reads what the query services enforce;
-- micromegas_admin (a member of the reader, NOT of the service) defines
-- views, retires partitions, requests and cancels jobs, restores history,
-- grants audiences and denies queries. Internal functions (_mm_*) are in no
-- row: callable by no role, only by the extension's own SECURITY DEFINER
-- functions and triggers. The regression test 21_privileges compares every
-- object's effective privileges for every role with this matrix and fails on
-- an object the matrix does not name; scripts/privileges_doc.sh renders it
-- for the README.

-- One row per public object: what each role is granted on it, beyond what
-- it inherits (admin and service inherit the reader's rights; every role
-- has PUBLIC's). A function's row covers all its overloads.
CREATE FUNCTION micromegas.mm_privilege_matrix()
RETURNS TABLE (object_kind text, object_name text, public text, reader text, service text, admin text)
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM (VALUES
    -- definitions
    ('function', 'mm_catalog_version',            'EXECUTE', '',        '',        ''),
    ('function', 'list_view_sets',                'EXECUTE', '',        '',        ''),
    ('function', 'mm_privilege_matrix',           'EXECUTE', '',        '',        ''),
    ('function', 'list_view_set_definitions',     '', 'EXECUTE', '', ''),
    ('function', 'mm_view_set_snapshot',          '', 'EXECUTE', '', ''),
    ('function', 'mm_materialization_order',      '', 'EXECUTE', '', ''),
    ('function', 'list_view_dependencies',        '', 'EXECUTE', '', ''),
    ('function', 'mm_catalog_violations',         '', 'EXECUTE', '', ''),
    ('function', 'mm_explain_view',               '', 'EXECUTE', '', ''),
    ('function', 'mm_view_history',               '', 'EXECUTE', '', ''),
    ('function', 'mm_describe_view',              '', 'EXECUTE', '', ''),
    ('function', 'mm_create_view',                '', '', '', 'EXECUTE'),
    ('function', 'mm_drop_view',                  '', '', '', 'EXECUTE'),
    ('function', 'mm_restore_view',               '', '', '', 'EXECUTE'),
    ('function', 'mm_prune_view_history',         '', '', '', 'EXECUTE'),
    ('function', 'mm_register_builtin_view_set',  '', '', 'EXECUTE', 'EXECUTE'),
    -- partitions
    ('function', 'list_partitions',               '', 'EXECUTE', '', ''),
    ('function', 'list_incompatible_partitions',  '', 'EXECUTE', '', ''),
    ('function', 'mm_plan_regeneration',          '', 'EXECUTE', '', ''),
    ('function', 'retire_partitions',             '', '', '', 'EXECUTE'),
    ('function', 'retire_partition_by_metadata',  '', '', '', 'EXECUTE'),
    ('function', 'retire_partition_by_file',      '', '', '', 'EXECUTE'),
    ('function', 'retire_incompatible_partitions','', '', '', 'EXECUTE'),
    ('function', 'mm_write_partition',            '', '', 'EXECUTE', ''),
    ('function', 'mm_replace_partitions',         '', '', 'EXECUTE', ''),
    ('function', 'mm_expired_files',              '', '', 'EXECUTE', ''),
    -- jobs
    ('function', 'mm_job',                        '', 'EXECUTE', '', ''),
    ('function', 'list_jobs',                     '', 'EXECUTE', '', ''),
    ('function', 'mm_refresh_view',               '', '', '', 'EXECUTE'),
    ('function', 'regenerate_partitions',         '', '', '', 'EXECUTE'),
    ('function', 'mm_cancel_job',                 '', '', '', 'EXECUTE'),
    ('function', 'mm_claim_job',                  '', '', 'EXECUTE', ''),
    ('function', 'mm_claim_jobs',                 '', '', 'EXECUTE', ''),
    ('function', 'mm_heartbeat_job',              '', '', 'EXECUTE', ''),
    ('function', 'mm_finish_job',                 '', '', 'EXECUTE', ''),
    -- query deny list and audience grants
    ('function', 'mm_sql_hash',                   '', 'EXECUTE', '', ''),
    ('function', 'mm_access_versions',            '', 'EXECUTE', '', ''),
    ('function', 'list_audience_grants',          '', 'EXECUTE', '', ''),
    ('function', 'mm_query_deny_list_snapshot',   '', '', 'EXECUTE', 'EXECUTE'),
    ('function', 'mm_match_query_denial',         '', '', 'EXECUTE', 'EXECUTE'),
    ('function', 'mm_match_query_denial_context', '', '', 'EXECUTE', 'EXECUTE'),
    ('function', 'mm_audience_grants_snapshot',   '', '', 'EXECUTE', 'EXECUTE'),
    ('function', 'mm_record_query_denial_hits',   '', '', 'EXECUTE', ''),
    ('function', 'deny_queries',                  '', '', '', 'EXECUTE'),
    ('function', 'list_query_denials',            '', '', '', 'EXECUTE'),
    ('function', 'remove_query_denial',           '', '', '', 'EXECUTE'),
    ('function', 'mm_grant_audience',             '', '', '', 'EXECUTE'),
    ('function', 'mm_revoke_audience',            '', '', '', 'EXECUTE'),
    -- internal, but the audience_grants CHECK runs it as the writer (a pure
    -- rule check): the admin, who may write the table directly
    ('function', '_mm_audience_problem',          '', '', '', 'EXECUTE'),
    -- tables and views
    ('table', 'catalog_state',                          '', 'SELECT', '', ''),
    ('table', 'builtin_view_sets',                      '', 'SELECT', '', 'INSERT, UPDATE, DELETE'),
    ('table', 'lakehouse_view_set_definitions',         '', 'SELECT', '', 'INSERT, UPDATE, DELETE'),
    ('table', 'lakehouse_view_set_definition_history',  '', 'SELECT', '', ''),
    ('table', 'removed_shipped_rows',                   '', '', '', 'SELECT, INSERT, DELETE'),
    ('table', 'lakehouse_partitions',                   '', 'SELECT', 'INSERT, UPDATE, DELETE', ''),
    ('table', 'temporary_files',                        '', 'SELECT', 'INSERT, DELETE', ''),
    ('table', 'view_set_schema_hashes',                 '', 'SELECT', '', ''),
    ('table', 'jobs',                                   '', 'SELECT', '', ''),
    ('table', 'access_state',                           '', '', '', ''),
    ('table', 'query_deny_list',                        '', '', 'SELECT', 'SELECT, INSERT, UPDATE, DELETE'),
    ('table', 'query_deny_hits',                        '', '', 'SELECT', 'SELECT'),
    ('table', 'audience_grants',                        '', '', 'SELECT', 'SELECT, INSERT, UPDATE, DELETE')
  ) AS m(object_kind, object_name, public, reader, service, admin)
$$;

-- Apply it: revoke everything, grant what the matrix says, and refuse to
-- install an object it does not name (a new object needs a decision).
CREATE FUNCTION micromegas._mm_apply_privileges() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  o record;
  m record;
  grantee text;
  privs text;
  missing text;
BEGIN
  SELECT string_agg(x.kind || ' ' || x.name, ', ' ORDER BY x.kind, x.name) INTO missing
    FROM (SELECT 'function' AS kind, p.proname::text AS name FROM pg_catalog.pg_proc p
           WHERE p.pronamespace = 'micromegas'::regnamespace AND p.proname !~ '^_mm_'
          UNION
          SELECT 'table', c.relname::text FROM pg_catalog.pg_class c
           WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind IN ('r', 'v', 'p')) x
   WHERE NOT EXISTS (SELECT 1 FROM micromegas.mm_privilege_matrix() mx
                      WHERE mx.object_kind = x.kind AND mx.object_name = x.name);
  IF missing IS NOT NULL THEN
    RAISE EXCEPTION 'the privilege matrix (sql/privileges.sql) does not name: %', missing
      USING ERRCODE = 'internal_error';
  END IF;
  GRANT USAGE ON SCHEMA micromegas TO PUBLIC;
  FOR o IN SELECT p.oid::regprocedure::text AS target, 'FUNCTION' AS kind, p.proname::text AS name
             FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'micromegas'::regnamespace
           UNION ALL
           SELECT c.oid::regclass::text, 'TABLE', c.relname::text FROM pg_catalog.pg_class c
            WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind IN ('r', 'v', 'p') LOOP
    EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM PUBLIC, micromegas_reader, micromegas_service, micromegas_admin',
                              o.kind, o.target);
    SELECT * INTO m FROM micromegas.mm_privilege_matrix() mx
     WHERE mx.object_kind = lower(o.kind) AND mx.object_name = o.name;
    CONTINUE WHEN NOT FOUND;
    FOREACH grantee IN ARRAY ARRAY['PUBLIC', 'micromegas_reader', 'micromegas_service', 'micromegas_admin'] LOOP
      privs := CASE grantee WHEN 'PUBLIC' THEN m.public WHEN 'micromegas_reader' THEN m.reader
                            WHEN 'micromegas_service' THEN m.service ELSE m.admin END;
      IF privs <> '' THEN
        EXECUTE pg_catalog.format('GRANT %s ON %s %s TO %s', privs, o.kind, o.target, grantee);
      END IF;
    END LOOP;
  END LOOP;
END
$$;

COMMENT ON FUNCTION micromegas.mm_privilege_matrix() IS
  'What each role is granted on each function and table of the extension (inherited rights not repeated); the grants are made from it';

SELECT micromegas._mm_apply_privileges();
