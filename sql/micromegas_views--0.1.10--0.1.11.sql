-- micromegas_views 0.1.10 -> 0.1.11. What changes:
-- * (Rust) every function that reads caller text or bytes runs in a helper
--   process forked from the backend, under a time limit and a memory
--   budget (micromegas_views.validation_memory, superuser-only, 256MB):
--   work past either is killed with its helper, so it never outlives its
--   statement and never grows the backend; a helper's death never restarts
--   the cluster. A caller that is not an admin is held to the default
--   validation_timeout (5s) whatever it sets.
-- * (Rust) a definition's reads are every view set its planning resolved,
--   in a CTE it never uses too: the dependency guard and the group check
--   see them.
-- * mm_explain_view asks its questions without writing on a primary too:
--   a dry run takes no lock and never waits for one.
-- * the jobs channel says only what happened ({"op": ...}): any role may
--   LISTEN, and a job's id, kind and view are the table's to tell.
-- * the extension's roles carry its mark, the role setting
--   micromegas_views.extension_role (superuser-only): a restore of
--   pg_dumpall --roles-only into a new cluster, or CREATE EXTENSION in
--   another database, recognises them without adopt_existing_roles.
-- * materialize_partitions (new; micromegas' name, regenerate_partitions'
--   privileges and buckets): one 'materialize' job per bucket, which the
--   daemon writes only where stale; both queue through _mm_queue_buckets.
-- * a write plans its definition before it takes the catalog lock
--   (_mm_plan_ahead, new): under the lock it takes that answer from memory
--   unless the catalog rows the definition reads moved meanwhile, so a long
--   validation no longer holds other writers. The re-check of the
--   definitions that read a replaced view, or a re-registered built-in
--   (_mm_plan_builtin_ahead, new), is planned ahead of the lock too, and
--   so is mm_restore_view.
-- * a job's row shows its progress (jobs.progress, new): a worker's
--   heartbeat may carry it (mm_heartbeat_job's third argument, new,
--   DEFAULT NULL: two-argument calls work as before); a claim clears it.
-- * mm_replace_partitions and mm_write_partition refuse a view set that
--   does not exist and hold its row until they commit (_mm_hold_view_set,
--   new): no partition is recorded for a view dropped while it was being
--   materialized.
-- * the re-check of the definitions reading a changed one is one routine
--   for the write and for the read-only dry run (_mm_recheck and
--   _mm_definition_changed, new; _mm_recheck_dependents and
--   _mm_recheck_read_only go): the dry run differs only in not writing.
-- * what a trigger reports to the function that ran its statement (the
--   view a replace replaced, the job a create queued, what a drop retired)
--   is backend memory (_mm_report, _mm_take_report, new), not settings
--   any role could write.
-- The extension's mark on its roles, where it is missing (rewriting it
-- would make two installs in two databases at once collide on the same
-- catalog row). The upgrade to 0.1.11 runs this same block.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT a.rolname FROM pg_catalog.pg_roles a
            WHERE a.rolname IN ('micromegas_admin', 'micromegas_reader', 'micromegas_service')
              AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_db_role_setting s
                               WHERE s.setdatabase = 0 AND s.setrole = a.oid
                                 AND pg_catalog.format('micromegas_views.extension_role=%s', a.rolname) = ANY (s.setconfig)) LOOP
    EXECUTE pg_catalog.format('ALTER ROLE %I SET micromegas_views.extension_role = %L', r.rolname, r.rolname);
  END LOOP;
END
$$;

COMMENT ON TABLE micromegas.query_deny_list IS
  'Query deny list: a FlightSQL query whose context makes match_expr TRUE is rejected';
COMMENT ON TABLE micromegas.audience_grants IS
  'Audience grants: who may read or mint each audience';

CREATE OR REPLACE FUNCTION micromegas._mm_jobs_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_notify('micromegas_jobs', json_build_object(
    'op', CASE WHEN TG_OP = 'UPDATE' AND NEW.cancel_requested AND NOT OLD.cancel_requested
                 THEN 'cancel_requested' ELSE NEW.state END)::text);
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_jobs_notify() IS
  'Trigger: notifies micromegas_jobs of a job queued or asked to stop, and of one finished when micromegas_views.notify_finished_jobs is on (one payload per row; never for a claim or a heartbeat)';
CREATE OR REPLACE FUNCTION micromegas.mm_explain_view(statement text)
RETURNS TABLE (view_set_name text, would_be text, schema text, schema_hash bytea, reads text[],
               dependents text[], materialization_position bigint, problems text[], warnings jsonb)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM micromegas._mm_explain_view(statement, true)
$$;
COMMENT ON FUNCTION micromegas.mm_explain_view(text) IS
  'Dry run of mm_create_view: every check, nothing written, no lock taken or waited for; the same answer on a hot standby';
COMMENT ON FUNCTION micromegas.mm_explain_view(text) IS
  'Dry run of mm_create_view: every check, nothing written, no lock taken or waited for; the same answer on a hot standby';
COMMENT ON FUNCTION micromegas._mm_explain_view(text, boolean) IS
  'mm_explain_view by _mm_dry_run_read_only (read_only), or by a rolled-back write, its oracle in the tests';

CREATE FUNCTION micromegas."_mm_plan_ahead"(
	"view_set_name" TEXT, /* Option < String > */
	"definition_sql" TEXT, /* Option < String > */
	"extract_query" TEXT, /* Option < String > */
	"count_src_query" TEXT, /* Option < String > */
	"merge_partitions_query" TEXT, /* Option < String > */
	"update_group" INT, /* Option < i32 > */
	"view_options" jsonb /* Option < JsonB > */
) RETURNS bool /* bool */
VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'plan_ahead_wrapper';
COMMENT ON FUNCTION micromegas._mm_plan_ahead(text,text,text,text,text,integer,jsonb) IS
  'Plans a definitions row, and the re-check of the definitions reading it, before its write takes the catalog lock; the write takes the answers from memory unless the catalog rows they read moved';
CREATE FUNCTION micromegas."_mm_plan_builtin_ahead"(
	"name" TEXT, /* String */
	"schema_text" TEXT, /* String */
	"update_group" INT, /* i32 */
	"kind" TEXT /* String */
) RETURNS bool /* bool */
STRICT VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'plan_builtin_ahead_wrapper';
COMMENT ON FUNCTION micromegas._mm_plan_builtin_ahead(text,text,integer,text) IS
  'Plans, before a built-in''s registration takes the catalog lock, the re-check of the definitions reading it when the registration changes their input';
CREATE OR REPLACE FUNCTION micromegas.mm_register_builtin_view_set(
  name text,
  schema text,
  update_group integer,
  kind text DEFAULT 'materialized',
  has_view_maker boolean DEFAULT false,
  global_instance_available boolean DEFAULT true)
RETURNS TABLE (view_set_name text, schema_hash bytea, version bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_register_builtin_view_set');
BEGIN
  -- The re-check of the definitions reading it, when this changes what they
  -- read, is planned before the lock: under it the re-check takes the
  -- answers from memory. The schema's forms (it reads JSON or IPC given as
  -- schema_ipc), the name rules and the shared namespace are the table
  -- trigger's.
  PERFORM micromegas._mm_plan_builtin_ahead(name, schema, update_group, kind);
  PERFORM micromegas._mm_lock_catalog();
  INSERT INTO micromegas.builtin_view_sets AS b
         (view_set_name, update_group, kind, has_view_maker, global_instance_available, schema_ipc, schema_json)
  VALUES (name, update_group, kind, has_view_maker, global_instance_available,
          schema, NULL)
  ON CONFLICT ON CONSTRAINT builtin_view_sets_pkey DO UPDATE
     SET update_group = EXCLUDED.update_group, kind = EXCLUDED.kind,
         has_view_maker = EXCLUDED.has_view_maker,
         global_instance_available = EXCLUDED.global_instance_available,
         schema_ipc = EXCLUDED.schema_ipc, schema_json = EXCLUDED.schema_json;
  RETURN QUERY SELECT b.view_set_name, b.schema_hash, micromegas.mm_catalog_version()
                 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = name;
END
$$;
COMMENT ON FUNCTION micromegas.mm_register_builtin_view_set(text, text, integer, text, boolean, boolean) IS
  'A service registers the current schema of a code-defined view set (base64 Arrow IPC or JSON)';
CREATE OR REPLACE FUNCTION micromegas.mm_create_view(
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
  on_primary boolean := micromegas._mm_require_writable('mm_create_view');
  options jsonb := pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
    'time_column', time_column, 'min_time_column', min_time_column, 'max_time_column', max_time_column,
    'source_partition_delta', source_partition_delta, 'merge_partition_delta', merge_partition_delta,
    'merge_sort_order', merge_sort_order, 'with_no_data', with_no_data, 'auto_refresh', auto_refresh));
  outcome text := 'created';
BEGIN
  PERFORM micromegas._mm_take_report('created_job');
  -- Planned before the lock: the write under it takes the answer from
  -- memory unless what the definition reads moved meanwhile.
  PERFORM micromegas._mm_plan_ahead(name, NULL, extract_query, count_src_query, merge_partitions_query,
                                    update_group, options);
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
                      micromegas._mm_take_report('created_job')::uuid;
END
$$;
COMMENT ON FUNCTION micromegas.mm_create_view(text) IS
  'CREATE [OR REPLACE] MATERIALIZED VIEW name WITH (...): validate and store a view set definition';
CREATE OR REPLACE FUNCTION micromegas._mm_definitions_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  intent text := micromegas._mm_intent(NEW.view_set_name);
  keep_given boolean;
  statement_sql text := NEW.definition_sql;
  p record;
BEGIN
  IF TG_OP = 'INSERT' THEN
    -- Planned before the lock (src/pg/api.rs, _mm_plan_ahead): a long
    -- validation holds no other writer; the call below, under the lock,
    -- plans again only if what the definition reads moved meanwhile.
    PERFORM micromegas._mm_plan_ahead(NEW.view_set_name, NEW.definition_sql, NEW.extract_query,
                                      NEW.count_src_query, NEW.merge_partitions_query,
                                      NEW.update_group, NEW.view_options);
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
    IF NEW.definition_sql IS NOT DISTINCT FROM OLD.definition_sql
       AND (NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query, NEW.update_group, NEW.view_options)
           IS DISTINCT FROM
           (OLD.extract_query, OLD.count_src_query, OLD.merge_partitions_query, OLD.update_group, OLD.view_options)
       AND num_nonnulls(NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query,
                        NEW.update_group, NEW.view_options) > 0 THEN
      -- Only the columns changed: the stored text is re-rendered from them.
      statement_sql := NULL;
    END IF;
    -- An UPDATE takes the catalog lock first and plans under it: Postgres
    -- has locked the row already, and a writer holding the catalog lock
    -- that needs this row (a drop, a re-check's rewrite) would wait for the
    -- planning and then deadlock with it. (mm_create_view, mm_restore_view
    -- and the INSERT above plan before any lock.)
    PERFORM micromegas._mm_next_version();
    keep_given := coalesce(intent IN ('recheck', 'load'), false);
    -- Rows stay "as shipped" only through the extension's own scripts.
    NEW.shipped := OLD.shipped AND micromegas._mm_installing();
    IF intent IS NOT DISTINCT FROM 'recheck' AND NEW.load_status = 'failed'
       AND (NEW.view_set_name, NEW.definition_sql, NEW.extract_query, NEW.count_src_query,
            NEW.merge_partitions_query, NEW.update_group, NEW.view_options)
           IS NOT DISTINCT FROM
           (OLD.view_set_name, OLD.definition_sql, OLD.extract_query, OLD.count_src_query,
            OLD.merge_partitions_query, OLD.update_group, OLD.view_options) THEN
      -- A re-check marks a definition whose source changed as failed to load
      -- (its UPDATE sets only load_status and load_error), or gives one
      -- already failed its new reason; its stored schema stays (planning it
      -- again would store an empty one, and the moved schema would make its
      -- own dependents refuse a change a re-check must never refuse).
      NEW.sources_hash := NULL;
      RETURN NEW;
    END IF;
    IF NEW.view_set_name IS DISTINCT FROM OLD.view_set_name THEN
      RAISE EXCEPTION 'cannot rename materialized view "%"', OLD.view_set_name
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Create the view under the new name, then drop the old one.';
    END IF;
  END IF;

  SELECT * INTO p FROM micromegas._mm_prepare_definition(
    NEW.view_set_name, statement_sql, NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query,
    NEW.update_group, NEW.view_options,
    -- A dumped row that had failed to load is validated again: it loads if
    -- it plans now, and is kept as failed with the fresh reason if its
    -- queries still do not plan. Any other problem is refused as usual.
    keep_given AND NEW.load_status = 'failed');

  IF micromegas._mm_name_taken(p.view_set_name, p.or_replace, TG_OP = 'INSERT') THEN
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
    -- mm_create_view reports the replace (a skipped INSERT returns no row),
    -- told through backend memory no caller can write.
    PERFORM micromegas._mm_report('replaced', p.view_set_name);
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT' THEN
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
  NEW.warnings := p.warnings;
  NEW.sources_hash := p.sources_hash;
  -- The author of this write hears of the obligations it misses; the
  -- extension's own re-checks and loads, and pg_restore's rows, do not
  -- raise them again.
  IF NOT keep_given AND (intent IS NULL OR intent IN ('replace', 'restore')) THEN
    PERFORM micromegas._mm_report_author_findings(p.view_set_name, p.warnings);
  END IF;
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
COMMENT ON FUNCTION micromegas._mm_definitions_before_write() IS
  'Trigger: parses, validates and derives every column of a definition row (one call into Rust); turns a CREATE OR REPLACE into an update';
CREATE OR REPLACE FUNCTION micromegas.mm_restore_view(name text, version bigint)
RETURNS SETOF micromegas.view_change
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_restore_view');
  h micromegas.lakehouse_view_set_definition_history;
  outcome text := 'restored';
BEGIN
  -- Planned before the lock, with the re-check of what reads it (as a
  -- write of mm_create_view is): under the lock the write takes the
  -- answers from memory unless what they read moved meanwhile.
  h := micromegas._mm_history_version(mm_restore_view.name, mm_restore_view.version);
  PERFORM micromegas._mm_plan_ahead(h.view_set_name, h.definition_sql, h.extract_query, h.count_src_query,
                                    h.merge_partitions_query, h.update_group, h.view_options);
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
COMMENT ON FUNCTION micromegas.mm_restore_view(text, bigint) IS
  'Put a view back as it was at a version (validated like CREATE OR REPLACE)';
CREATE OR REPLACE FUNCTION micromegas.mm_privilege_matrix()
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
    ('function', 'mm_require_author_checks',      '', '', '', 'EXECUTE'),
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
    ('function', 'materialize_partitions',        '', '', '', 'EXECUTE'),
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
    ('table', 'file_claims',                            '', '', '', ''),
    ('table', 'view_set_schema_hashes',                 '', 'SELECT', '', ''),
    ('table', 'jobs',                                   '', 'SELECT', '', ''),
    ('table', 'access_state',                           '', '', '', ''),
    ('table', 'query_deny_list',                        '', '', 'SELECT', 'SELECT, INSERT, UPDATE, DELETE'),
    ('table', 'query_deny_hits',                        '', '', 'SELECT', 'SELECT'),
    ('table', 'audience_grants',                        '', '', 'SELECT', 'SELECT, INSERT, UPDATE, DELETE'),
    ('table', 'author_check_requirements',              '', 'SELECT', '', '')
  ) AS m(object_kind, object_name, public, reader, service, admin)
$$;
CREATE FUNCTION micromegas._mm_queue_buckets(
  kind text, caller text, view_set_name text, begin_time timestamptz, end_time timestamptz,
  partition_delta_seconds integer)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  bucket record;
  r record;
BEGIN
  IF partition_delta_seconds IS NULL OR partition_delta_seconds <= 0 THEN
    RAISE EXCEPTION '%: partition_delta_seconds must be a positive number of seconds, not %',
        caller, coalesce(partition_delta_seconds::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOR bucket IN SELECT * FROM micromegas.mm_plan_regeneration($3, $4, $5, make_interval(secs => partition_delta_seconds)) LOOP
    SELECT * INTO r FROM micromegas._mm_request_job(kind, $3, bucket.bucket_begin, bucket.bucket_end,
                                                     jsonb_build_object('partition_delta_seconds', partition_delta_seconds));
    RETURN QUERY SELECT clock_timestamp(), format('%s %s of %s [%s, %s): job %s',
      CASE WHEN r.existing THEN 'already queued:' ELSE 'queued' END,
      CASE kind WHEN 'regenerate' THEN 'regeneration' ELSE 'materialization' END, $3,
      micromegas._mm_time_text(bucket.bucket_begin), micromegas._mm_time_text(bucket.bucket_end), r.job_id);
  END LOOP;
END
$$;
COMMENT ON FUNCTION micromegas._mm_queue_buckets(text, text, text, timestamptz, timestamptz, integer) IS
  'One queued job of the given kind per bucket of [begin, end), checked like mm_plan_regeneration: regenerate_partitions and materialize_partitions';
CREATE OR REPLACE FUNCTION micromegas.regenerate_partitions(
  view_set_name text, begin_time timestamptz, end_time timestamptz, partition_delta_seconds integer)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('regenerate_partitions');
BEGIN
  RETURN QUERY SELECT * FROM micromegas._mm_queue_buckets('regenerate', 'regenerate_partitions', $1, $2, $3, $4);
END
$$;
COMMENT ON FUNCTION micromegas.regenerate_partitions(text, timestamptz, timestamptz, integer) IS
  'Queue one regeneration job per bucket of [begin, end), checked like mm_plan_regeneration';
-- A running job's progress, reported with its heartbeats.
ALTER TABLE micromegas.jobs ADD COLUMN progress jsonb;
COMMENT ON COLUMN micromegas.jobs.progress IS 'What the running (or last) attempt reported with its heartbeats, a JSON object; NULL until it reports';
DROP FUNCTION micromegas.mm_heartbeat_job(uuid, uuid);
CREATE FUNCTION micromegas.mm_heartbeat_job(job_id uuid, lease_token uuid, progress jsonb DEFAULT NULL) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  stop boolean;
BEGIN
  -- What the attempt has done so far, for people watching the job: one
  -- small JSON object (every reader sees it), kept until the next report.
  IF $3 IS NOT NULL AND (pg_catalog.jsonb_typeof($3) <> 'object' OR pg_catalog.octet_length($3::text) > 4096) THEN
    RAISE EXCEPTION 'a job''s progress must be a JSON object of at most 4096 bytes'
      USING ERRCODE = 'invalid_parameter_value',
            DETAIL = format('Got a JSON %s of %s bytes.', pg_catalog.jsonb_typeof($3), pg_catalog.octet_length($3::text));
  END IF;
  -- On a standby the refusal that names the operation; on the primary one
  -- built-in call, not a nested function with its own search_path (#28).
  IF pg_catalog.pg_is_in_recovery() THEN
    PERFORM micromegas._mm_require_writable('mm_heartbeat_job');
  END IF;
  -- One statement checks the lease, locks the row and extends the lease.
  -- When it finds no row, _mm_held_job raises why; it returns only when the
  -- claim committed after that statement began (its row, not yet running
  -- then, is now locked under this lease): the statement runs again.
  FOR attempt IN 1..2 LOOP
    UPDATE micromegas.jobs x
       SET lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds()),
           progress = coalesce($3, x.progress)
     WHERE x.job_id = $1 AND x.state = 'running' AND x.lease_token_hash = micromegas._mm_lease_hash($2)
    RETURNING x.cancel_requested INTO stop;
    IF FOUND THEN
      RETURN CASE WHEN stop THEN 'cancel_requested' ELSE 'running' END;
    END IF;
    PERFORM micromegas._mm_held_job($1, $2);
  END LOOP;
  RAISE EXCEPTION 'job % is not held by this lease', $1 USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;
COMMENT ON FUNCTION micromegas.mm_heartbeat_job(uuid, uuid, jsonb) IS
  'A worker extends its lease (proved by the token mm_claim_job returned), with its progress if it gives one; says whether the job should stop';
CREATE OR REPLACE FUNCTION micromegas.mm_claim_jobs(worker text, max_jobs integer DEFAULT 1, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  now_ts timestamptz := clock_timestamp();
  ids uuid[];
BEGIN
  -- On a standby the refusal that names the operation; on the primary one
  -- built-in call, not a nested function with its own search_path (#28).
  IF pg_catalog.pg_is_in_recovery() THEN
    PERFORM micromegas._mm_require_writable('mm_claim_jobs');
  END IF;
  IF coalesce(btrim(worker, E' \t\n\r\f\v'), '') = '' THEN
    RAISE EXCEPTION 'mm_claim_jobs: a worker name is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_jobs IS NULL OR max_jobs < 1 OR max_jobs > 1000 THEN
    RAISE EXCEPTION 'mm_claim_jobs: max_jobs must be between 1 and 1000, not %', coalesce(max_jobs::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF EXISTS (SELECT 1 FROM micromegas.jobs x WHERE x.state = 'running' AND x.lease_expires_at < now_ts) THEN
    PERFORM micromegas._mm_expire_leases();
  END IF;
  ids := ARRAY(SELECT x.job_id FROM micromegas.jobs x
                WHERE x.state = 'queued' AND (kinds IS NULL OR x.kind = ANY (kinds))
                ORDER BY x.created_at LIMIT max_jobs
                  FOR UPDATE SKIP LOCKED);
  IF cardinality(ids) = 0 THEN
    RETURN;
  END IF;
  RETURN QUERY
    UPDATE micromegas.jobs j
       SET state = 'running', worker = mm_claim_jobs.worker, started_at = clock_timestamp(),
           lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds()),
           lease_token_hash = micromegas._mm_lease_hash(p.token),
           attempts = j.attempts + 1, progress = NULL
      FROM (SELECT i.job_id, gen_random_uuid() AS token FROM unnest(ids) i(job_id)) p
     WHERE j.job_id = p.job_id
    RETURNING j.job_id, j.kind::text, j.view_set_name, j.begin_time, j.end_time, j.params::jsonb, j.attempts, j.worker,
              j.lease_expires_at, p.token;
END
$$;
COMMENT ON FUNCTION micromegas.mm_claim_jobs(text, integer, text[]) IS
  'A worker claims up to max_jobs of the oldest queued jobs, each with a lease and a token of its own';
CREATE FUNCTION micromegas._mm_snapshot_per_statement() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT pg_catalog.current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')
$$;
COMMENT ON FUNCTION micromegas._mm_snapshot_per_statement() IS
  'Whether each statement of the transaction takes its own snapshot (READ COMMITTED or READ UNCOMMITTED)';
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
CREATE OR REPLACE FUNCTION micromegas.mm_expired_files(max_files integer DEFAULT 1000)
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
CREATE OR REPLACE FUNCTION micromegas.mm_write_partition(
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
CREATE OR REPLACE FUNCTION micromegas.mm_replace_partitions(
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
CREATE FUNCTION micromegas.materialize_partitions(
  view_set_name text, begin_time timestamptz, end_time timestamptz, partition_delta_seconds integer)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('materialize_partitions');
BEGIN
  RETURN QUERY SELECT * FROM micromegas._mm_queue_buckets('materialize', 'materialize_partitions', $1, $2, $3, $4);
END
$$;
COMMENT ON FUNCTION micromegas.materialize_partitions(text, timestamptz, timestamptz, integer) IS
  'Queue one materialization job per bucket of [begin, end), checked like mm_plan_regeneration; the daemon writes a bucket only where its source count moved';
-- The re-check of dependents is one routine for the write and the dry run
-- (_mm_recheck, _mm_definition_changed): the AFTER UPDATE trigger reports
-- incompatible partitions itself, and the dry run's copies go.
DROP TRIGGER definitions_report_incompatible_update ON micromegas.lakehouse_view_set_definitions;
DROP FUNCTION micromegas._mm_recheck_dependents(text, boolean);
DROP FUNCTION micromegas._mm_recheck_read_only(text, boolean, text[], text[], integer[], text[]);
DROP FUNCTION micromegas._mm_recheck_definition(text, text, text, text, integer, jsonb);
CREATE FUNCTION micromegas._mm_definition_changed(name text, was_ok boolean, now_ok boolean,
  old_schema text, new_schema text, old_group integer, new_group integer, old_hash bytea, new_hash bytea,
  dry boolean, INOUT names text[], INOUT schemas text[], INOUT groups integer[], INOUT errors text[])
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  strictly boolean;
  w record;
BEGIN
  IF NOT was_ok AND now_ok THEN
    strictly := false;
  ELSIF old_schema IS DISTINCT FROM new_schema OR old_group IS DISTINCT FROM new_group THEN
    strictly := NOT (micromegas._mm_installing() OR micromegas._mm_intent_held('lenient'));
  END IF;
  IF strictly IS NOT NULL THEN
    SELECT * INTO w FROM micromegas._mm_recheck(name, strictly, dry, names, schemas, groups, errors);
    names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
  END IF;
  IF old_hash IS DISTINCT FROM new_hash THEN
    PERFORM micromegas._mm_report_incompatible(name, new_hash);
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas._mm_definition_changed(text, boolean, boolean, text, text, integer, integer, bytea, bytea, boolean, text[], text[], integer[], text[]) IS
  'What a changed definition row sets off (the re-check of its dependents, strict or lenient, and the incompatible-partition notice), for the write and the dry run alike';
CREATE OR REPLACE FUNCTION micromegas._mm_dry_write(name text, schema_ipc text, update_group integer, load_error text,
  INOUT names text[], INOUT schemas text[], INOUT groups integer[], INOUT errors text[])
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  i integer := pg_catalog.array_position(names, name);
BEGIN
  IF i IS NULL THEN
    names := names || name; schemas := schemas || schema_ipc;
    groups := groups || update_group; errors := errors || load_error;
  ELSE
    schemas[i] := schema_ipc; groups[i] := update_group; errors[i] := load_error;
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas._mm_dry_write(text, text, integer, text, text[], text[], integer[], text[]) IS
  'One row a read-only dry run would have written, kept in its arrays';
CREATE FUNCTION micromegas._mm_recheck(source text, strict boolean, dry boolean,
  INOUT names text[], INOUT schemas text[], INOUT groups integer[], INOUT errors text[])
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dep record;
  down record;
  cur record;
  checked text;
  problem text;
  w record;
BEGIN
  -- A lenient re-check stays lenient all the way down: the rewrite of a
  -- dependent whose schema moved re-checks that one's dependents in turn,
  -- and those must be marked, not refused.
  IF NOT strict THEN
    PERFORM micromegas._mm_intent_begin('lenient', NULL);
  END IF;
  -- Every write below is the extension's own re-check (src/pg/trust.rs).
  PERFORM micromegas._mm_intent_begin('recheck', NULL);
  FOR dep IN SELECT d.view_set_name, d.extract_query, d.count_src_query, d.merge_partitions_query,
                    d.update_group, d.view_options,
                    coalesce(schemas[pg_catalog.array_position(names, d.view_set_name)], d.schema_ipc) AS schema_ipc,
                    CASE WHEN pg_catalog.array_position(names, d.view_set_name) IS NULL THEN d.load_status = 'ok'
                         ELSE errors[pg_catalog.array_position(names, d.view_set_name)] IS NULL END AS was_ok
               FROM micromegas.lakehouse_view_set_definitions d
              WHERE d.reads @> ARRAY[source] ORDER BY d.update_group, d.view_set_name LOOP
    -- Why the dependent no longer validates comes back as data, decided
    -- by the error's kind in Rust (ErrorKind::is_about_the_definition):
    -- its text, checks and own limits (nesting, plan nodes, width, size).
    -- Anything else is raised and fails the change, nothing marked: a
    -- validation past a minute (re-checks run under the 60 s maximum, not
    -- the session's limit: src/pg/settings.rs), Postgres running out of a
    -- resource (memory, disk, stack: a very deep chain of views), a bug; a
    -- cancel or statement_timeout as always.
    SELECT r.schema_ipc, r.problem INTO checked, problem
      FROM micromegas._mm_recheck_definition_with(dep.view_set_name, dep.extract_query, dep.count_src_query,
             dep.merge_partitions_query, dep.update_group, dep.view_options, names, schemas, groups, errors) r;
    IF problem IS NOT NULL THEN
      IF strict THEN
        PERFORM micromegas._mm_raise_broken_dependent(source, dep.view_set_name, problem);
      END IF;
      -- Marked failed (its stored schema stays), then every definition
      -- downstream of it that still loads.
      FOR down IN SELECT dep.view_set_name, dep.schema_ipc, dep.update_group,
                         format('no longer valid after "%s" changed: %s', source, problem) AS load_error, 0 AS step
                  UNION ALL
                  (WITH RECURSIVE downstream(name) AS (
                    SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x WHERE x.reads @> ARRAY[dep.view_set_name]
                    UNION
                    SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x, downstream s WHERE x.reads @> ARRAY[s.name])
                  SELECT x.view_set_name,
                         coalesce(schemas[pg_catalog.array_position(names, x.view_set_name)], x.schema_ipc),
                         x.update_group, format('reads a view set that failed to load (after "%s" changed)', source), 1
                    FROM micromegas.lakehouse_view_set_definitions x
                   WHERE x.view_set_name IN (SELECT s.name FROM downstream s)
                     AND CASE WHEN pg_catalog.array_position(names, x.view_set_name) IS NULL THEN x.load_status <> 'failed'
                              ELSE errors[pg_catalog.array_position(names, x.view_set_name)] IS NULL END)
                  ORDER BY step, view_set_name LOOP
        IF dry THEN
          SELECT * INTO w FROM micromegas._mm_dry_write(down.view_set_name, down.schema_ipc, down.update_group,
            down.load_error, names, schemas, groups, errors);
          names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
        ELSE
          UPDATE micromegas.lakehouse_view_set_definitions d
             SET load_status = 'failed', load_error = down.load_error
           WHERE d.view_set_name = down.view_set_name;
        END IF;
      END LOOP;
      CONTINUE;
    END IF;
    IF checked IS DISTINCT FROM dep.schema_ipc OR NOT dep.was_ok THEN
      -- Rewritten: it stores the schema just computed and loads (a full
      -- rewrite clears a failed mark: it says 'ok'), and what that change
      -- sets off follows, against the row as it is now (this re-check may
      -- have marked it since it started).
      IF dry THEN
        SELECT coalesce(schemas[pg_catalog.array_position(names, d.view_set_name)], d.schema_ipc) AS schema_ipc,
               CASE WHEN pg_catalog.array_position(names, d.view_set_name) IS NULL THEN d.load_status = 'ok'
                    ELSE errors[pg_catalog.array_position(names, d.view_set_name)] IS NULL END AS ok
          INTO cur FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = dep.view_set_name;
        SELECT * INTO w FROM micromegas._mm_dry_write(dep.view_set_name, checked, dep.update_group, NULL,
          names, schemas, groups, errors);
        SELECT * INTO w FROM micromegas._mm_definition_changed(dep.view_set_name, cur.ok, true,
          cur.schema_ipc, checked, dep.update_group, dep.update_group,
          (SELECT f.schema_hash FROM micromegas._mm_schema_forms(cur.schema_ipc) f),
          (SELECT f.schema_hash FROM micromegas._mm_schema_forms(checked) f),
          true, w.names, w.schemas, w.groups, w.errors);
        names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
      ELSE
        -- Its AFTER UPDATE trigger calls _mm_definition_changed.
        UPDATE micromegas.lakehouse_view_set_definitions d
           SET definition_sql = d.definition_sql, load_status = 'ok'
         WHERE d.view_set_name = dep.view_set_name;
      END IF;
    END IF;
  END LOOP;
  PERFORM micromegas._mm_intent_end('recheck');
  IF NOT strict THEN
    PERFORM micromegas._mm_intent_end('lenient');
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas._mm_recheck(text, boolean, boolean, text[], text[], integer[], text[]) IS
  'Re-checks every definition reading a changed view set: refuses (strict) or marks failed; rewrites those whose schema moved or that load again. The write and the dry run (dry) share every decision';
CREATE OR REPLACE FUNCTION micromegas._mm_definitions_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM micromegas._mm_definition_changed(NEW.view_set_name, OLD.load_status = 'ok', NEW.load_status = 'ok',
    OLD.schema_ipc, NEW.schema_ipc, OLD.update_group, NEW.update_group, OLD.schema_hash, NEW.schema_hash,
    false, '{}', '{}', '{}', '{}');
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_definitions_after_update() IS
  'Trigger: what a changed definition sets off (_mm_definition_changed): the re-check of its dependents, the incompatible-partition notice';
CREATE OR REPLACE FUNCTION micromegas._mm_builtins_after_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM micromegas._mm_recheck(OLD.view_set_name, false, false, '{}', '{}', '{}', '{}');
  ELSIF TG_OP = 'INSERT' OR NEW.schema_ipc IS DISTINCT FROM OLD.schema_ipc
     OR NEW.update_group IS DISTINCT FROM OLD.update_group OR NEW.kind IS DISTINCT FROM OLD.kind THEN
    PERFORM micromegas._mm_recheck(NEW.view_set_name, false, false, '{}', '{}', '{}', '{}');
  END IF;
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_builtins_after_write() IS
  'Trigger: re-checks the dependents of a built-in view set whose schema or group changed (marking those that no longer validate)';
CREATE OR REPLACE FUNCTION micromegas._mm_definitions_report_incompatible() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM micromegas._mm_report_incompatible(NEW.view_set_name, NEW.schema_hash);
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_definitions_report_incompatible() IS
  'Trigger: a NOTICE when a definition created over left-over partitions does not match some of them';
CREATE OR REPLACE FUNCTION micromegas._mm_dry_run_read_only(statement text,
  OUT view_set_name text, OUT outcome text, OUT schema_ipc text, OUT schema_hash bytea, OUT reads text[],
  OUT update_group integer, OUT warnings jsonb)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  p record;
  old micromegas.lakehouse_view_set_definitions;
  replacing boolean;
BEGIN
  SELECT * INTO p FROM micromegas._mm_prepare_definition(NULL, statement, NULL, NULL, NULL, NULL, NULL, false);
  view_set_name := p.view_set_name;
  schema_ipc := p.schema_ipc;
  schema_hash := p.schema_hash;
  reads := p.reads;
  update_group := p.update_group;
  warnings := p.warnings;
  outcome := 'created';
  replacing := micromegas._mm_name_taken(p.view_set_name, p.or_replace, true);
  -- The write raises the author findings before anything else it does.
  PERFORM micromegas._mm_report_author_findings(p.view_set_name, p.warnings);
  IF replacing THEN
    outcome := 'replaced';
    SELECT * INTO old FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = p.view_set_name;
    -- What the write's UPDATE sets off, decided by the same routine.
    PERFORM micromegas._mm_definition_changed(p.view_set_name, old.load_status = 'ok', true,
      old.schema_ipc, p.schema_ipc, old.update_group, p.update_group, old.schema_hash, p.schema_hash,
      true, ARRAY[p.view_set_name], ARRAY[p.schema_ipc], ARRAY[p.update_group], ARRAY[NULL::text]);
  ELSE
    PERFORM micromegas._mm_report_incompatible(p.view_set_name, p.schema_hash);
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas._mm_dry_run_read_only(text) IS
  'What mm_create_view(statement) would store, or the error it would raise, without writing';
COMMENT ON FUNCTION micromegas._mm_recheck_definition_with(text,text,text,text,integer,jsonb,text[],text[],integer[],text[]) IS
  'A re-check of a stored dependent, as if the given DDL views had the given schemas, groups and load errors (a dry run''s so far): its schema as it validates now, or why it does not (an error about the definition itself); any other error is raised';
-- What a trigger tells the function that ran its statement travels in
-- backend memory (_mm_report, _mm_take_report, new), not in settings any
-- role may write.
CREATE FUNCTION micromegas."_mm_report"(
	"kind" TEXT, /* & str */
	"value" TEXT /* & str */
) RETURNS void
STRICT VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'report_wrapper';
COMMENT ON FUNCTION micromegas._mm_report(text,text) IS
  'A trigger reports what the statement''s result cannot carry (the view a replace replaced, the job a create queued, what a drop retired) to the function that ran it: backend memory no caller can write';
CREATE FUNCTION micromegas."_mm_take_report"(
	"kind" TEXT /* & str */
) RETURNS TEXT /* Option < String > */
STRICT VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'take_report_wrapper';
COMMENT ON FUNCTION micromegas._mm_take_report(text) IS
  'What a trigger last reported of a kind (_mm_report), forgotten once read';
CREATE OR REPLACE FUNCTION micromegas.mm_create_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint, incompatible_partitions bigint, job_id uuid)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_create_view');
  target text;
  outcome text;
BEGIN
  PERFORM micromegas._mm_take_report('replaced'), micromegas._mm_take_report('created_job');
  INSERT INTO micromegas.lakehouse_view_set_definitions AS d (definition_sql) VALUES (statement)
  RETURNING d.view_set_name INTO target;
  outcome := CASE WHEN target IS NULL THEN 'replaced' ELSE 'created' END;
  target := coalesce(target, micromegas._mm_take_report('replaced'));
  RETURN QUERY SELECT target, outcome, s.version, micromegas._mm_incompatible_count(target),
                      micromegas._mm_take_report('created_job')::uuid
                 FROM micromegas.catalog_state s;
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_drop(target text, if_exists boolean)
RETURNS TABLE (view_set_name text, status text, version bigint, partitions_retired bigint, bytes_queued bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  retired text[];
BEGIN
  -- A writer of the view's partitions in flight holds its row until it
  -- commits (_mm_hold_view_set). The drop waits for it holding no lock of
  -- the catalog, so that other catalog writes do not queue behind it too:
  -- the row is locked in a subtransaction that is then rolled back, which
  -- releases it. Then it takes the catalog lock and the row without waiting;
  -- a writer that came in between makes it give the catalog lock back (its
  -- subtransaction rolled back) and wait again. After a few rounds (writers
  -- that keep coming), or in a transaction that held the catalog lock
  -- already, it waits under the lock.
  FOR attempt IN 1 .. 5 LOOP
    BEGIN
      PERFORM 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = target FOR UPDATE;
      RAISE EXCEPTION USING ERRCODE = 'MMV01';
    EXCEPTION WHEN SQLSTATE 'MMV01' THEN
      NULL;
    END;
    BEGIN
      PERFORM micromegas._mm_lock_catalog();
      PERFORM 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = target FOR UPDATE SKIP LOCKED;
      IF FOUND OR NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = target) THEN
        EXIT;  -- held (or no such view: the DELETE below says so), with the catalog lock
      END IF;
      RAISE EXCEPTION USING ERRCODE = 'MMV01';
    EXCEPTION WHEN SQLSTATE 'MMV01' THEN
      NULL;
    END;
  END LOOP;
  PERFORM micromegas._mm_lock_catalog();
  DELETE FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = target;
  IF FOUND THEN
    -- What the DELETE trigger retired (sql/partitions.sql): "count bytes".
    retired := pg_catalog.string_to_array(micromegas._mm_take_report('retired'), ' ');
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
COMMENT ON FUNCTION micromegas._mm_drop(text,boolean) IS
  'Drops a definition by name (the two mm_drop_view forms call it), reporting the retired partitions';
CREATE OR REPLACE FUNCTION micromegas._mm_definitions_retire_dropped() RETURNS trigger
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
CREATE OR REPLACE FUNCTION micromegas._mm_definitions_refresh_on_create() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r record;
BEGIN
  IF NEW.load_status <> 'ok'
     OR micromegas._mm_write_kind(TG_OP, NEW.view_set_name) NOT IN ('create', 'replace') THEN
    RETURN NULL;
  END IF;
  SELECT * INTO r FROM micromegas._mm_request_job('refresh', NEW.view_set_name, NULL, NULL, '{}');
  PERFORM micromegas._mm_report('created_job', r.job_id::text);
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_definitions_refresh_on_create() IS
  'Trigger: queues a refresh of everything for a definition created or replaced with with_no_data = false';
-- The author-check levels are ranked by their order in the library.
CREATE FUNCTION micromegas."_mm_author_check_levels"() RETURNS TEXT[] /* Vec < & '_ str > */
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'author_check_levels_wrapper';
COMMENT ON FUNCTION micromegas._mm_author_check_levels() IS
  'The author-check levels, the most lenient first (off, warn, error): a level''s rank is its position';
CREATE OR REPLACE FUNCTION micromegas._mm_author_check_level() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  levels text[] := micromegas._mm_author_check_levels();
  rank integer := pg_catalog.array_position(levels, micromegas._mm_author_checks());
  required integer;
BEGIN
  IF rank < pg_catalog.cardinality(levels) THEN
    SELECT max(pg_catalog.array_position(levels, r.level)) INTO required
      FROM micromegas.author_check_requirements r
     WHERE micromegas._mm_requirement_binds(r.applies_to);
    rank := greatest(rank, required);
  END IF;
  RETURN levels[rank];
END
$$;
COMMENT ON FUNCTION micromegas._mm_author_check_level() IS
  'The author-check level in force for this write: the stricter of micromegas_views.author_checks and every requirement that binds the session';
CREATE OR REPLACE FUNCTION micromegas.mm_require_author_checks(level text, role_name text DEFAULT NULL)
RETURNS TABLE (applies_to text, required_level text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_require_author_checks');
  target text := coalesce(role_name, '*');
  levels text[] := micromegas._mm_author_check_levels();
BEGIN
  IF level IS NULL OR NOT level = ANY (levels) THEN
    RAISE EXCEPTION 'mm_require_author_checks: level must be % or %, not %',
        pg_catalog.array_to_string(levels[1:pg_catalog.cardinality(levels) - 1], ', '),
        levels[pg_catalog.cardinality(levels)], coalesce(quote_literal(level), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF role_name IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles g WHERE g.rolname = role_name) THEN
    RAISE EXCEPTION 'role "%" does not exist', role_name USING ERRCODE = 'undefined_object';
  END IF;
  -- A requirement binds its own members: only someone it does not bind
  -- (or a superuser) may lower or lift it.
  IF pg_catalog.array_position(levels, level)
       < (SELECT pg_catalog.array_position(levels, r.level) FROM micromegas.author_check_requirements r WHERE r.applies_to = target)
     AND micromegas._mm_requirement_binds(target) AND NOT micromegas._mm_caller_is_superuser() THEN
    RAISE EXCEPTION 'mm_require_author_checks: a requirement that binds you cannot be lowered by you'
      USING ERRCODE = 'insufficient_privilege',
            DETAIL = format('The requirement for %s applies to your role.', CASE WHEN target = '*' THEN 'every role' ELSE format('the members of %I', target) END),
            HINT = 'An admin it does not bind, or a superuser, may lower or lift it.';
  END IF;
  IF level = 'off' THEN
    DELETE FROM micromegas.author_check_requirements r WHERE r.applies_to = target;
  ELSE
    INSERT INTO micromegas.author_check_requirements AS r (applies_to, level, set_at, set_by)
    VALUES (target, level, pg_catalog.now(), micromegas._mm_actor())
    ON CONFLICT ON CONSTRAINT author_check_requirements_pkey
      DO UPDATE SET level = EXCLUDED.level, set_at = EXCLUDED.set_at, set_by = EXCLUDED.set_by;
  END IF;
  RETURN QUERY SELECT r.applies_to, r.level FROM micromegas.author_check_requirements r ORDER BY 1;
END
$$;
COMMENT ON FUNCTION micromegas.mm_require_author_checks(text, text) IS
  'Require the author checks at warn or error (off lifts it) for every role of the database or for the members of a role';
SELECT micromegas._mm_apply_privileges();
