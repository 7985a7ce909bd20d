-- micromegas_views: the functions an admin calls, the shipped rows, and the
-- privileges. Runs last in CREATE EXTENSION (pgrx "finalize").

-- CREATE [OR REPLACE] MATERIALIZED VIEW <name> WITH (...). The statement
-- goes to the table as it is: its BEFORE trigger parses and checks it (one
-- call into Rust), and turns the INSERT into an UPDATE for a replace.
CREATE FUNCTION micromegas.mm_create_view(statement text)
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

-- The named-argument form for psql users: writes the columns, and the
-- trigger renders the canonical statement. Its parameters are the option
-- table's (core/src/options.rs; a test compares the two).
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
COMMENT ON FUNCTION micromegas.mm_create_view(text, text, text, text, integer, text, text, text, text, text, text, boolean, boolean, boolean) IS
  'Create or replace a view set definition from named arguments; stores a canonical statement';

-- A view set name as a function parameter: text (never truncated like
-- "name"), as its own type so that a single text argument resolves to the
-- statement form of mm_drop_view below (text is the preferred string type).
CREATE DOMAIN micromegas.view_set_name AS text;
COMMENT ON DOMAIN micromegas.view_set_name IS 'A view set name as a function argument: text, never truncated like name';

-- Drops a view by a name that follows the name rule.
CREATE FUNCTION micromegas._mm_drop(target text, if_exists boolean)
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

-- DROP MATERIALIZED VIEW by name, with the name rule CREATE applies.
CREATE FUNCTION micromegas.mm_drop_view(name micromegas.view_set_name, if_exists boolean DEFAULT false)
RETURNS TABLE (view_set_name text, status text, version bigint, partitions_retired bigint, bytes_queued bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_drop_view');
BEGIN
  PERFORM micromegas._mm_check_name(name::text, 'reference');
  RETURN QUERY SELECT * FROM micromegas._mm_drop(name::text, if_exists);
END
$$;

-- DROP MATERIALIZED VIEW [IF EXISTS] <name>, or just a bare view name.
CREATE FUNCTION micromegas.mm_drop_view(statement text)
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
COMMENT ON FUNCTION micromegas.mm_drop_view(text) IS
  'DROP MATERIALIZED VIEW [IF EXISTS] name, or a bare name';
COMMENT ON FUNCTION micromegas.mm_drop_view(micromegas.view_set_name, boolean) IS
  'Drop a view set definition by name';

-- micromegas' list_view_set_definitions: every row of the definitions table, straight from Postgres.
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

-- The catalog invariant, for operators and the concurrency tests: every
-- definition that reads a view set that does not exist, whose update_group
-- is not above the group of something it reads, or that loads while
-- something it reads failed to load. Always empty.
CREATE FUNCTION micromegas.mm_catalog_violations()
RETURNS TABLE (view_set_name text, reads text, problem text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT d.view_set_name, r.name,
         CASE WHEN x.view_set_name IS NULL AND b.view_set_name IS NULL THEN 'reads a missing view set'
              WHEN d.update_group <= coalesce(x.update_group, b.update_group)
                THEN format('update_group %s is not above %s', d.update_group, coalesce(x.update_group, b.update_group))
              ELSE 'loads, but reads a view set that failed to load' END
    FROM micromegas.lakehouse_view_set_definitions d
   CROSS JOIN LATERAL unnest(d.reads) AS r(name)
    LEFT JOIN micromegas.lakehouse_view_set_definitions x ON x.view_set_name = r.name
    LEFT JOIN micromegas.builtin_view_sets b ON b.view_set_name = r.name
   WHERE (x.view_set_name IS NULL AND b.view_set_name IS NULL)
      OR d.update_group <= coalesce(x.update_group, b.update_group)
      OR (d.load_status = 'ok' AND x.load_status = 'failed')
   ORDER BY 1, 2
$$;
COMMENT ON FUNCTION micromegas.mm_catalog_violations() IS
  'Definitions reading a missing view set or out of update_group order (always empty)';

-- micromegas' list_view_sets: every view set the services should load — the built-ins and the
-- DDL rows that validated — with its current schema and hash. Any role.
CREATE FUNCTION micromegas.list_view_sets()
RETURNS TABLE (view_set_name text, current_schema_hash bytea, schema text, has_view_maker boolean,
               global_instance_available boolean, update_group integer, origin text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT b.view_set_name, b.schema_hash, micromegas._mm_format_schema(b.schema_ipc),
         b.has_view_maker, b.global_instance_available, b.update_group, 'builtin'
    FROM micromegas.builtin_view_sets b
  UNION ALL
  SELECT d.view_set_name, d.schema_hash, micromegas._mm_format_schema(d.schema_ipc),
         false, true, d.update_group, 'ddl'
    FROM micromegas.lakehouse_view_set_definitions d
   WHERE d.load_status = 'ok'
   ORDER BY 1
$$;
COMMENT ON FUNCTION micromegas.list_view_sets() IS
  'Every view set the services should load, with its current schema and hash';

-- The reload protocol's one read: the catalog version and every loadable
-- definition, in materialization order (update_group, then name). A single
-- SQL statement, so one consistent snapshot.
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
COMMENT ON FUNCTION micromegas.mm_view_set_snapshot() IS
  'The catalog version and every loadable definition, in materialization order';

-- Edges: which view set each definition reads, with both groups.
CREATE FUNCTION micromegas.list_view_dependencies()
RETURNS TABLE (view_set_name text, update_group integer, depends_on text, depends_on_group integer,
               depends_on_origin text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT d.view_set_name, d.update_group, r.name, coalesce(x.update_group, b.update_group),
         CASE WHEN x.view_set_name IS NOT NULL THEN 'ddl' ELSE 'builtin' END
    FROM micromegas.lakehouse_view_set_definitions d
   CROSS JOIN LATERAL unnest(d.reads) AS r(name)
    LEFT JOIN micromegas.lakehouse_view_set_definitions x ON x.view_set_name = r.name
    LEFT JOIN micromegas.builtin_view_sets b ON b.view_set_name = r.name
   ORDER BY 1, 3
$$;
COMMENT ON FUNCTION micromegas.list_view_dependencies() IS
  'Which view sets each definition reads, with both update groups';

-- The order the daemon follows: ascending update_group, then name, over the
-- grouped built-ins and the loadable DDL views.
CREATE FUNCTION micromegas.mm_materialization_order()
RETURNS TABLE ("position" bigint, view_set_name text, update_group integer, origin text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT row_number() OVER (ORDER BY o.update_group, o.view_set_name), o.view_set_name, o.update_group, o.origin
    FROM (SELECT b.view_set_name, b.update_group, 'builtin' AS origin
            FROM micromegas.builtin_view_sets b WHERE b.update_group IS NOT NULL
          UNION ALL
          SELECT d.view_set_name, d.update_group, 'ddl'
            FROM micromegas.lakehouse_view_set_definitions d WHERE d.load_status = 'ok') o
   ORDER BY 1
$$;
COMMENT ON FUNCTION micromegas.mm_materialization_order() IS
  'The order the maintenance daemon materializes in';

-- The dry run: what mm_create_view would do — parsing, every check, the
-- dependents' re-checks — asked without writing (_mm_dry_run_read_only), on
-- a primary and a hot standby alike. It takes no lock: a dry run never waits
-- for a writer, and a writer never waits for a dry run, however long its
-- planning. _mm_explain_view(statement, false) answers the same by running
-- the write itself in a subtransaction that is always rolled back (taking
-- the catalog lock like any write); regress 23_standby_dry_run compares the
-- two on every case.
CREATE FUNCTION micromegas.mm_explain_view(statement text)
RETURNS TABLE (view_set_name text, would_be text, schema text, schema_hash bytea, reads text[],
               dependents text[], materialization_position bigint, problems text[], warnings jsonb)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM micromegas._mm_explain_view(statement, true)
$$;
COMMENT ON FUNCTION micromegas.mm_explain_view(text) IS
  'Dry run of mm_create_view: every check, nothing written, no lock taken or waited for; the same answer on a hot standby';

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
COMMENT ON FUNCTION micromegas._mm_explain_view(text, boolean) IS
  'mm_explain_view by _mm_dry_run_read_only (read_only), or by a rolled-back write, its oracle in the tests';

-- What mm_create_view(statement) would store, asked without writing: the
-- trigger's own steps (_mm_prepare_definition, _mm_name_taken,
-- _mm_report_author_findings) and, for a replace, what its UPDATE sets off
-- (_mm_definition_changed, with dry: the re-check of every dependent, each
-- against what the write would have stored so far). Raises what the write
-- raises, and the same notices.
CREATE FUNCTION micromegas._mm_dry_run_read_only(statement text,
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

-- Makes the author checks at least `level` (warn or error; off lifts the
-- requirement) for every role of this database, or for the members of
-- `role_name`: what micromegas_views.author_checks can no longer relax.
-- Raising is any admin's; lowering or lifting a requirement is refused to
-- those it binds (superusers excepted). Kept by role name: renaming the
-- role lifts it, re-creating the name brings it back.
CREATE FUNCTION micromegas.mm_require_author_checks(level text, role_name text DEFAULT NULL)
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

-- The shipped rows: today's built-in view sets, and log_stats.
INSERT INTO micromegas.builtin_view_sets
       (view_set_name, update_group, kind, has_view_maker, global_instance_available, schema_json)
SELECT b->>'view_set_name', (b->>'update_group')::integer, b->>'kind',
       (b->>'has_view_maker')::boolean, (b->>'global_instance_available')::boolean, b->'schema'
  FROM jsonb_array_elements(micromegas._mm_shipped_builtins()) AS b;

INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql)
VALUES ('log_stats', micromegas._mm_shipped_log_stats());

-- Everyone may read the public audience, and mint into it (sql/access.sql).
INSERT INTO micromegas.audience_grants (audience, axis, selector, created_at, created_by)
VALUES ('public', 'read', '*', now(), 'micromegas_views'), ('public', 'mint', '*', now(), 'micromegas_views');

-- pg_dump keeps what an admin or a service wrote: every row but those still
-- exactly as shipped (CREATE EXTENSION recreates them), the definitions in
-- materialization order so that a restore validates each after what it reads,
-- the removed shipped rows, and the catalog version (a restore continues
-- above it: see _mm_catalog_state_restore).
SELECT pg_catalog.pg_extension_config_dump('micromegas.builtin_view_sets', 'WHERE NOT shipped');
SELECT pg_catalog.pg_extension_config_dump('micromegas.lakehouse_view_set_definitions',
                                           'WHERE NOT shipped ORDER BY update_group, view_set_name');
SELECT pg_catalog.pg_extension_config_dump('micromegas.removed_shipped_rows', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.catalog_state', '');
-- pg_dump keeps the rules, and the grants an admin made (CREATE EXTENSION
-- seeds the two public ones).
SELECT pg_catalog.pg_extension_config_dump('micromegas.query_deny_list', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.audience_grants',
  $$WHERE NOT (audience = 'public' AND selector = '*' AND created_by = 'micromegas_views')$$);
-- What an admin required of the author checks.
SELECT pg_catalog.pg_extension_config_dump('micromegas.author_check_requirements', '');
-- Partitions and queued files are data (sql/partitions.sql).
SELECT pg_catalog.pg_extension_config_dump('micromegas.lakehouse_partitions', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.temporary_files', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.file_claims', '');
-- Definition history (sql/history.sql), but for the rows CREATE EXTENSION
-- writes (it writes them again).
SELECT pg_catalog.pg_extension_config_dump('micromegas.lakehouse_view_set_definition_history',
                                           $$WHERE operation <> 'install'$$);
-- Jobs (sql/jobs.sql): every request is kept.
SELECT pg_catalog.pg_extension_config_dump('micromegas.jobs', '');
-- Deny-rule hits (sql/access.sql; 0.1.5, last as the upgrade adds it).
SELECT pg_catalog.pg_extension_config_dump('micromegas.query_deny_hits', '');

-- Every object of the extension has a comment (what \df+, \d+ and \dT+ show;
-- regress 25_comments fails on one without; docs/sql-reference.md is generated
-- from them), beside its CREATE: in these files, or beside the #[pg_extern]
-- of a function written in Rust (src/pg/).

-- Last: every privilege, from the matrix (sql/privileges.sql).
SELECT micromegas._mm_apply_privileges();
