-- micromegas_views 0.1.5 -> 0.1.6. What changes:
-- * on a hot standby every writing function refuses with 25006 and one
--   message naming it ("...: the micromegas catalog is read-only on a
--   standby"), before any of its statements runs;
-- * mm_explain_view answers on a standby what the primary answers: there it
--   asks the write path's questions without writing (_mm_dry_run_read_only);
--   the name checks, the broken-dependent error and the incompatible-
--   partition notice are one function each, shared by the write path and
--   the dry run (also used in a read-only transaction on a primary);
-- * a re-check that gives a definition already failed to load its new
--   reason keeps its stored schema (it used to store an empty one, whose
--   move made its dependents refuse the change: a built-in's registration
--   could be refused);
-- * the author checks (core/src/author.rs): a definition's findings are
--   stored in a new column `warnings`, raised as WARNINGs (or refused, by
--   micromegas_views.author_checks = error or mm_require_author_checks),
--   returned by mm_explain_view and list_view_set_definitions;
-- * date_bin(...) is nullable, as DataFusion declares it and micromegas
--   infers it (log_stats' time_bin): every stored definition is validated
--   again, so its stored schema follows (the schema hash leaves nullability
--   out, so no hash changes) and its warnings are filled in;
-- * list_view_set_definitions() and mm_explain_view() return a new column:
--   they are dropped and created again, so a view of yours that selects
--   from them must be dropped before the update (it refuses otherwise);
-- * a claim and a heartbeat send no NOTIFY on micromegas_jobs (a queued,
--   finished or cancel-requested job still does), and a claim sweeps
--   expired leases only when one has expired (#28);
-- * _mm_lock_catalog, _mm_next_version, mm_catalog_version, _mm_actor and
--   _mm_incompatible_count are PL/pgSQL (their plans are kept) (#28);
-- * while the extension's own script runs, and all the way down a lenient
--   re-check (a built-in's registration), a definition whose schema moved
--   re-checks its dependents leniently: one that no longer validates is
--   marked failed instead of failing the definition it reads
--   (_mm_intent_held('lenient')); a re-check that runs out of a resource
--   fails the change instead of marking the dependent, and is not bound by
--   the session's validation_timeout.

CREATE FUNCTION micromegas."_mm_check_definition_with"(
	"view_set_name" TEXT, /* String */
	"extract_query" TEXT, /* String */
	"count_src_query" TEXT, /* String */
	"merge_partitions_query" TEXT, /* String */
	"update_group" INT, /* i32 */
	"view_options" jsonb, /* Option < JsonB > */
	"names" TEXT[], /* Vec < String > */
	"schemas" TEXT[], /* Vec < String > */
	"groups" INT[], /* Vec < i32 > */
	"errors" TEXT[] /* Vec < Option < String > > */
) RETURNS TEXT /* String */
STABLE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'check_definition_with_wrapper';

-- The prepared row carries the findings.
DROP FUNCTION micromegas._mm_prepare_definition(text, text, text, text, text, integer, jsonb, boolean);
CREATE FUNCTION micromegas."_mm_prepare_definition"(
	"view_set_name" TEXT, /* Option < String > */
	"definition_sql" TEXT, /* Option < String > */
	"extract_query" TEXT, /* Option < String > */
	"count_src_query" TEXT, /* Option < String > */
	"merge_partitions_query" TEXT, /* Option < String > */
	"update_group" INT, /* Option < i32 > */
	"view_options" jsonb, /* Option < JsonB > */
	"keep_failed" bool /* bool */
) RETURNS TABLE (
	"view_set_name" TEXT,  /* String */
	"or_replace" bool,  /* bool */
	"definition_sql" TEXT,  /* String */
	"extract_query" TEXT,  /* String */
	"count_src_query" TEXT,  /* String */
	"merge_partitions_query" TEXT,  /* String */
	"update_group" INT,  /* i32 */
	"view_options" jsonb,  /* JsonB */
	"schema_ipc" TEXT,  /* String */
	"schema_json" jsonb,  /* JsonB */
	"schema_hash" bytea,  /* Vec < u8 > */
	"reads" TEXT[],  /* Vec < String > */
	"load_error" TEXT,  /* Option < String > */
	"warnings" jsonb  /* JsonB */
)
VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'prepare_definition_wrapper';

CREATE FUNCTION micromegas."_mm_author_checks"() RETURNS TEXT /* & '_ str */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'author_checks_wrapper';

ALTER TABLE micromegas.lakehouse_view_set_definitions ADD COLUMN warnings jsonb NOT NULL DEFAULT '[]';
CREATE TABLE micromegas.author_check_requirements (
  applies_to text PRIMARY KEY,
  level text NOT NULL CHECK (level IN ('warn', 'error')),
  set_at timestamptz NOT NULL,
  set_by text NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('micromegas.author_check_requirements', '');

CREATE FUNCTION micromegas._mm_requirement_binds(applies_to text) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  -- Granted memberships only: a superuser is not a member of every role.
  SELECT $1 = '*' OR EXISTS (
    WITH RECURSIVE member_of(roleid) AS (
      SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname IN (session_user, micromegas._mm_caller())
      UNION
      SELECT a.roleid FROM pg_catalog.pg_auth_members a JOIN member_of m ON a.member = m.roleid)
    SELECT 1 FROM member_of m JOIN pg_catalog.pg_roles g ON g.oid = m.roleid WHERE g.rolname = $1)
$$;

CREATE FUNCTION micromegas._mm_author_check_level() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rank integer := CASE micromegas._mm_author_checks() WHEN 'error' THEN 2 WHEN 'warn' THEN 1 ELSE 0 END;
  required integer;
BEGIN
  IF rank < 2 THEN
    SELECT max(CASE r.level WHEN 'error' THEN 2 ELSE 1 END) INTO required
      FROM micromegas.author_check_requirements r
     WHERE micromegas._mm_requirement_binds(r.applies_to);
    rank := greatest(rank, coalesce(required, 0));
  END IF;
  RETURN CASE rank WHEN 2 THEN 'error' WHEN 1 THEN 'warn' ELSE 'off' END;
END
$$;

CREATE FUNCTION micromegas._mm_report_author_findings(name text, findings jsonb) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  level text := micromegas._mm_author_check_level();
  f jsonb;
BEGIN
  IF level = 'off' OR pg_catalog.jsonb_array_length(findings) = 0 THEN
    RETURN;
  END IF;
  FOR f IN SELECT * FROM pg_catalog.jsonb_array_elements(findings) LOOP
    IF level = 'error' THEN
      RAISE EXCEPTION 'materialized view "%": %', name, f->>'message'
        USING ERRCODE = '42' || substr(f->>'sqlstate', 3),
              DETAIL = format('Author check %s; the level in force is error (micromegas_views.author_checks, or a requirement in micromegas.author_check_requirements).', f->>'check'),
              HINT = f->>'hint';
    END IF;
    RAISE WARNING 'materialized view "%": %', name, f->>'message'
      USING ERRCODE = f->>'sqlstate', DETAIL = format('Author check %s.', f->>'check'), HINT = f->>'hint';
  END LOOP;
END
$$;

CREATE FUNCTION micromegas.mm_require_author_checks(level text, role_name text DEFAULT NULL)
RETURNS TABLE (applies_to text, required_level text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_require_author_checks');
  target text := coalesce(role_name, '*');
BEGIN
  IF level IS NULL OR level NOT IN ('off', 'warn', 'error') THEN
    RAISE EXCEPTION 'mm_require_author_checks: level must be off, warn or error, not %', coalesce(quote_literal(level), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF role_name IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles g WHERE g.rolname = role_name) THEN
    RAISE EXCEPTION 'role "%" does not exist', role_name USING ERRCODE = 'undefined_object';
  END IF;
  -- A requirement binds its own members: only someone it does not bind
  -- (or a superuser) may lower or lift it.
  IF (CASE level WHEN 'error' THEN 2 WHEN 'warn' THEN 1 ELSE 0 END)
       < (SELECT CASE r.level WHEN 'error' THEN 2 ELSE 1 END FROM micromegas.author_check_requirements r WHERE r.applies_to = target)
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
COMMENT ON TABLE micromegas.author_check_requirements IS
  'Author-check levels an admin required (applies_to: * for every role, or a role whose members it binds)';

DROP FUNCTION micromegas.list_view_set_definitions();
CREATE FUNCTION micromegas.list_view_set_definitions()
RETURNS TABLE (view_set_name text, definition_sql text, update_group integer,
               updated_at timestamptz, updated_by text, load_status text, load_error text, warnings jsonb)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT d.view_set_name, d.definition_sql, d.update_group, d.updated_at, d.updated_by,
         d.load_status, d.load_error, d.warnings
    FROM micromegas.lakehouse_view_set_definitions d
   ORDER BY d.view_set_name
$$;
COMMENT ON FUNCTION micromegas.list_view_set_definitions() IS
  'Every stored definition, including those that failed to load';

CREATE FUNCTION micromegas."_mm_intent_held"(
	"kind" TEXT /* & str */
) RETURNS bool /* bool */
STRICT VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'intent_held_wrapper';

CREATE FUNCTION micromegas._mm_require_writable(operation text) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF pg_catalog.pg_is_in_recovery() THEN
    RAISE EXCEPTION '%: the micromegas catalog is read-only on a standby', operation
      USING ERRCODE = 'read_only_sql_transaction',
            DETAIL = 'This server is a hot standby (in recovery): definitions, partitions, jobs, deny rules and grants change only on the primary.',
            HINT = 'Run it on the primary; every reader function works here.';
  END IF;
  RETURN true;
END
$$;
COMMENT ON FUNCTION micromegas._mm_require_writable(text) IS
  'Refuses a write on a hot standby (25006, naming the operation); every writing function calls it first';

CREATE FUNCTION micromegas._mm_raise_broken_dependent(source text, dependent text, problem text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION 'cannot change materialized view "%" because materialized view "%" depends on it', source, dependent
    USING ERRCODE = 'dependent_objects_still_exist',
          DETAIL = format('materialized view "%s" would no longer be valid: %s', dependent, problem),
          HINT = format('Keep what "%s" reads unchanged, or replace or drop it first.', dependent);
END
$$;

CREATE FUNCTION micromegas._mm_name_taken(name text, or_replace boolean, creating boolean) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = name) THEN
    RAISE EXCEPTION 'view set "%" already exists as a built-in view set', name
      USING ERRCODE = 'duplicate_object',
            DETAIL = 'Built-in view sets (registered by the services) and materialized views share one namespace.',
            HINT = 'Choose another name for the materialized view.';
  END IF;
  IF creating AND EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = name) THEN
    IF NOT or_replace THEN
      RAISE EXCEPTION 'materialized view "%" already exists', name
        USING ERRCODE = 'duplicate_object',
              HINT = 'Use CREATE OR REPLACE MATERIALIZED VIEW to replace it.';
    END IF;
    RETURN true;
  END IF;
  RETURN false;
END
$$;

CREATE OR REPLACE FUNCTION micromegas._mm_recheck_dependents(source text, strict boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dep micromegas.lakehouse_view_set_definitions;
  checked_schema text;
  problem text;
  state text;
BEGIN
  -- A lenient re-check stays lenient all the way down: the rewrite of a
  -- dependent whose schema moved re-checks that one's dependents in turn
  -- (_mm_definitions_after_update), and those must be marked, not refused.
  IF NOT strict THEN
    PERFORM micromegas._mm_intent_begin('lenient', NULL);
  END IF;
  -- Every write below is the extension's own re-check (src/pg/trust.rs).
  PERFORM micromegas._mm_intent_begin('recheck', NULL);
  FOR dep IN SELECT * FROM micromegas.lakehouse_view_set_definitions d
              WHERE d.reads @> ARRAY[source] ORDER BY d.update_group, d.view_set_name LOOP
    BEGIN
      SELECT p.schema_ipc INTO checked_schema
        FROM micromegas._mm_prepare_definition(dep.view_set_name, NULL, dep.extract_query, dep.count_src_query,
               dep.merge_partitions_query, dep.update_group, dep.view_options, false) p;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT, state = RETURNED_SQLSTATE;
      -- Running out of a resource (memory, disk, stack: a very deep chain
      -- of views; time: a validation past a minute) says nothing about the
      -- dependent: the change fails with that error and nothing is marked.
      -- Class 53, and class 54 except this extension's own limits on what a
      -- definition may be (nesting, plan nodes, size: always in English,
      -- whereas Postgres' own messages follow lc_messages). A cancel or
      -- statement_timeout is never caught here; the session's validation
      -- time limit does not apply to a re-check (src/pg/settings.rs).
      IF left(state, 2) = '53'
         OR (left(state, 2) = '54' AND problem NOT LIKE '% is nested too deeply%'
             AND problem NOT LIKE '% is nested more than % levels deep%'
             AND problem NOT LIKE '% plans to more than % plan nodes%'
             AND problem NOT LIKE '% is too long: %') THEN
        RAISE;
      END IF;
      IF strict THEN
        PERFORM micromegas._mm_raise_broken_dependent(source, dep.view_set_name, problem);
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
      -- A full rewrite stores the new schema, clears a failed mark (it
      -- says 'ok': a 'failed' from a re-check is a mark, below),
      -- notifies, and re-checks its own dependents.
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = d.definition_sql, load_status = 'ok'
       WHERE d.view_set_name = dep.view_set_name;
    END IF;
  END LOOP;
  PERFORM micromegas._mm_intent_end('recheck');
  IF NOT strict THEN
    PERFORM micromegas._mm_intent_end('lenient');
  END IF;
END
$$;

CREATE OR REPLACE FUNCTION micromegas._mm_definitions_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF OLD.load_status = 'failed' AND NEW.load_status = 'ok' THEN
    -- Re-validated after a failure: what reads it may load again.
    PERFORM micromegas._mm_recheck_dependents(NEW.view_set_name, false);
  ELSIF NEW.schema_ipc IS DISTINCT FROM OLD.schema_ipc OR NEW.update_group IS DISTINCT FROM OLD.update_group THEN
    PERFORM micromegas._mm_recheck_dependents(NEW.view_set_name,
      NOT (micromegas._mm_installing() OR micromegas._mm_intent_held('lenient')));
  END IF;
  RETURN NULL;
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
    -- mm_create_view reports the replace (a skipped INSERT returns no row).
    PERFORM pg_catalog.set_config('micromegas_views.replaced', p.view_set_name, true);
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

CREATE OR REPLACE FUNCTION micromegas._mm_definitions_report_incompatible() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM micromegas._mm_report_incompatible(NEW.view_set_name, NEW.schema_hash);
  RETURN NULL;
END
$$;

CREATE FUNCTION micromegas._mm_explain_view(statement text, read_only boolean)
RETURNS TABLE (view_set_name text, would_be text, schema text, schema_hash bytea, reads text[],
               dependents text[], materialization_position bigint, problems text[], warnings jsonb)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  target text;
  outcome text;
  row_schema text;
  row_hash bytea;
  row_reads text[];
  row_dependents text[];
  row_position bigint;
  row_warnings jsonb;
  dry record;
  problem text;
  problem_detail text;
  problem_state text;
BEGIN
  BEGIN
    IF read_only THEN
      SELECT * INTO STRICT dry FROM micromegas._mm_dry_run_read_only(statement);
      target := dry.view_set_name;
      outcome := dry.outcome;
      row_schema := micromegas._mm_format_schema(dry.schema_ipc);
      row_hash := dry.schema_hash;
      row_reads := dry.reads;
      row_warnings := dry.warnings;
      -- The order after the write: the view's new group among the others.
      SELECT count(*) + 1 INTO row_position
        FROM micromegas.mm_materialization_order() o
       WHERE o.view_set_name <> target AND (o.update_group, o.view_set_name) < (dry.update_group, target);
    ELSE
      SELECT c.view_set_name, c.status INTO target, outcome FROM micromegas.mm_create_view(statement) c;
      SELECT micromegas._mm_format_schema(d.schema_ipc), d.schema_hash, d.reads, d.warnings
        INTO row_schema, row_hash, row_reads, row_warnings
        FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = target;
      SELECT o.position INTO row_position FROM micromegas.mm_materialization_order() o WHERE o.view_set_name = target;
    END IF;
    RAISE EXCEPTION 'dry run' USING ERRCODE = 'MMDRY';
  EXCEPTION
    WHEN SQLSTATE 'MMDRY' THEN
      NULL;
    WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT, problem_detail = PG_EXCEPTION_DETAIL,
                              problem_state = RETURNED_SQLSTATE;
      BEGIN
        SELECT t.view_set_name INTO target FROM micromegas._mm_statement_target(statement) t;
      EXCEPTION WHEN OTHERS THEN
        target := NULL;
      END;
      outcome := 'refused';
      row_schema := NULL; row_hash := NULL; row_reads := NULL; row_position := NULL; row_warnings := NULL;
      problem := problem_state || ': ' || problem || coalesce(nullif(E'\n' || problem_detail, E'\n'), '');
  END;
  SELECT array_agg(d.view_set_name ORDER BY d.view_set_name) INTO row_dependents
    FROM micromegas.lakehouse_view_set_definitions d
   WHERE d.reads @> ARRAY[target] AND d.view_set_name <> target;
  RETURN QUERY SELECT target, outcome, row_schema, row_hash, row_reads, coalesce(row_dependents, '{}'),
                      row_position, CASE WHEN problem IS NULL THEN '{}'::text[] ELSE ARRAY[problem] END,
                      row_warnings;
END
$$;

CREATE FUNCTION micromegas._mm_dry_run_read_only(statement text,
  OUT view_set_name text, OUT outcome text, OUT schema_ipc text, OUT schema_hash bytea, OUT reads text[],
  OUT update_group integer, OUT warnings jsonb)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  p record;
  old micromegas.lakehouse_view_set_definitions;
  w record;
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
    -- _mm_definitions_after_update: a failed view that validates again
    -- re-checks its dependents leniently, a moved schema or group strictly.
    IF old.load_status = 'failed' OR old.schema_ipc IS DISTINCT FROM p.schema_ipc
       OR old.update_group IS DISTINCT FROM p.update_group THEN
      SELECT * INTO w FROM micromegas._mm_recheck_read_only(p.view_set_name, old.load_status <> 'failed',
        ARRAY[p.view_set_name], ARRAY[p.schema_ipc], ARRAY[p.update_group], ARRAY[NULL::text]);
    END IF;
    IF old.schema_hash IS DISTINCT FROM p.schema_hash THEN
      PERFORM micromegas._mm_report_incompatible(p.view_set_name, p.schema_hash);
    END IF;
  ELSE
    PERFORM micromegas._mm_report_incompatible(p.view_set_name, p.schema_hash);
  END IF;
END
$$;

CREATE FUNCTION micromegas._mm_dry_write(name text, schema_ipc text, update_group integer, load_error text,
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

CREATE FUNCTION micromegas._mm_recheck_read_only(source text, strict boolean,
  INOUT names text[], INOUT schemas text[], INOUT groups integer[], INOUT errors text[])
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dep record;
  down record;
  checked text;
  problem text;
  now_ok boolean;
  w record;
BEGIN
  -- The write path's loop reads the dependents once, as they are when it
  -- starts.
  FOR dep IN SELECT d.view_set_name, d.extract_query, d.count_src_query, d.merge_partitions_query,
                    d.update_group, d.view_options,
                    coalesce(schemas[pg_catalog.array_position(names, d.view_set_name)], d.schema_ipc) AS schema_ipc,
                    CASE WHEN pg_catalog.array_position(names, d.view_set_name) IS NULL THEN d.load_status = 'ok'
                         ELSE errors[pg_catalog.array_position(names, d.view_set_name)] IS NULL END AS was_ok
               FROM micromegas.lakehouse_view_set_definitions d
              WHERE d.reads @> ARRAY[source] ORDER BY d.update_group, d.view_set_name LOOP
    BEGIN
      checked := micromegas._mm_check_definition_with(dep.view_set_name, dep.extract_query, dep.count_src_query,
                   dep.merge_partitions_query, dep.update_group, dep.view_options, names, schemas, groups, errors);
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
      IF strict THEN
        PERFORM micromegas._mm_raise_broken_dependent(source, dep.view_set_name, problem);
      END IF;
      SELECT * INTO w FROM micromegas._mm_dry_write(dep.view_set_name, dep.schema_ipc, dep.update_group,
        format('no longer valid after "%s" changed: %s', source, problem), names, schemas, groups, errors);
      names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
      FOR down IN WITH RECURSIVE downstream(name) AS (
                    SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x WHERE x.reads @> ARRAY[dep.view_set_name]
                    UNION
                    SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x, downstream s WHERE x.reads @> ARRAY[s.name])
                  SELECT x.view_set_name,
                         coalesce(schemas[pg_catalog.array_position(names, x.view_set_name)], x.schema_ipc) AS schema_ipc,
                         x.update_group
                    FROM micromegas.lakehouse_view_set_definitions x
                   WHERE x.view_set_name IN (SELECT s.name FROM downstream s)
                     AND CASE WHEN pg_catalog.array_position(names, x.view_set_name) IS NULL THEN x.load_status <> 'failed'
                              ELSE errors[pg_catalog.array_position(names, x.view_set_name)] IS NULL END
                   ORDER BY x.view_set_name LOOP
        SELECT * INTO w FROM micromegas._mm_dry_write(down.view_set_name, down.schema_ipc, down.update_group,
          format('reads a view set that failed to load (after "%s" changed)', source), names, schemas, groups, errors);
        names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
      END LOOP;
      CONTINUE;
    END;
    IF checked IS DISTINCT FROM dep.schema_ipc OR NOT dep.was_ok THEN
      -- Rewritten: loads, with the schema just computed. Its own after-update
      -- step looks at the row as it is now (this dry run may have marked it).
      now_ok := CASE WHEN pg_catalog.array_position(names, dep.view_set_name) IS NULL THEN dep.was_ok
                     ELSE errors[pg_catalog.array_position(names, dep.view_set_name)] IS NULL END;
      SELECT * INTO w FROM micromegas._mm_dry_write(dep.view_set_name, checked, dep.update_group, NULL,
        names, schemas, groups, errors);
      names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
      IF NOT now_ok OR checked IS DISTINCT FROM dep.schema_ipc THEN
        SELECT * INTO w FROM micromegas._mm_recheck_read_only(dep.view_set_name, now_ok, names, schemas, groups, errors);
        names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
      END IF;
      IF checked IS DISTINCT FROM dep.schema_ipc THEN
        PERFORM micromegas._mm_report_incompatible(dep.view_set_name,
                  (SELECT f.schema_hash FROM micromegas._mm_schema_forms(checked) f));
      END IF;
    END IF;
  END LOOP;
END
$$;

DROP FUNCTION micromegas.mm_explain_view(text);
CREATE FUNCTION micromegas.mm_explain_view(statement text)
RETURNS TABLE (view_set_name text, would_be text, schema text, schema_hash bytea, reads text[],
               dependents text[], materialization_position bigint, problems text[], warnings jsonb)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM micromegas._mm_explain_view(statement,
    pg_catalog.pg_is_in_recovery() OR pg_catalog.current_setting('transaction_read_only')::boolean)
$$;

COMMENT ON FUNCTION micromegas.mm_explain_view(text) IS
  'Dry run of mm_create_view: every check, nothing written; on a hot standby the same answer, asked without writing';
COMMENT ON FUNCTION micromegas._mm_explain_view(text, boolean) IS
  'mm_explain_view, by a rolled-back write or (read_only) by _mm_dry_run_read_only';
COMMENT ON FUNCTION micromegas._mm_dry_run_read_only(text) IS
  'What mm_create_view(statement) would store, or the error it would raise, without writing';
COMMENT ON FUNCTION micromegas._mm_recheck_read_only(text, boolean, text[], text[], integer[], text[]) IS
  'The re-check of the dependents of source (strict or lenient), without writing, over the rows a dry run has written';
COMMENT ON FUNCTION micromegas._mm_dry_write(text, text, integer, text, text[], text[], integer[], text[]) IS
  'One row written by a read-only dry run, kept in its arrays';

-- Every writing function, now calling _mm_require_writable first.
-- The small helpers on the write path in PL/pgSQL (plans kept), not SQL.
CREATE OR REPLACE FUNCTION micromegas._mm_lock_catalog() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v bigint;
BEGIN
  SELECT s.version INTO v FROM micromegas.catalog_state s FOR UPDATE;
  RETURN v;
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_next_version() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v bigint;
BEGIN
  UPDATE micromegas.catalog_state SET version = version + 1 RETURNING version INTO v;
  RETURN v;
END
$$;
CREATE OR REPLACE FUNCTION micromegas.mm_catalog_version() RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (SELECT s.version FROM micromegas.catalog_state s);
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_actor() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN coalesce(nullif(current_setting('micromegas_views.actor', true), ''), session_user::text);
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_incompatible_count(name text) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (SELECT count(*) FROM micromegas.lakehouse_partitions p
            JOIN micromegas.view_set_schema_hashes v ON v.view_set_name = p.view_set_name
           WHERE p.view_set_name = $1 AND v.view_set_name = $1 AND p.file_schema_hash <> v.schema_hash);
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_create_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint, incompatible_partitions bigint, job_id uuid)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_create_view');
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

CREATE OR REPLACE FUNCTION micromegas.mm_drop_view(name micromegas.view_set_name, if_exists boolean DEFAULT false)
RETURNS TABLE (view_set_name text, status text, version bigint, partitions_retired bigint, bytes_queued bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_drop_view');
BEGIN
  PERFORM micromegas._mm_check_name(name::text, 'reference');
  RETURN QUERY SELECT * FROM micromegas._mm_drop(name::text, if_exists);
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_drop_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint, partitions_retired bigint, bytes_queued bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_drop_view');
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

CREATE OR REPLACE FUNCTION micromegas.mm_restore_view(name text, version bigint)
RETURNS SETOF micromegas.view_change
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_restore_view');
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

CREATE OR REPLACE FUNCTION micromegas.mm_prune_view_history(older_than interval)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_prune_view_history');
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
  -- The schema's forms (it reads JSON or IPC given as schema_ipc), the name
  -- rules and the shared namespace are the table trigger's.
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

CREATE OR REPLACE FUNCTION micromegas.retire_partitions(
  view_set_name text, view_instance_id text, begin_time timestamptz, end_time timestamptz)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('retire_partitions');
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

CREATE OR REPLACE FUNCTION micromegas.retire_partition_by_metadata(
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

CREATE OR REPLACE FUNCTION micromegas.retire_partition_by_file(file_path text)
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

CREATE OR REPLACE FUNCTION micromegas.retire_incompatible_partitions(view_set_name text DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION micromegas.mm_expired_files(max_files integer DEFAULT 1000)
RETURNS TABLE (file_path text, file_size bigint, expiration timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_expired_files');
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

CREATE OR REPLACE FUNCTION micromegas.mm_refresh_view(
  name text, begin_time timestamptz DEFAULT NULL, end_time timestamptz DEFAULT NULL, params jsonb DEFAULT '{}')
RETURNS uuid
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT micromegas._mm_require_writable('mm_refresh_view');
  SELECT r.job_id FROM micromegas._mm_request_job('refresh', $1, $2, $3, $4) r
$$;

CREATE OR REPLACE FUNCTION micromegas.regenerate_partitions(
  view_set_name text, begin_time timestamptz, end_time timestamptz, partition_delta_seconds integer)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('regenerate_partitions');
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

CREATE OR REPLACE FUNCTION micromegas.mm_cancel_job(job_id uuid) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_cancel_job');
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

CREATE OR REPLACE FUNCTION micromegas.mm_claim_job(worker text, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT micromegas._mm_require_writable('mm_claim_job');
  SELECT * FROM micromegas.mm_claim_jobs($1, 1, $2)
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_claim_jobs(worker text, max_jobs integer DEFAULT 1, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_claim_jobs');
  now_ts timestamptz := clock_timestamp();
BEGIN
  IF coalesce(btrim(worker), '') = '' THEN
    RAISE EXCEPTION 'mm_claim_jobs: a worker name is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_jobs IS NULL OR max_jobs < 1 OR max_jobs > 1000 THEN
    RAISE EXCEPTION 'mm_claim_jobs: max_jobs must be between 1 and 1000, not %', coalesce(max_jobs::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF EXISTS (SELECT 1 FROM micromegas.jobs x WHERE x.state = 'running' AND x.lease_expires_at < now_ts) THEN
    PERFORM micromegas._mm_expire_leases();
  END IF;
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

-- A claim and a heartbeat no longer notify (a WHEN clause keeps the
-- trigger function from being called at all).
DROP TRIGGER jobs_notify ON micromegas.jobs;
CREATE OR REPLACE FUNCTION micromegas._mm_jobs_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_notify('micromegas_jobs', json_build_object(
    'job_id', NEW.job_id, 'kind', NEW.kind, 'view_set_name', NEW.view_set_name, 'state', NEW.state,
    'cancel_requested', NEW.cancel_requested)::text);
  RETURN NULL;
END
$$;
CREATE TRIGGER jobs_notify
  AFTER INSERT ON micromegas.jobs
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_jobs_notify();
CREATE TRIGGER jobs_notify_change
  AFTER UPDATE ON micromegas.jobs
  FOR EACH ROW
  WHEN ((NEW.state IS DISTINCT FROM OLD.state AND NEW.state <> 'running')
        OR (NEW.cancel_requested AND NOT OLD.cancel_requested))
  EXECUTE FUNCTION micromegas._mm_jobs_notify();

CREATE OR REPLACE FUNCTION micromegas.mm_heartbeat_job(job_id uuid, lease_token uuid) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_heartbeat_job');
  j micromegas.jobs := micromegas._mm_held_job($1, $2);
BEGIN
  UPDATE micromegas.jobs x
     SET lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds())
   WHERE x.job_id = $1;
  RETURN CASE WHEN j.cancel_requested THEN 'cancel_requested' ELSE 'running' END;
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_finish_job(
  job_id uuid, lease_token uuid, ok boolean, phase text DEFAULT NULL, message text DEFAULT NULL,
  retryable boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_finish_job');
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

CREATE OR REPLACE FUNCTION micromegas.mm_record_query_denial_hits(rule_ids uuid[], at timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_record_query_denial_hits');
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

CREATE OR REPLACE FUNCTION micromegas.deny_queries(match_expr text, reason text)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('deny_queries');
  id uuid;
BEGIN
  INSERT INTO micromegas.query_deny_list AS q (match_expr, reason)
  VALUES (match_expr, reason) RETURNING q.rule_id INTO id;
  RETURN QUERY SELECT clock_timestamp(), id::text;
END
$$;

CREATE OR REPLACE FUNCTION micromegas.remove_query_denial(rule_id text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('remove_query_denial');
  id uuid;
BEGIN
  BEGIN
    id := rule_id::uuid;
  EXCEPTION WHEN invalid_text_representation THEN
    RETURN format('ERROR: ''%s'' is not a valid rule id', rule_id);
  END;
  DELETE FROM micromegas.query_deny_list q WHERE q.rule_id = id;
  IF FOUND THEN
    RETURN format('SUCCESS: removed rule %s', id);
  END IF;
  RETURN format('ERROR: no such rule: %s', id);
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_grant_audience(audience text, axis text, selector text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_grant_audience');
  problem text := micromegas._mm_audience_problem(audience, axis, selector);
BEGIN
  -- The trigger applies the same rule, but a value longer than its column
  -- fails the cast to varchar before any trigger runs: checked here first,
  -- so the caller gets the rule's message.
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION '%', problem USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO micromegas.audience_grants AS g (audience, axis, selector)
  VALUES (audience, axis, selector)
  ON CONFLICT ON CONSTRAINT audience_grants_pkey DO NOTHING;
  RETURN CASE WHEN FOUND THEN 'granted' ELSE 'already_granted' END;
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_revoke_audience(audience text, axis text, selector text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_revoke_audience');
  problem text := micromegas._mm_audience_problem(audience, axis, selector);
BEGIN
  -- No row may be written, so no trigger may check: an invalid triple is
  -- an error here, not a quiet not_found.
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION '%', problem USING ERRCODE = 'invalid_parameter_value';
  END IF;
  DELETE FROM micromegas.audience_grants g
   WHERE g.audience = audience AND g.axis = axis AND g.selector = selector;
  RETURN CASE WHEN FOUND THEN 'revoked' ELSE 'not_found' END;
END
$$;

-- Every object of the extension carries a COMMENT (\df+, \d+, \dT+).
-- What \df+, \d+ and \dT+ show for every other object of the extension
-- (regress 25_comments fails on an object without one; docs/sql-reference.md
-- is generated from them by scripts/sql_reference.sh).
COMMENT ON FUNCTION micromegas._mm_actor() IS
  'The actor of a write: micromegas_views.actor when a service passes its user''s name, else session_user';
COMMENT ON FUNCTION micromegas._mm_apply_privileges() IS
  'Revokes every privilege on the schema''s objects and grants again what mm_privilege_matrix() declares; refuses an object the matrix does not name';
COMMENT ON FUNCTION micromegas._mm_apply_removed() IS
  'Trigger: applies removed_shipped_rows on restore (a shipped row the dump says was removed is deleted again)';
COMMENT ON FUNCTION micromegas._mm_audience_grants_before_write() IS
  'Trigger: checks an audience grant (_mm_audience_problem) and fills its creation columns';
COMMENT ON FUNCTION micromegas._mm_audience_grants_notify() IS
  'Trigger: bumps access_state.audience_grants_version and notifies micromegas_audience_grants';
COMMENT ON FUNCTION micromegas._mm_audience_problem(text,text,text) IS
  'Why an audience grant (audience, axis, selector) is invalid, or NULL; the table''s CHECK and mm_grant_audience use it';
COMMENT ON FUNCTION micromegas._mm_author_check_level() IS
  'The author-check level in force for this write: the stricter of micromegas_views.author_checks and every requirement that binds the session';
COMMENT ON FUNCTION micromegas._mm_author_checks() IS
  'The session''s micromegas_views.author_checks (off, warn or error)';
COMMENT ON FUNCTION micromegas._mm_builtins_after_write() IS
  'Trigger: re-checks the dependents of a built-in view set whose schema or group changed (marking those that no longer validate)';
COMMENT ON FUNCTION micromegas._mm_builtins_before_delete() IS
  'Trigger: refuses to delete a built-in view set a definition reads';
COMMENT ON FUNCTION micromegas._mm_builtins_before_write() IS
  'Trigger: validates a built-in view set''s schema and fills its stored forms and audit columns';
COMMENT ON FUNCTION micromegas._mm_caller() IS
  'The role running the statement outside any SECURITY DEFINER function (GetOuterUserId)';
COMMENT ON FUNCTION micromegas._mm_caller_claims() IS
  'The caller_email, caller_groups and caller_is_admin claims a service or admin role passes for its end user';
COMMENT ON FUNCTION micromegas._mm_caller_is_superuser() IS
  'Whether the role running the statement (outside SECURITY DEFINER functions) is a superuser';
COMMENT ON FUNCTION micromegas._mm_catalog_state_restore() IS
  'Trigger: on restore, continues the catalog version above the dumped one';
COMMENT ON FUNCTION micromegas._mm_check_definition_with(text,text,text,text,integer,jsonb,text[],text[],integer[],text[]) IS
  'The schema a stored definition would have if the given DDL views had the given schemas, groups and load errors, or its validation error (the read-only dry run)';
COMMENT ON FUNCTION micromegas._mm_check_deny_rule(text) IS
  'Checks a deny rule''s expression (columns, operators, size) and raises its problem';
COMMENT ON FUNCTION micromegas._mm_check_name(text,text) IS
  'Applies the name rule of a use (create, reference or builtin), raising its error';
COMMENT ON FUNCTION micromegas._mm_check_range(text,timestamp with time zone,timestamp with time zone) IS
  'Refuses a time range whose begin is not before its end, naming what it ranges';
COMMENT ON FUNCTION micromegas._mm_creating_extension() IS
  'True only while this extension''s own CREATE or ALTER EXTENSION script runs';
COMMENT ON FUNCTION micromegas._mm_definitions_after_update() IS
  'Trigger: re-checks the dependents of a definition whose schema or group moved (strictly), or that loads again (leniently)';
COMMENT ON FUNCTION micromegas._mm_definitions_before_delete() IS
  'Trigger: takes the catalog lock and refuses to drop a definition another one reads';
COMMENT ON FUNCTION micromegas._mm_definitions_before_write() IS
  'Trigger: parses, validates and derives every column of a definition row (one call into Rust); turns a CREATE OR REPLACE into an update';
COMMENT ON FUNCTION micromegas._mm_definitions_cancel_jobs() IS
  'Trigger: cancels the queued and running jobs of a dropped view set';
COMMENT ON FUNCTION micromegas._mm_definitions_history() IS
  'Trigger: records every change of a definition in lakehouse_view_set_definition_history';
COMMENT ON FUNCTION micromegas._mm_definitions_refresh_on_create() IS
  'Trigger: queues a refresh of everything for a definition created or replaced with with_no_data = false';
COMMENT ON FUNCTION micromegas._mm_definitions_report_incompatible() IS
  'Trigger: a NOTICE when a definition''s new schema hash makes some of its partitions incompatible';
COMMENT ON FUNCTION micromegas._mm_definitions_retire_dropped() IS
  'Trigger: retires the global partitions of a dropped view set and queues their files';
COMMENT ON FUNCTION micromegas._mm_deny_list_before_write() IS
  'Trigger: checks a deny rule and fills its creation columns';
COMMENT ON FUNCTION micromegas._mm_deny_list_notify() IS
  'Trigger: bumps access_state.deny_list_version and notifies micromegas_query_deny_list';
COMMENT ON FUNCTION micromegas._mm_deny_max_rules() IS
  'micromegas_views.query_deny_max_rules';
COMMENT ON FUNCTION micromegas._mm_drop(text,boolean) IS
  'Drops a definition by name (the two mm_drop_view forms call it), reporting the retired partitions';
COMMENT ON FUNCTION micromegas._mm_expire_leases() IS
  'Requeues (or fails, past job_max_attempts) the running jobs whose lease expired; returns how many';
COMMENT ON FUNCTION micromegas._mm_file_bucket(text) IS
  'The advisory-lock bucket (of 64) a file path belongs to';
COMMENT ON FUNCTION micromegas._mm_file_expiration() IS
  'When a file queued now may be deleted: now plus micromegas_views.file_retention';
COMMENT ON FUNCTION micromegas._mm_file_retention_seconds() IS
  'micromegas_views.file_retention in seconds';
COMMENT ON FUNCTION micromegas._mm_first_denial(text[],text[],text[]) IS
  'The first deny rule (by rule_id) whose expression a query''s attributes satisfy, or NULL';
COMMENT ON FUNCTION micromegas._mm_format_schema(text) IS
  'A stored base64 Arrow IPC schema, one field per line';
COMMENT ON FUNCTION micromegas._mm_held_job(uuid,uuid) IS
  'The running job a lease token holds, locked; 55000 when the lease is lost';
COMMENT ON FUNCTION micromegas._mm_history_version(text,bigint) IS
  'One version of a definition from the history; raises when the view never had it';
COMMENT ON FUNCTION micromegas._mm_incompatible_count(text) IS
  'How many partitions of a view set do not have its current schema hash';
COMMENT ON FUNCTION micromegas._mm_installing() IS
  'True only while this extension''s own script runs (_mm_creating_extension)';
COMMENT ON FUNCTION micromegas._mm_intent(text) IS
  'The extension''s own write in progress for a view set (replace, recheck, restore, load), or NULL';
COMMENT ON FUNCTION micromegas._mm_intent_begin(text,text) IS
  'Marks the extension''s own writes that follow (backend memory, dropped at subtransaction abort and transaction end)';
COMMENT ON FUNCTION micromegas._mm_intent_end(text) IS
  'Ends the innermost intent of this kind';
COMMENT ON FUNCTION micromegas._mm_intent_held(text) IS
  'Whether an intent of this kind is anywhere on the backend''s stack (lenient: broken dependents are marked failed, not refused)';
COMMENT ON FUNCTION micromegas._mm_job_lease_seconds() IS
  'micromegas_views.job_lease in seconds';
COMMENT ON FUNCTION micromegas._mm_job_max_attempts() IS
  'micromegas_views.job_max_attempts';
COMMENT ON FUNCTION micromegas._mm_jobs_notify() IS
  'Trigger: notifies micromegas_jobs of a job queued, finished or asked to stop (one payload per row; never for a claim or a heartbeat)';
COMMENT ON FUNCTION micromegas._mm_keeps_creation(timestamp with time zone,text) IS
  'Whether a write keeps its given creation columns (a superuser loading a dumped row) or they are computed';
COMMENT ON FUNCTION micromegas._mm_lease_hash(uuid) IS
  'The SHA-256 of a lease token: only the hash is stored';
COMMENT ON FUNCTION micromegas._mm_loading(timestamp with time zone) IS
  'Whether an INSERT is a superuser loading a dumped row (pg_restore): it keeps its audit columns';
COMMENT ON FUNCTION micromegas._mm_lock_catalog() IS
  'Takes the catalog lock (the catalog_state row) and returns the catalog version';
COMMENT ON FUNCTION micromegas._mm_lock_file_buckets(integer[]) IS
  'Takes the advisory locks of the file buckets, in one call and one order';
COMMENT ON FUNCTION micromegas._mm_name_taken(text,boolean,boolean) IS
  'Whether a definition replaces a stored one; refuses a built-in''s name and a plain CREATE of an existing view';
COMMENT ON FUNCTION micromegas._mm_next_version() IS
  'Increments the catalog version and returns it';
COMMENT ON FUNCTION micromegas._mm_notify() IS
  'Trigger: notifies micromegas_view_definitions of a change, with the catalog version';
COMMENT ON FUNCTION micromegas._mm_partition_label(text,text,timestamp with time zone,timestamp with time zone,bytea) IS
  'A partition named in messages: view set/instance [begin, end) schema_hash';
COMMENT ON FUNCTION micromegas._mm_partitions_queue_files() IS
  'Trigger: queues the files no partition references any more, and takes a file out of the queue when one does again';
COMMENT ON FUNCTION micromegas._mm_prepare_definition(text,text,text,text,text,integer,jsonb,boolean) IS
  'Derives and validates a definition row (statement text, columns or both): every derived column, the findings, or the error';
COMMENT ON FUNCTION micromegas._mm_raise_broken_dependent(text,text,text) IS
  'Raises 2BP01: a change would break a definition that reads the changed one';
COMMENT ON FUNCTION micromegas._mm_raise_overlap(micromegas.lakehouse_partitions) IS
  'Raises the overlap of a partition with a stored one, naming both';
COMMENT ON FUNCTION micromegas._mm_recheck_dependents(text,boolean) IS
  'Re-checks every definition reading a changed view set: refuses (strict) or marks failed; rewrites those whose schema moved';
COMMENT ON FUNCTION micromegas._mm_refuse_truncate() IS
  'Trigger: refuses TRUNCATE of a catalog table (row triggers would not run)';
COMMENT ON FUNCTION micromegas._mm_remember_removed(text,text) IS
  'Records that a shipped row was removed, so a restore removes it again';
COMMENT ON FUNCTION micromegas._mm_report_author_findings(text,jsonb) IS
  'Raises a definition''s author-check findings at the level in force: WARNINGs (01M0x), an error (42M0x), or nothing';
COMMENT ON FUNCTION micromegas._mm_report_incompatible(text,bytea) IS
  'The NOTICE of a view set''s partitions that another schema hash makes incompatible';
COMMENT ON FUNCTION micromegas._mm_request_job(text,text,timestamp with time zone,timestamp with time zone,jsonb) IS
  'Queues a job, or returns a queued one with equal parameters whose range covers it; under the catalog lock';
COMMENT ON FUNCTION micromegas._mm_requirement_binds(text) IS
  'Whether an author-check requirement binds this session (* or a role its user or current role was granted)';
COMMENT ON FUNCTION micromegas._mm_schema_forms(text) IS
  'A schema given as JSON or base64 Arrow IPC: its IPC, JSON and hash';
COMMENT ON FUNCTION micromegas._mm_shipped_builtins() IS
  'The built-in view sets CREATE EXTENSION seeds (JSON)';
COMMENT ON FUNCTION micromegas._mm_shipped_log_stats() IS
  'The log_stats statement CREATE EXTENSION ships';
COMMENT ON FUNCTION micromegas._mm_statement_target(text) IS
  'What a statement names: create (or replace) or drop, the view name, and IF EXISTS';
COMMENT ON FUNCTION micromegas._mm_time_text(timestamp with time zone) IS
  'A timestamp as messages show it (RFC 3339, UTC)';
COMMENT ON FUNCTION micromegas._mm_track_removed() IS
  'Trigger: remembers a removed shipped row (see _mm_remember_removed)';
COMMENT ON FUNCTION micromegas._mm_write_kind(text,text) IS
  'The history operation of a write (create, replace, recheck, restore, drop) from the trigger and the intent';
COMMENT ON FUNCTION micromegas.deny_queries(text,text) IS
  'Admin: adds a deny rule (a boolean expression over the query''s attributes) with its reason; returns a log of what it did';
COMMENT ON FUNCTION micromegas.list_audience_grants() IS
  'The audience grants the caller may see (a service or admin passes its end user''s claims)';
COMMENT ON FUNCTION micromegas.list_query_denials() IS
  'Admin: every deny rule with its reason, creator and last hit';
COMMENT ON FUNCTION micromegas.mm_access_versions() IS
  'The deny list''s and the audience grants'' versions (services reload when one moves)';
COMMENT ON FUNCTION micromegas.mm_audience_grants_snapshot() IS
  'Service: every audience grant with the grants'' version, in one read';
COMMENT ON FUNCTION micromegas.mm_grant_audience(text,text,text) IS
  'Admin: grants an audience on an axis (read or mint) to a selector (user:, group: or *)';
COMMENT ON FUNCTION micromegas.mm_match_query_denial(text,text,text,text,text,text,text,text,text,text,text,text) IS
  'Service or admin: the first deny rule a query with these attributes matches, if any';
COMMENT ON FUNCTION micromegas.mm_match_query_denial_context(jsonb) IS
  'mm_match_query_denial with the attributes as one JSON object';
COMMENT ON FUNCTION micromegas.mm_query_deny_list_snapshot() IS
  'Service: every deny rule with the deny list''s version, in one read';
COMMENT ON FUNCTION micromegas.mm_record_query_denial_hits(uuid[],timestamp with time zone) IS
  'Service: records when rules last denied a query (in query_deny_hits, never locking a rule)';
COMMENT ON FUNCTION micromegas.mm_revoke_audience(text,text,text) IS
  'Admin: revokes an audience grant';
COMMENT ON FUNCTION micromegas.mm_sql_hash(text) IS
  'The hash of a query text the deny list''s sql_hash attribute compares with';
COMMENT ON FUNCTION micromegas.remove_query_denial(text) IS
  'Admin: removes a deny rule';
COMMENT ON TABLE micromegas.access_state IS
  'The versions of the deny list and of the audience grants (one row); services reload when one moves';
COMMENT ON TABLE micromegas.builtin_view_sets IS
  'The view sets defined in the services'' code, with the schema a service registered: what definitions may read';
COMMENT ON TABLE micromegas.catalog_state IS
  'The catalog version (one row): strictly increases with every committed change to the definitions; its row is the catalog lock';
COMMENT ON TYPE micromegas.claimed_job IS
  'A job as mm_claim_job and mm_claim_jobs return it, with its lease token';
COMMENT ON TYPE micromegas.incompatible_partition IS
  'A partition whose schema hash is not its view set''s current one (list_incompatible_partitions)';
COMMENT ON TYPE micromegas.partition_retirement IS
  'What a retirement did, per view set and instance: partitions retired and failed, bytes queued, messages';
COMMENT ON TABLE micromegas.removed_shipped_rows IS
  'Shipped rows an admin removed, so that a restore (which runs CREATE EXTENSION first) removes them again';
COMMENT ON TYPE micromegas.view_change IS
  'What a definition change returned: the view, its status, the catalog version, incompatible partitions';
COMMENT ON VIEW micromegas.view_set_schema_hashes IS
  'Every view set (built-in and defined) with its current schema hash';
COMMENT ON TYPE micromegas.view_version IS
  'One version of a definition as mm_describe_view returns it';
COMMENT ON COLUMN micromegas.access_state.singleton IS 'Always true: the table has one row';
COMMENT ON COLUMN micromegas.access_state.deny_list_version IS 'Moves with every change to query_deny_list';
COMMENT ON COLUMN micromegas.access_state.audience_grants_version IS 'Moves with every change to audience_grants';
COMMENT ON COLUMN micromegas.audience_grants.audience IS 'The audience granted (the value rows carry in their audience column)';
COMMENT ON COLUMN micromegas.audience_grants.axis IS 'read (see rows of the audience) or mint (write rows into it)';
COMMENT ON COLUMN micromegas.audience_grants.selector IS 'Who: user:<email>, group:<name>, or * for everyone';
COMMENT ON COLUMN micromegas.audience_grants.created_at IS 'When the grant was made';
COMMENT ON COLUMN micromegas.audience_grants.created_by IS 'The actor who made it';
COMMENT ON COLUMN micromegas.author_check_requirements.applies_to IS '* for every role of the database, or a role whose members (and itself) it binds';
COMMENT ON COLUMN micromegas.author_check_requirements.level IS 'The least strict author-check level those sessions may have: warn or error';
COMMENT ON COLUMN micromegas.author_check_requirements.set_at IS 'When it was last set';
COMMENT ON COLUMN micromegas.author_check_requirements.set_by IS 'The actor who set it';
COMMENT ON COLUMN micromegas.builtin_view_sets.view_set_name IS 'The view set''s name (shared with the defined views: one namespace)';
COMMENT ON COLUMN micromegas.builtin_view_sets.update_group IS 'Its place in the materialization order, or NULL when not materialized globally';
COMMENT ON COLUMN micromegas.builtin_view_sets.kind IS 'raw (ingested block metadata), materialized, or instance_only (only through view_instance)';
COMMENT ON COLUMN micromegas.builtin_view_sets.has_view_maker IS 'Whether the service can make per-instance views of it';
COMMENT ON COLUMN micromegas.builtin_view_sets.global_instance_available IS 'Whether a global instance exists (definitions may read it)';
COMMENT ON COLUMN micromegas.builtin_view_sets.schema_ipc IS 'Its Arrow schema, base64 IPC';
COMMENT ON COLUMN micromegas.builtin_view_sets.schema_json IS 'The same schema as JSON';
COMMENT ON COLUMN micromegas.builtin_view_sets.schema_hash IS 'The portable schema hash (8 bytes)';
COMMENT ON COLUMN micromegas.builtin_view_sets.registered_at IS 'When a service last registered it';
COMMENT ON COLUMN micromegas.builtin_view_sets.registered_by IS 'Who registered it';
COMMENT ON COLUMN micromegas.builtin_view_sets.shipped IS 'True while the row is exactly as CREATE EXTENSION shipped it (not dumped)';
COMMENT ON COLUMN micromegas.catalog_state.singleton IS 'Always true: the table has one row';
COMMENT ON COLUMN micromegas.catalog_state.version IS 'The catalog version';
COMMENT ON COLUMN micromegas.claimed_job.job_id IS 'The job';
COMMENT ON COLUMN micromegas.claimed_job.kind IS 'refresh, regenerate or materialize';
COMMENT ON COLUMN micromegas.claimed_job.view_set_name IS 'The view set it works on';
COMMENT ON COLUMN micromegas.claimed_job.begin_time IS 'Start of the range, or NULL for everything';
COMMENT ON COLUMN micromegas.claimed_job.end_time IS 'End of the range, or NULL';
COMMENT ON COLUMN micromegas.claimed_job.params IS 'The request''s parameters (never credentials)';
COMMENT ON COLUMN micromegas.claimed_job.attempts IS 'Claims so far, this one included';
COMMENT ON COLUMN micromegas.claimed_job.worker IS 'The worker that claimed it';
COMMENT ON COLUMN micromegas.claimed_job.lease_expires_at IS 'When the lease lapses without a heartbeat';
COMMENT ON COLUMN micromegas.claimed_job.lease_token IS 'Proves this claim to mm_heartbeat_job and mm_finish_job; only its hash is stored';
COMMENT ON COLUMN micromegas.incompatible_partition.view_set_name IS 'The view set';
COMMENT ON COLUMN micromegas.incompatible_partition.view_instance_id IS 'The instance';
COMMENT ON COLUMN micromegas.incompatible_partition.begin_insert_time IS 'Start of the partition''s insert range';
COMMENT ON COLUMN micromegas.incompatible_partition.end_insert_time IS 'End of it';
COMMENT ON COLUMN micromegas.incompatible_partition.incompatible_schema_hash IS 'The hash the partition was written with';
COMMENT ON COLUMN micromegas.incompatible_partition.current_schema_hash IS 'The view set''s current hash';
COMMENT ON COLUMN micromegas.incompatible_partition.file_path IS 'The partition''s file';
COMMENT ON COLUMN micromegas.incompatible_partition.file_size IS 'Its size in bytes';
COMMENT ON COLUMN micromegas.jobs.job_id IS 'The job';
COMMENT ON COLUMN micromegas.jobs.kind IS 'refresh, regenerate or materialize';
COMMENT ON COLUMN micromegas.jobs.view_set_name IS 'The view set it works on';
COMMENT ON COLUMN micromegas.jobs.begin_time IS 'Start of the range, or NULL for everything';
COMMENT ON COLUMN micromegas.jobs.end_time IS 'End of the range, or NULL';
COMMENT ON COLUMN micromegas.jobs.params IS 'The request''s parameters (never credentials: readers see this table)';
COMMENT ON COLUMN micromegas.jobs.state IS 'queued, running, done, failed or cancelled';
COMMENT ON COLUMN micromegas.jobs.cancel_requested IS 'An admin asked a running job to stop';
COMMENT ON COLUMN micromegas.jobs.created_at IS 'When it was requested';
COMMENT ON COLUMN micromegas.jobs.created_by IS 'The actor who requested it';
COMMENT ON COLUMN micromegas.jobs.created_by_role IS 'The Postgres role that requested it';
COMMENT ON COLUMN micromegas.jobs.started_at IS 'When it was last claimed';
COMMENT ON COLUMN micromegas.jobs.finished_at IS 'When it ended';
COMMENT ON COLUMN micromegas.jobs.worker IS 'The worker holding it';
COMMENT ON COLUMN micromegas.jobs.lease_expires_at IS 'When its lease lapses without a heartbeat';
COMMENT ON COLUMN micromegas.jobs.attempts IS 'How many times it was claimed';
COMMENT ON COLUMN micromegas.jobs.failure_phase IS 'Where it failed';
COMMENT ON COLUMN micromegas.jobs.failure_message IS 'Why it failed';
COMMENT ON COLUMN micromegas.jobs.failure_retryable IS 'Whether the worker said a retry may succeed';
COMMENT ON COLUMN micromegas.jobs.lease_token_hash IS 'SHA-256 of the current lease token';
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
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.view_set_name IS 'The view';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.version IS 'The catalog version of the change';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.operation IS 'install, upgrade, create, replace, recheck, drop or restore';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.definition_sql IS 'The statement';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.extract_query IS 'Its extract query';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.count_src_query IS 'Its count query';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.merge_partitions_query IS 'Its merge query';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.update_group IS 'Its update group';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.view_options IS 'Its other options (JSON)';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.schema_ipc IS 'Its schema (base64 Arrow IPC)';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.schema_hash IS 'Its schema hash';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.load_status IS 'ok or failed';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.load_error IS 'Why it failed to load';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.updated_by IS 'The actor';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.updated_by_role IS 'The Postgres role';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definition_history.changed_at IS 'When';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.view_set_name IS 'The view''s name';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.definition_sql IS 'The statement as written (or rendered from the columns)';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.extract_query IS 'The query materializing a partition from its source';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.count_src_query IS 'The query counting the source rows of a range (staleness)';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.merge_partitions_query IS 'The query merging partitions ({source})';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.update_group IS 'Its place in the materialization order';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.view_options IS 'Its other options (time columns, deltas, sort order, with_no_data, auto_refresh), JSON';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.schema_ipc IS 'The inferred schema (base64 Arrow IPC)';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.schema_json IS 'The same schema as JSON';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.schema_hash IS 'The portable schema hash (8 bytes)';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.reads IS 'The view sets its queries read';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.created_at IS 'When it was created';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.updated_at IS 'When it last changed';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.updated_by IS 'The actor of the last change (micromegas_views.actor or the role)';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.load_status IS 'ok, or failed when it no longer validates';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.load_error IS 'Why it failed to load';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.shipped IS 'True while the row is exactly as CREATE EXTENSION shipped it';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.updated_by_role IS 'The Postgres role (session_user) of the last change';
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.warnings IS 'The author checks'' findings: [{check, sqlstate, message, hint}]';
COMMENT ON COLUMN micromegas.partition_retirement.view_set_name IS 'The view set';
COMMENT ON COLUMN micromegas.partition_retirement.view_instance_id IS 'The instance';
COMMENT ON COLUMN micromegas.partition_retirement.partitions_retired IS 'Partitions retired';
COMMENT ON COLUMN micromegas.partition_retirement.partitions_failed IS 'Partitions that could not be';
COMMENT ON COLUMN micromegas.partition_retirement.storage_freed_bytes IS 'Bytes of files queued for deletion';
COMMENT ON COLUMN micromegas.partition_retirement.retirement_messages IS 'What happened';
COMMENT ON COLUMN micromegas.query_deny_hits.rule_id IS 'The rule';
COMMENT ON COLUMN micromegas.query_deny_hits.last_hit_at IS 'When it last denied a query';
COMMENT ON COLUMN micromegas.query_deny_list.rule_id IS 'The rule';
COMMENT ON COLUMN micromegas.query_deny_list.created_at IS 'When it was added';
COMMENT ON COLUMN micromegas.query_deny_list.created_by IS 'The actor who added it';
COMMENT ON COLUMN micromegas.query_deny_list.reason IS 'Why queries are denied (shown to the caller)';
COMMENT ON COLUMN micromegas.query_deny_list.match_expr IS 'The boolean expression over the query''s attributes';
COMMENT ON COLUMN micromegas.removed_shipped_rows.table_name IS 'builtin_view_sets or lakehouse_view_set_definitions';
COMMENT ON COLUMN micromegas.removed_shipped_rows.view_set_name IS 'The removed row''s name';
COMMENT ON COLUMN micromegas.temporary_files.file_path IS 'A file no partition references';
COMMENT ON COLUMN micromegas.temporary_files.file_size IS 'Its size in bytes';
COMMENT ON COLUMN micromegas.temporary_files.expiration IS 'When the daemon may delete it (mm_expired_files)';
COMMENT ON COLUMN micromegas.view_change.view_set_name IS 'The view';
COMMENT ON COLUMN micromegas.view_change.status IS 'What happened';
COMMENT ON COLUMN micromegas.view_change.version IS 'The catalog version';
COMMENT ON COLUMN micromegas.view_change.incompatible_partitions IS 'Its partitions the new schema hash makes incompatible';
COMMENT ON COLUMN micromegas.view_set_schema_hashes.view_set_name IS 'The view set';
COMMENT ON COLUMN micromegas.view_set_schema_hashes.schema_hash IS 'Its current schema hash';
COMMENT ON COLUMN micromegas.view_version.view_set_name IS 'The view';
COMMENT ON COLUMN micromegas.view_version.version IS 'The catalog version of the change';
COMMENT ON COLUMN micromegas.view_version.operation IS 'create, replace, recheck, restore, drop, …';
COMMENT ON COLUMN micromegas.view_version.current IS 'Whether it is the definition stored now';
COMMENT ON COLUMN micromegas.view_version.definition_sql IS 'The statement';
COMMENT ON COLUMN micromegas.view_version.update_group IS 'Its update group';
COMMENT ON COLUMN micromegas.view_version.schema IS 'Its schema, one field per line';
COMMENT ON COLUMN micromegas.view_version.schema_hash IS 'Its schema hash';
COMMENT ON COLUMN micromegas.view_version.load_status IS 'ok or failed';
COMMENT ON COLUMN micromegas.view_version.load_error IS 'Why it failed to load';
COMMENT ON COLUMN micromegas.view_version.updated_by IS 'The actor';
COMMENT ON COLUMN micromegas.view_version.changed_at IS 'When';
COMMENT ON ROLE micromegas_reader IS
  'micromegas_views: reads the catalog (definitions, order, partitions, history, jobs); for dashboards and replicas';
COMMENT ON ROLE micromegas_service IS
  'micromegas_views: the services (writes partitions, runs jobs, loads the deny list and grants); a member of micromegas_reader';
COMMENT ON ROLE micromegas_admin IS
  'micromegas_views: defines view sets, retires partitions, manages the deny list and grants; a member of micromegas_reader';
COMMENT ON DOMAIN micromegas.view_set_name IS 'A view set name as a function argument: text, never truncated like name';

-- Every stored definition validated again, in materialization order, as the
-- extension's own re-check (its timestamps and actor kept): date_bin's
-- nullability reaches the stored schemas, and the findings their warnings.
-- One whose dependents' schemas move rewrites them too; a dependent that no
-- longer validates is marked failed (the re-checks are lenient while this
-- script runs), never the definition it reads. One that no longer
-- validates itself (e.g. it was created under a higher max_plan_nodes) is
-- marked failed to load with the reason, as a re-check marks it, instead
-- of stopping the upgrade. Each definition the upgrade leaves failed gets
-- one WARNING with its reason.
DO $upgrade$
DECLARE
  d record;
  view_name text;
  problem text;
  -- Those loaded before the upgrade, in materialization order.
  loaded text[] := ARRAY(SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x
                          WHERE x.load_status = 'ok' ORDER BY x.update_group, x.view_set_name);
BEGIN
  PERFORM micromegas._mm_intent_begin('recheck', NULL);
  FOREACH view_name IN ARRAY loaded LOOP
    BEGIN
      UPDATE micromegas.lakehouse_view_set_definitions x
         SET definition_sql = x.definition_sql, load_status = 'ok'
       WHERE x.view_set_name = view_name AND x.load_status = 'ok';
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
      UPDATE micromegas.lakehouse_view_set_definitions x
         SET load_status = 'failed', load_error = format('no longer valid when upgraded to 0.1.6: %s', problem)
       WHERE x.view_set_name = view_name;
    END;
  END LOOP;
  PERFORM micromegas._mm_intent_end('recheck');
  FOR d IN SELECT x.view_set_name, x.load_error FROM micromegas.lakehouse_view_set_definitions x
            WHERE x.view_set_name = ANY (loaded) AND x.load_status = 'failed'
            ORDER BY x.update_group, x.view_set_name LOOP
    RAISE WARNING 'micromegas_views 0.1.6: materialized view "%" no longer validates and is marked failed to load: %',
      d.view_set_name, d.load_error;
  END LOOP;
END
$upgrade$;

-- Privileges, from the matrix (a new function and table in it).
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
    ('table', 'audience_grants',                        '', '', 'SELECT', 'SELECT, INSERT, UPDATE, DELETE'),
    ('table', 'author_check_requirements',              '', 'SELECT', '', '')
  ) AS m(object_kind, object_name, public, reader, service, admin)
$$;

SELECT micromegas._mm_apply_privileges();
