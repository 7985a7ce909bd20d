-- micromegas_views 0.1.2 -> 0.1.3. What changes:
-- * one call into Rust per definition written: the table's BEFORE trigger
--   calls _mm_prepare_definition (parse, look up what the queries mention,
--   plan, check; a typed row back), replacing _mm_parse_statement,
--   _mm_definition_from_row, _mm_check/_mm_validate, _mm_referenced_relations
--   and _mm_normalize_schema (jsonb between SQL and Rust);
-- * mm_create_view(statement) hands the statement to the INSERT without
--   parsing it first; a CREATE OR REPLACE of an existing view becomes an
--   UPDATE of its row in the trigger;
-- * the named-argument mm_create_view writes the columns (the trigger renders
--   the statement), instead of rendering it in Rust first;
-- * mm_drop_view(statement) reads the statement (or a bare name) in Rust, with
--   no regular expression; both forms share _mm_drop;
-- * built-in schemas are read by _mm_schema_forms (a typed row);
-- * the query deny list and the audience grants (sql/access.sql, all new),
--   with mm_sql_hash and the Rust steps that compile and match rules.
-- The Rust symbols the released install scripts name stay in the library
-- (src/pg/legacy.rs): see the rule in micromegas_views--0.1.1--0.1.2.sql.

DROP FUNCTION micromegas._mm_check(jsonb);
DROP FUNCTION micromegas._mm_row_definition(micromegas.lakehouse_view_set_definitions);
DROP FUNCTION micromegas._mm_parse_statement(text);
DROP FUNCTION micromegas._mm_definition_from_row(text, text, text, text, text, integer, jsonb);
DROP FUNCTION micromegas._mm_render_create(text, text, text, text, integer, text, text, text, text, text, text, boolean);
DROP FUNCTION micromegas._mm_referenced_relations(jsonb);
DROP FUNCTION micromegas._mm_validate(jsonb, jsonb);
DROP FUNCTION micromegas._mm_normalize_schema(text);

-- New Rust functions (internal: callable by neither role).
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
	"load_error" TEXT  /* Option < String > */
)
VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'prepare_definition_wrapper';

CREATE FUNCTION micromegas."_mm_statement_target"(
	"statement" TEXT /* & str */
) RETURNS TABLE (
	"kind" TEXT,  /* String */
	"view_set_name" TEXT,  /* String */
	"or_replace" bool,  /* bool */
	"if_exists" bool  /* bool */
)
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'statement_target_wrapper';

CREATE FUNCTION micromegas."_mm_schema_forms"(
	"schema_text" TEXT /* & str */
) RETURNS TABLE (
	"schema_ipc" TEXT,  /* String */
	"schema_json" jsonb,  /* JsonB */
	"schema_hash" bytea  /* Vec < u8 > */
)
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'schema_forms_wrapper';

CREATE FUNCTION micromegas._mm_drop(target text, if_exists boolean)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM micromegas._mm_lock_catalog();
  DELETE FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = target;
  IF FOUND THEN
    RETURN QUERY SELECT target, 'dropped'::text, micromegas.mm_catalog_version();
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
  RETURN QUERY SELECT target, 'not_found'::text, micromegas.mm_catalog_version();
END
$$;

REVOKE EXECUTE ON FUNCTION micromegas._mm_prepare_definition(text, text, text, text, text, integer, jsonb, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION micromegas._mm_statement_target(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION micromegas._mm_schema_forms(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION micromegas._mm_drop(text, boolean) FROM PUBLIC;

-- Changed functions, as a fresh install creates them.
CREATE OR REPLACE FUNCTION micromegas._mm_refuse_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION 'TRUNCATE is not allowed on %.%', TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'feature_not_supported',
          HINT = 'Use DELETE (for a view, mm_drop_view), so that each row''s checks run and services are notified.';
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  op text;
  row_name text;
  row_group integer;
BEGIN
  IF TG_OP = 'DELETE' THEN
    row_name := OLD.view_set_name; row_group := OLD.update_group;
  ELSE
    row_name := NEW.view_set_name; row_group := NEW.update_group;
  END IF;
  IF TG_TABLE_NAME = 'builtin_view_sets' THEN
    op := 'builtin';
  ELSIF TG_OP = 'INSERT' THEN
    op := 'create';
  ELSIF TG_OP = 'DELETE' THEN
    op := 'drop';
  ELSIF NEW.load_status = 'failed' THEN
    op := 'failed';
  ELSE
    op := 'replace';
  END IF;
  PERFORM pg_notify('micromegas_view_definitions', json_build_object(
    'op', op,
    'view_set_name', row_name,
    'update_group', row_group,
    'version', (SELECT s.version FROM micromegas.catalog_state s))::text);
  RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_recheck_dependents(source text, strict boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dep micromegas.lakehouse_view_set_definitions;
  checked_schema text;
  problem text;
BEGIN
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
END
$$;
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
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = NEW.definition_sql, extract_query = NEW.extract_query,
             count_src_query = NEW.count_src_query, merge_partitions_query = NEW.merge_partitions_query,
             update_group = NEW.update_group, view_options = NEW.view_options,
             updated_at = clock_timestamp(), updated_by = coalesce(NEW.updated_by, micromegas._mm_actor()),
             load_status = 'ok'
       WHERE d.view_set_name = p.view_set_name;
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
CREATE OR REPLACE FUNCTION micromegas._mm_builtins_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  forms record;
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
    IF NOT NEW.shipped AND EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b
                                    WHERE b.view_set_name = NEW.view_set_name AND b.shipped) THEN
      -- As for definitions: an INSERT over a shipped row updates it
      -- (nested, so it keeps the given registration columns).
      UPDATE micromegas.builtin_view_sets b
         SET update_group = NEW.update_group, kind = NEW.kind, has_view_maker = NEW.has_view_maker,
             global_instance_available = NEW.global_instance_available, schema_ipc = NEW.schema_ipc,
             schema_json = NEW.schema_json, registered_at = NEW.registered_at, registered_by = NEW.registered_by
       WHERE b.view_set_name = NEW.view_set_name;
      RETURN NULL;
    END IF;
  ELSE
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
  IF TG_OP = 'INSERT' OR pg_catalog.pg_trigger_depth() > 1 THEN
    NEW.registered_at := coalesce(NEW.registered_at, clock_timestamp());
    NEW.registered_by := coalesce(NEW.registered_by, micromegas._mm_actor());
  ELSE
    NEW.registered_at := clock_timestamp();
    NEW.registered_by := micromegas._mm_actor();
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE FUNCTION micromegas.mm_create_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  target text;
BEGIN
  PERFORM pg_catalog.set_config('micromegas_views.replaced', '', true);
  INSERT INTO micromegas.lakehouse_view_set_definitions AS d (definition_sql) VALUES (statement)
  RETURNING d.view_set_name INTO target;
  RETURN QUERY SELECT coalesce(target, pg_catalog.current_setting('micromegas_views.replaced')),
                      CASE WHEN target IS NULL THEN 'replaced' ELSE 'created' END,
                      s.version
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
  or_replace boolean DEFAULT false)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  options jsonb := pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
    'time_column', time_column, 'min_time_column', min_time_column, 'max_time_column', max_time_column,
    'source_partition_delta', source_partition_delta, 'merge_partition_delta', merge_partition_delta,
    'merge_sort_order', merge_sort_order));
  outcome text := 'created';
BEGIN
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
  RETURN QUERY SELECT name, outcome, micromegas.mm_catalog_version();
END
$$;
CREATE OR REPLACE FUNCTION micromegas.mm_drop_view(name micromegas.view_set_name, if_exists boolean DEFAULT false)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM micromegas._mm_check_name(name::text, 'reference');
  RETURN QUERY SELECT * FROM micromegas._mm_drop(name::text, if_exists);
END
$$;
CREATE OR REPLACE FUNCTION micromegas.mm_drop_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint)
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
CREATE OR REPLACE FUNCTION micromegas.mm_explain_view(statement text)
RETURNS TABLE (view_set_name text, would_be text, schema text, schema_hash bytea, reads text[],
               dependents text[], materialization_position bigint, problems text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  target text;
  outcome text;
  row_schema text;
  row_hash bytea;
  row_reads text[];
  row_dependents text[];
  row_position bigint;
  problem text;
  problem_detail text;
  problem_state text;
BEGIN
  BEGIN
    SELECT c.view_set_name, c.status INTO target, outcome FROM micromegas.mm_create_view(statement) c;
    SELECT micromegas._mm_format_schema(d.schema_ipc), d.schema_hash, d.reads
      INTO row_schema, row_hash, row_reads
      FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = target;
    SELECT o.position INTO row_position FROM micromegas.mm_materialization_order() o WHERE o.view_set_name = target;
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
      problem := problem_state || ': ' || problem || coalesce(nullif(E'\n' || problem_detail, E'\n'), '');
  END;
  SELECT array_agg(d.view_set_name ORDER BY d.view_set_name) INTO row_dependents
    FROM micromegas.lakehouse_view_set_definitions d
   WHERE d.reads @> ARRAY[target] AND d.view_set_name <> target;
  RETURN QUERY SELECT target, outcome, row_schema, row_hash, row_reads, coalesce(row_dependents, '{}'),
                      row_position, CASE WHEN problem IS NULL THEN '{}'::text[] ELSE ARRAY[problem] END;
END
$$;

-- The query deny list and the audience grants: sql/access.sql as a fresh
-- install runs it.
CREATE FUNCTION micromegas."_mm_check_deny_rule"(
	"match_expr" TEXT /* & str */
) RETURNS bool /* bool */
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'check_deny_rule_wrapper';

CREATE FUNCTION micromegas."_mm_first_denial"(
	"rule_ids" TEXT[], /* Vec < String > */
	"match_exprs" TEXT[], /* Vec < String > */
	"context" TEXT[] /* Vec < Option < String > > */
) RETURNS INT /* Option < i32 > */
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'first_denial_wrapper';

CREATE FUNCTION micromegas."_mm_deny_max_rules"() RETURNS INT /* i32 */
STRICT STABLE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'deny_max_rules_wrapper';

CREATE FUNCTION micromegas."mm_sql_hash"(
	"sql" TEXT /* & str */
) RETURNS TEXT /* String */
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'sql_hash_wrapper';

-- micromegas_views: micromegas' query deny list and audience grants,
-- as validated Postgres state. Every write path (the functions below, a
-- direct INSERT/UPDATE/DELETE by an admin) goes through the same triggers:
-- a deny rule is compiled with DataFusion before it is stored, the cap is
-- counted under a lock, a grant's audience, axis and selector are checked,
-- and every committed change is announced. The privileges and the pg_dump
-- configuration are in api.sql with the others.

-- <tables>
-- One row: the lock deny-list writers count the cap under, and the
-- versions the announcements carry.
CREATE TABLE micromegas.access_state (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  deny_list_version bigint NOT NULL DEFAULT 0,
  audience_grants_version bigint NOT NULL DEFAULT 0
);
INSERT INTO micromegas.access_state DEFAULT VALUES;

CREATE TABLE micromegas.query_deny_list (
  rule_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  created_at timestamptz NOT NULL,
  created_by varchar(255) NOT NULL,
  reason text NOT NULL,
  match_expr text NOT NULL,
  last_hit_at timestamptz
);
COMMENT ON TABLE micromegas.query_deny_list IS
  'Query deny list: a FlightSQL query whose context makes match_expr TRUE is rejected';

-- The audience rules, in one place: the table's CHECK and the functions'
-- messages both come from here. NULL when the row is valid.
CREATE FUNCTION micromegas._mm_audience_problem(audience text, axis text, selector text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE
    WHEN audience IS NULL OR audience !~ '^[A-Za-z0-9_-]+$' OR octet_length(audience) > 255 THEN
      format('invalid audience "%s": an audience is 1 to 255 letters, digits, ''_'' or ''-''', audience)
    WHEN axis IS NULL OR axis NOT IN ('read', 'mint') THEN
      format('invalid axis "%s": the axis is ''read'' or ''mint''', axis)
    WHEN selector IS NULL OR octet_length(selector) > 255
         OR NOT (selector = '*' OR selector ~ '^(user|group):.+$') THEN
      format('invalid selector "%s": a selector is ''*'', ''user:<id>'' or ''group:<id>''', selector)
  END
$$;

CREATE TABLE micromegas.audience_grants (
  audience varchar(255) NOT NULL,
  axis varchar(4) NOT NULL CHECK (axis IN ('read', 'mint')),
  selector varchar(255) NOT NULL,
  created_at timestamptz NOT NULL,
  created_by varchar(255) NOT NULL,
  PRIMARY KEY (audience, axis, selector),
  CONSTRAINT audience_grants_valid CHECK (micromegas._mm_audience_problem(audience, axis, selector) IS NULL)
);
COMMENT ON TABLE micromegas.audience_grants IS
  'Audience grants: who may read or mint each audience';
-- </tables>

-- <deny list>
-- BEFORE INSERT OR UPDATE OR DELETE: a rule is compiled before it is stored;
-- the cap is counted under the access_state row lock, which every writer of
-- a rule takes, so it holds exactly; recording hits (only last_hit_at
-- changes) takes no lock and announces nothing.
CREATE FUNCTION micromegas._mm_deny_list_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  cap integer;
  held bigint;
BEGIN
  IF TG_OP = 'UPDATE' AND (NEW.rule_id, NEW.created_at, NEW.created_by, NEW.reason, NEW.match_expr)
                          IS NOT DISTINCT FROM
                          (OLD.rule_id, OLD.created_at, OLD.created_by, OLD.reason, OLD.match_expr) THEN
    RETURN NEW;
  END IF;
  UPDATE micromegas.access_state SET deny_list_version = deny_list_version + 1;
  IF TG_OP = 'DELETE' THEN
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
    NEW.created_at := coalesce(NEW.created_at, clock_timestamp());
    NEW.created_by := coalesce(nullif(btrim(NEW.created_by), ''), micromegas._mm_actor());
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

CREATE FUNCTION micromegas._mm_deny_list_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_notify('micromegas_query_deny_list', json_build_object(
    'op', lower(TG_OP),
    'version', (SELECT a.deny_list_version FROM micromegas.access_state a))::text);
  RETURN NULL;
END
$$;

CREATE TRIGGER query_deny_list_before_write
  BEFORE INSERT OR UPDATE OR DELETE ON micromegas.query_deny_list
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_deny_list_before_write();
CREATE TRIGGER query_deny_list_notify
  AFTER INSERT OR DELETE ON micromegas.query_deny_list
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_deny_list_notify();
CREATE TRIGGER query_deny_list_notify_update
  AFTER UPDATE ON micromegas.query_deny_list
  FOR EACH ROW WHEN ((NEW.reason, NEW.match_expr) IS DISTINCT FROM (OLD.reason, OLD.match_expr))
  EXECUTE FUNCTION micromegas._mm_deny_list_notify();
CREATE TRIGGER query_deny_list_no_truncate
  BEFORE TRUNCATE ON micromegas.query_deny_list
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- As micromegas: validates and stores a rule; one (time, msg) row, msg the id.
CREATE FUNCTION micromegas.deny_queries(match_expr text, reason text)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  id uuid;
BEGIN
  INSERT INTO micromegas.query_deny_list AS q (match_expr, reason)
  VALUES (match_expr, reason) RETURNING q.rule_id INTO id;
  RETURN QUERY SELECT clock_timestamp(), id::text;
END
$$;

-- As micromegas: every rule in force, oldest first.
CREATE FUNCTION micromegas.list_query_denials()
RETURNS TABLE (rule_id text, created_at timestamptz, created_by text, reason text, match_expr text,
               last_hit_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT q.rule_id::text, q.created_at, q.created_by::text, q.reason, q.match_expr, q.last_hit_at
    FROM micromegas.query_deny_list q
   ORDER BY q.created_at, q.rule_id
$$;

-- As micromegas: deletes one rule; the outcome as text, never an error.
CREATE FUNCTION micromegas.remove_query_denial(rule_id text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
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

-- A service flushes the rules' hits; only last_hit_at moves, and never back.
CREATE FUNCTION micromegas.mm_record_query_denial_hits(rule_ids uuid[], at timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  touched integer;
BEGIN
  UPDATE micromegas.query_deny_list q
     SET last_hit_at = greatest(coalesce(q.last_hit_at, at), at)
   WHERE q.rule_id = ANY (rule_ids);
  GET DIAGNOSTICS touched = ROW_COUNT;
  RETURN touched;
END
$$;

-- The first rule, oldest first, whose expression is TRUE for a query's
-- context (NULL is no match), evaluated with the same compiled expression a
-- rule is checked with. sql_hash, when not given, is the fingerprint of sql
-- (computed in the same call).
CREATE FUNCTION micromegas.mm_match_query_denial(
  user_id text DEFAULT NULL, email text DEFAULT NULL, service_account text DEFAULT NULL,
  client text DEFAULT NULL, agent text DEFAULT NULL, entrypoint text DEFAULT NULL,
  session text DEFAULT NULL, notebook text DEFAULT NULL, cell text DEFAULT NULL,
  client_ip text DEFAULT NULL, sql text DEFAULT NULL, sql_hash text DEFAULT NULL)
RETURNS TABLE (rule_id text, reason text, match_expr text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  WITH rules AS (
    SELECT array_agg(q.rule_id::text ORDER BY q.created_at, q.rule_id) AS ids,
           array_agg(q.match_expr ORDER BY q.created_at, q.rule_id) AS exprs
      FROM micromegas.query_deny_list q),
  hit AS (
    SELECT r.ids[micromegas._mm_first_denial(r.ids, r.exprs, ARRAY[
             mm_match_query_denial.user_id, mm_match_query_denial.email,
             mm_match_query_denial.service_account, mm_match_query_denial.client,
             mm_match_query_denial.agent, mm_match_query_denial.entrypoint,
             mm_match_query_denial.session, mm_match_query_denial.notebook,
             mm_match_query_denial.cell, mm_match_query_denial.client_ip,
             mm_match_query_denial.sql, mm_match_query_denial.sql_hash])] AS id
      FROM rules r WHERE r.ids IS NOT NULL)
  SELECT q.rule_id::text, q.reason, q.match_expr
    FROM hit JOIN micromegas.query_deny_list q ON q.rule_id::text = hit.id
$$;

-- The same, with the context as a jsonb object of those keys. (Its own
-- name: an uncast string literal would otherwise go to the text form above
-- as user_id.)
CREATE FUNCTION micromegas.mm_match_query_denial_context(context jsonb)
RETURNS TABLE (rule_id text, reason text, match_expr text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  unknown text;
BEGIN
  IF jsonb_typeof(context) IS DISTINCT FROM 'object' THEN
    RAISE EXCEPTION 'the match context must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT string_agg(k, ', ' ORDER BY k) INTO unknown FROM jsonb_object_keys(context) k
   WHERE k NOT IN ('user_id', 'email', 'service_account', 'client', 'agent', 'entrypoint', 'session',
                   'notebook', 'cell', 'client_ip', 'sql', 'sql_hash');
  IF unknown IS NOT NULL THEN
    RAISE EXCEPTION 'unknown match context key(s): %', unknown
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'The keys are user_id, email, service_account, client, agent, entrypoint, session, notebook, cell, client_ip, sql and sql_hash.';
  END IF;
  RETURN QUERY SELECT * FROM micromegas.mm_match_query_denial(
    user_id => context->>'user_id', email => context->>'email',
    service_account => context->>'service_account', client => context->>'client',
    agent => context->>'agent', entrypoint => context->>'entrypoint', session => context->>'session',
    notebook => context->>'notebook', cell => context->>'cell', client_ip => context->>'client_ip',
    sql => context->>'sql', sql_hash => context->>'sql_hash');
END
$$;
-- </deny list>

-- <audience grants>
-- BEFORE INSERT OR UPDATE OR DELETE: the rules with their messages, the
-- audit columns, the version.
CREATE FUNCTION micromegas._mm_audience_grants_before_write() RETURNS trigger
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
  IF TG_OP = 'INSERT' THEN
    NEW.created_at := coalesce(NEW.created_at, clock_timestamp());
    NEW.created_by := coalesce(nullif(btrim(NEW.created_by), ''), micromegas._mm_actor());
  END IF;
  RETURN NEW;
END
$$;

CREATE FUNCTION micromegas._mm_audience_grants_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r record;
BEGIN
  IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
  PERFORM pg_notify('micromegas_audience_grants', json_build_object(
    'op', lower(TG_OP), 'audience', r.audience, 'axis', r.axis, 'selector', r.selector,
    'version', (SELECT a.audience_grants_version FROM micromegas.access_state a))::text);
  RETURN NULL;
END
$$;

CREATE TRIGGER audience_grants_before_write
  BEFORE INSERT OR UPDATE OR DELETE ON micromegas.audience_grants
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_audience_grants_before_write();
CREATE TRIGGER audience_grants_notify
  AFTER INSERT OR UPDATE OR DELETE ON micromegas.audience_grants
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_audience_grants_notify();
CREATE TRIGGER audience_grants_no_truncate
  BEFORE TRUNCATE ON micromegas.audience_grants
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- Everyone may read the public audience, and mint into it.
INSERT INTO micromegas.audience_grants (audience, axis, selector, created_at, created_by)
VALUES ('public', 'read', '*', now(), 'micromegas_views'), ('public', 'mint', '*', now(), 'micromegas_views');

-- Grants or revokes one (audience, axis, selector); the outcome is
-- granted/already_granted or revoked/not_found.
CREATE FUNCTION micromegas.mm_grant_audience(audience text, axis text, selector text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
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

CREATE FUNCTION micromegas.mm_revoke_audience(audience text, axis text, selector text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
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

-- The selectors of the caller a service acts for: user:<caller_email> and
-- group:<g> for each of caller_groups (comma-separated), from the settings
-- the connecting service sets per request — a claim that service makes.
-- Never '*'.
CREATE FUNCTION micromegas._mm_caller_selectors() RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT array_remove(
           ARRAY['user:' || nullif(btrim(current_setting('micromegas_views.caller_email', true)), '')]
           || ARRAY(SELECT 'group:' || btrim(g)
                      FROM unnest(string_to_array(current_setting('micromegas_views.caller_groups', true), ',')) g
                     WHERE btrim(g) <> ''),
           NULL)
$$;

-- As micromegas: the grants the caller may see. A member of micromegas_admin (by
-- its login role, session_user, which no setting changes) sees every row;
-- anyone else sees every row of each (audience, axis) pair it holds through
-- one of its own selectors; a caller with none sees nothing.
CREATE FUNCTION micromegas.list_audience_grants()
RETURNS TABLE (audience text, axis text, selector text, created_at timestamptz, created_by text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT g.audience::text, g.axis::text, g.selector::text, g.created_at, g.created_by::text
    FROM micromegas.audience_grants g
   WHERE pg_has_role(session_user, 'micromegas_admin', 'MEMBER')
      OR (g.audience, g.axis) IN (SELECT h.audience, h.axis FROM micromegas.audience_grants h
                                   WHERE h.selector = ANY (array_remove(micromegas._mm_caller_selectors(), '*')))
   ORDER BY g.audience, g.axis, g.selector
$$;
-- </audience grants>

-- <snapshots>
-- The services' reads (the FlightSQL replicas enforce both lists): the
-- version and every row, in one statement, so one consistent read; and the
-- two versions, polled to notice a missed notification.
CREATE FUNCTION micromegas.mm_query_deny_list_snapshot()
RETURNS TABLE (version bigint, rule_id uuid, created_at timestamptz, created_by text, reason text,
               match_expr text, last_hit_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT a.deny_list_version, q.rule_id, q.created_at, q.created_by::text, q.reason, q.match_expr, q.last_hit_at
    FROM micromegas.access_state a LEFT JOIN micromegas.query_deny_list q ON true
   ORDER BY q.created_at, q.rule_id
$$;

CREATE FUNCTION micromegas.mm_audience_grants_snapshot()
RETURNS TABLE (version bigint, audience text, axis text, selector text, created_at timestamptz, created_by text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT a.audience_grants_version, g.audience::text, g.axis::text, g.selector::text, g.created_at, g.created_by::text
    FROM micromegas.access_state a LEFT JOIN micromegas.audience_grants g ON true
   ORDER BY g.audience, g.axis, g.selector
$$;

CREATE FUNCTION micromegas.mm_access_versions()
RETURNS TABLE (deny_list_version bigint, audience_grants_version bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT a.deny_list_version, a.audience_grants_version FROM micromegas.access_state a
$$;
-- </snapshots>
-- pg_dump keeps the rules, and the grants an admin made (CREATE EXTENSION
-- seeds the two public ones).
SELECT pg_catalog.pg_extension_config_dump('micromegas.query_deny_list', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.audience_grants',
  $$WHERE NOT (audience = 'public' AND selector = '*' AND created_by = 'micromegas_views')$$);

-- Their privileges, as api.sql gives them.
REVOKE EXECUTE ON FUNCTION micromegas._mm_check_deny_rule(text), micromegas._mm_first_denial(text[], text[], text[]),
  micromegas._mm_deny_max_rules(), micromegas.mm_sql_hash(text), micromegas._mm_audience_problem(text, text, text),
  micromegas._mm_deny_list_before_write(), micromegas._mm_deny_list_notify(),
  micromegas._mm_audience_grants_before_write(), micromegas._mm_audience_grants_notify(),
  micromegas._mm_caller_selectors(), micromegas.deny_queries(text, text), micromegas.list_query_denials(),
  micromegas.remove_query_denial(text), micromegas.mm_record_query_denial_hits(uuid[], timestamptz),
  micromegas.mm_match_query_denial(text, text, text, text, text, text, text, text, text, text, text, text),
  micromegas.mm_match_query_denial_context(jsonb), micromegas.mm_grant_audience(text, text, text),
  micromegas.mm_revoke_audience(text, text, text), micromegas.list_audience_grants(),
  micromegas.mm_query_deny_list_snapshot(), micromegas.mm_audience_grants_snapshot(),
  micromegas.mm_access_versions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION micromegas.mm_sql_hash(text), micromegas.deny_queries(text, text),
  micromegas.list_query_denials(), micromegas.remove_query_denial(text),
  micromegas.mm_record_query_denial_hits(uuid[], timestamptz),
  micromegas.mm_match_query_denial(text, text, text, text, text, text, text, text, text, text, text, text),
  micromegas.mm_match_query_denial_context(jsonb), micromegas.mm_grant_audience(text, text, text),
  micromegas.mm_revoke_audience(text, text, text), micromegas.list_audience_grants(),
  micromegas.mm_query_deny_list_snapshot(), micromegas.mm_audience_grants_snapshot(),
  micromegas.mm_access_versions() TO micromegas_admin;
REVOKE ALL ON micromegas.access_state, micromegas.query_deny_list, micromegas.audience_grants FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON micromegas.query_deny_list, micromegas.audience_grants TO micromegas_admin;
GRANT SELECT ON micromegas.query_deny_list TO micromegas_reader;
GRANT EXECUTE ON FUNCTION micromegas.list_audience_grants(), micromegas.mm_sql_hash(text),
  micromegas.mm_match_query_denial(text, text, text, text, text, text, text, text, text, text, text, text),
  micromegas.mm_match_query_denial_context(jsonb), micromegas.mm_record_query_denial_hits(uuid[], timestamptz),
  micromegas.mm_query_deny_list_snapshot(), micromegas.mm_audience_grants_snapshot(), micromegas.mm_access_versions()
  TO micromegas_reader;
