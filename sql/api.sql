-- micromegas_views: the functions an admin calls, the shipped rows, and the
-- privileges. Runs last in CREATE EXTENSION (pgrx "finalize").

-- CREATE [OR REPLACE] MATERIALIZED VIEW <name> WITH (...)
CREATE FUNCTION micromegas.mm_create_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  parsed jsonb;
  target text;
  outcome text;
BEGIN
  parsed := micromegas._mm_parse_statement(statement);
  IF parsed->>'kind' <> 'create' THEN
    RAISE EXCEPTION 'mm_create_view expects CREATE MATERIALIZED VIEW, not DROP'
      USING ERRCODE = 'syntax_error', HINT = 'Use micromegas.mm_drop_view() to drop a view.';
  END IF;
  target := parsed->>'name';
  PERFORM micromegas._mm_lock_catalog();
  PERFORM 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = target;
  IF FOUND THEN
    IF NOT (parsed->>'or_replace')::boolean THEN
      RAISE EXCEPTION 'materialized view "%" already exists', target
        USING ERRCODE = 'duplicate_object',
              HINT = 'Use CREATE OR REPLACE MATERIALIZED VIEW to replace it.';
    END IF;
    UPDATE micromegas.lakehouse_view_set_definitions d
       SET definition_sql = statement, extract_query = NULL, count_src_query = NULL,
           merge_partitions_query = NULL, update_group = NULL, view_options = NULL
     WHERE d.view_set_name = target;
    outcome := 'replaced';
  ELSE
    INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql)
    VALUES (target, statement);
    outcome := 'created';
  END IF;
  RETURN QUERY SELECT target, outcome, micromegas.mm_catalog_version();
END
$$;

-- The named-argument form for psql users; stores the canonical statement.
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
  or_replace boolean DEFAULT false)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM micromegas.mm_create_view(micromegas._mm_render_create(
    name, extract_query, count_src_query, merge_partitions_query, update_group,
    time_column, min_time_column, max_time_column, source_partition_delta,
    merge_partition_delta, merge_sort_order, or_replace))
$$;

-- DROP MATERIALIZED VIEW by name. The name parameter has type "name" so that
-- a single text argument resolves to the statement form below.
CREATE FUNCTION micromegas.mm_drop_view(name name, if_exists boolean DEFAULT false)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  target text := name::text;
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

-- DROP MATERIALIZED VIEW [IF EXISTS] <name>, or just a bare view name.
CREATE FUNCTION micromegas.mm_drop_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  parsed jsonb;
BEGIN
  IF statement ~ '^\s*[a-z_][a-z0-9_]*\s*;?\s*$' THEN
    RETURN QUERY SELECT * FROM micromegas.mm_drop_view(btrim(statement, E' \t\r\n;')::name, false);
    RETURN;
  END IF;
  parsed := micromegas._mm_parse_statement(statement);
  IF parsed->>'kind' <> 'drop' THEN
    RAISE EXCEPTION 'mm_drop_view expects DROP MATERIALIZED VIEW, not CREATE'
      USING ERRCODE = 'syntax_error', HINT = 'Use micromegas.mm_create_view() to create a view.';
  END IF;
  RETURN QUERY SELECT * FROM micromegas.mm_drop_view((parsed->>'name')::name, (parsed->>'if_exists')::boolean);
END
$$;

-- Seed 002: every row of the definitions table, straight from Postgres.
CREATE FUNCTION micromegas.list_view_set_definitions()
RETURNS TABLE (view_set_name text, definition_sql text, update_group integer,
               updated_at timestamptz, updated_by text, load_status text, load_error text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT d.view_set_name, d.definition_sql, d.update_group, d.updated_at, d.updated_by,
         d.load_status, d.load_error
    FROM micromegas.lakehouse_view_set_definitions d
   ORDER BY d.view_set_name
$$;

-- A service pushes its code's current schema for a built-in view set at
-- startup. The schema is base64 Arrow IPC or JSON.
CREATE FUNCTION micromegas.mm_register_builtin_view_set(
  name text,
  schema text,
  update_group integer,
  kind text DEFAULT 'materialized',
  has_view_maker boolean DEFAULT false,
  global_instance_available boolean DEFAULT true)
RETURNS TABLE (view_set_name text, schema_hash bytea, version bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  normalized jsonb := micromegas._mm_normalize_schema(schema);
BEGIN
  PERFORM micromegas._mm_lock_catalog();
  IF EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = name) THEN
    RAISE EXCEPTION '"%" is a materialized view defined with DDL, not a built-in view set', name
      USING ERRCODE = 'duplicate_object';
  END IF;
  INSERT INTO micromegas.builtin_view_sets AS b
         (view_set_name, update_group, kind, has_view_maker, global_instance_available, schema_ipc, schema_json)
  VALUES (name, update_group, kind, has_view_maker, global_instance_available,
          normalized->>'schema_ipc', normalized->'schema_json')
  ON CONFLICT ON CONSTRAINT builtin_view_sets_pkey DO UPDATE
     SET update_group = EXCLUDED.update_group, kind = EXCLUDED.kind,
         has_view_maker = EXCLUDED.has_view_maker,
         global_instance_available = EXCLUDED.global_instance_available,
         schema_ipc = EXCLUDED.schema_ipc, schema_json = EXCLUDED.schema_json;
  RETURN QUERY SELECT b.view_set_name, b.schema_hash, micromegas.mm_catalog_version()
                 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = name;
END
$$;

-- The catalog invariant, for operators and the concurrency tests: every
-- definition that reads a view set that does not exist, or whose
-- update_group is not above the group of something it reads. Always empty.
CREATE FUNCTION micromegas.mm_catalog_violations()
RETURNS TABLE (view_set_name text, reads text, problem text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT d.view_set_name, r.name,
         CASE WHEN x.view_set_name IS NULL AND b.view_set_name IS NULL THEN 'reads a missing view set'
              ELSE format('update_group %s is not above %s', d.update_group, coalesce(x.update_group, b.update_group)) END
    FROM micromegas.lakehouse_view_set_definitions d
   CROSS JOIN LATERAL unnest(d.reads) AS r(name)
    LEFT JOIN micromegas.lakehouse_view_set_definitions x ON x.view_set_name = r.name
    LEFT JOIN micromegas.builtin_view_sets b ON b.view_set_name = r.name
   WHERE (x.view_set_name IS NULL AND b.view_set_name IS NULL)
      OR d.update_group <= coalesce(x.update_group, b.update_group)
   ORDER BY 1, 2
$$;

-- The shipped rows: today's built-in view sets, and log_stats.
INSERT INTO micromegas.builtin_view_sets
       (view_set_name, update_group, kind, has_view_maker, global_instance_available, schema_json)
SELECT b->>'view_set_name', (b->>'update_group')::integer, b->>'kind',
       (b->>'has_view_maker')::boolean, (b->>'global_instance_available')::boolean, b->'schema'
  FROM jsonb_array_elements(micromegas._mm_shipped_builtins()) AS b;

INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql)
VALUES ('log_stats', micromegas._mm_shipped_log_stats());

-- Privileges. Nothing is granted to PUBLIC but reading the catalog version;
-- members of micromegas_admin (and superusers) do everything else.
GRANT USAGE ON SCHEMA micromegas TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA micromegas FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA micromegas FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON micromegas.lakehouse_view_set_definitions TO micromegas_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON micromegas.builtin_view_sets TO micromegas_admin;
GRANT SELECT ON micromegas.catalog_state TO micromegas_admin;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA micromegas TO micromegas_admin;
GRANT EXECUTE ON FUNCTION micromegas.mm_catalog_version() TO PUBLIC;
