-- micromegas_views 0.1.1 -> 0.1.2. What changes:
-- * the shipped built-in view sets get micromegas' own nullability (and
--   streams its format column); every definition that reads them is
--   re-validated, and one that no longer plans is marked failed with the
--   reason;
-- * definitions re-check what they read when its schema moves in any way
--   (nullability too), a definition may not read one that failed to load,
--   and the catalog invariant reports such rows;
-- * install mode is Postgres' creating_extension, not a setting any role can
--   change; micromegas_views.restoring is gone (the extension's own nested
--   writes are told apart by pg_trigger_depth()); only the extension marks a
--   definition failed, and a restored failed row is re-validated;
-- * built-in view sets and DDL views share one namespace (checked by both
--   tables' triggers), built-in names follow the name rule;
-- * mm_drop_view(name, ...) takes a micromegas.view_set_name (text, never
--   truncated like "name") and applies the name rule (42622 past 63 bytes);
-- * updated_by_role records the Postgres role of every write;
-- * micromegas_reader reads the catalog and micromegas_admin, its member,
--   changes it; internal functions are callable by neither (the functions
--   and triggers that need them are SECURITY DEFINER);
-- * the catalog version is dumped, and a restore continues above it;
-- * the extension is recorded in schema micromegas, not public.
--
-- The rule for every upgrade script: the objects an upgraded database ends
-- up with must be exactly those of a fresh CREATE EXTENSION of the new
-- version (scripts/upgrade_test.sh compares the two catalogs), and every row
-- of every table is kept. Never drop or rename a Rust function a released
-- install script names (AS 'MODULE_PATHNAME', '..._wrapper'): the old
-- version's script must still install against the new library.

-- The extension moves from schema public (where 0.1.0 and 0.1.1 recorded
-- it, as their control file named none) to micromegas, as a fresh install
-- of this version records it (control file: schema = micromegas). A schema
-- that contains its extension cannot also be a member of it, so the schema
-- stops being one first; DROP SCHEMA public CASCADE then leaves the
-- extension alone.
ALTER EXTENSION micromegas_views DROP SCHEMA micromegas;
UPDATE pg_catalog.pg_depend d
   SET refobjid = 'micromegas'::regnamespace
 WHERE d.classid = 'pg_catalog.pg_extension'::regclass
   AND d.objid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'micromegas_views')
   AND d.refclassid = 'pg_catalog.pg_namespace'::regclass
   AND d.deptype = 'n';
UPDATE pg_catalog.pg_extension SET extnamespace = 'micromegas'::regnamespace
 WHERE extname = 'micromegas_views';

-- New Rust functions (internal: callable by neither role).
CREATE  FUNCTION micromegas."_mm_check_name"(
	"name" TEXT, /* & str */
	"usage" TEXT /* & str */
) RETURNS bool /* bool */
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'check_name_sql_wrapper';

CREATE  FUNCTION micromegas."_mm_creating_extension"() RETURNS bool /* bool */
STRICT STABLE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'creating_extension_wrapper';

REVOKE EXECUTE ON FUNCTION micromegas._mm_check_name(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION micromegas._mm_creating_extension() FROM PUBLIC;

-- The two roles: micromegas_reader reads the catalog (the daemon, a
-- FlightSQL replica that only loads it), micromegas_admin (a member of the
-- reader) changes it. Roles belong to the cluster, not to a database, so
-- they are created only when missing and DROP EXTENSION leaves them. A role
-- that already exists and can log in or is a superuser is reported: every
-- member of these roles gets their privileges.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT rolname, rolcanlogin, rolsuper FROM pg_catalog.pg_roles
            WHERE rolname IN ('micromegas_admin', 'micromegas_reader') AND (rolcanlogin OR rolsuper) LOOP
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
  IF NOT pg_catalog.pg_has_role('micromegas_admin', 'micromegas_reader', 'MEMBER') THEN
    GRANT micromegas_reader TO micromegas_admin;
  END IF;
END
$$;

ALTER TABLE micromegas.lakehouse_view_set_definitions ADD COLUMN updated_by_role text;

-- A restore loads the dumped version into the freshly created row: the
-- restored catalog starts above it (and above whatever the restore itself
-- counted), so a service that saw the dumped catalog sees the restored one
-- as newer.
CREATE FUNCTION micromegas._mm_catalog_state_restore() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  UPDATE micromegas.catalog_state s SET version = greatest(s.version, NEW.version) + 1;
  RETURN NULL;
END
$$;
CREATE TRIGGER catalog_state_restore
  BEFORE INSERT ON micromegas.catalog_state
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_catalog_state_restore();
REVOKE EXECUTE ON FUNCTION micromegas._mm_catalog_state_restore() FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('micromegas.catalog_state', '');

-- True only while this extension's own CREATE or ALTER EXTENSION script
-- runs (Postgres' creating_extension): no setting can make it true.
CREATE OR REPLACE FUNCTION micromegas._mm_installing() RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN micromegas._mm_creating_extension();
END
$$;

-- Plans and checks a definition (jsonb, as _mm_definition_from_row returns
-- it) against a snapshot of the built-in and DDL view sets whose names occur
-- as words in its queries (a superset of what they read, found with the
-- primary keys), as they are in the table now. Writes nothing.
CREATE OR REPLACE FUNCTION micromegas._mm_check(definition jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  words text[] := ARRAY(
    SELECT DISTINCT w FROM regexp_split_to_table(lower(concat_ws(' ', definition->>'extract_query',
             definition->>'count_src_query', definition->>'merge_partitions_query')), '[^a-z0-9_]+') AS w
     WHERE w <> '');
  snapshot jsonb;
BEGIN
  SELECT coalesce(jsonb_agg(e), '[]'::jsonb) INTO snapshot FROM (
    SELECT b.view_set_name AS name, b.schema_ipc, b.update_group, b.kind, NULL::text AS load_error
      FROM micromegas.builtin_view_sets b
     WHERE b.view_set_name = ANY (words)
    UNION ALL
    SELECT d.view_set_name, d.schema_ipc, d.update_group, 'materialized',
           CASE WHEN d.load_status = 'failed' THEN coalesce(d.load_error, 'failed to load') END
      FROM micromegas.lakehouse_view_set_definitions d
     WHERE d.view_set_name = ANY (words) AND d.view_set_name <> (definition->>'name')
  ) e;
  RETURN micromegas._mm_validate(definition, snapshot);
END
$$;

-- Re-checks every definition that reads `source` after `source` changed
-- (schema or group). A dependent that still validates but whose schema moved
-- (types or nullability) is rewritten (which re-checks its own dependents in turn). One that no
-- longer validates either refuses the change (strict: a DDL view was
-- replaced) or is marked as failed to load (a built-in schema was registered:
-- the service's code is the truth), with every view reading it.
CREATE OR REPLACE FUNCTION micromegas._mm_recheck_dependents(source text, strict boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dep micromegas.lakehouse_view_set_definitions;
  checked jsonb;
  problem text;
BEGIN
  FOR dep IN SELECT * FROM micromegas.lakehouse_view_set_definitions d
              WHERE d.reads @> ARRAY[source] ORDER BY d.update_group, d.view_set_name LOOP
    BEGIN
      checked := micromegas._mm_check(micromegas._mm_row_definition(dep));
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
    IF checked->>'schema_ipc' IS DISTINCT FROM dep.schema_ipc OR dep.load_status <> 'ok' THEN
      -- A full rewrite re-validates it, stores the new schema, clears a
      -- failed mark, notifies, and re-checks its own dependents.
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = d.definition_sql
       WHERE d.view_set_name = dep.view_set_name;
    END IF;
  END LOOP;
END
$$;

-- BEFORE INSERT OR UPDATE: lock, derive, validate. Whatever path writes the
-- row, it is checked exactly like mm_create_view; the schema, hash and reads
-- are always derived, never taken from the writer. Writes made by this
-- extension's own triggers (pg_trigger_depth() > 1) are the only ones that
-- may mark a definition failed or keep the audit columns they were given.
CREATE OR REPLACE FUNCTION micromegas._mm_definitions_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  internal boolean := pg_catalog.pg_trigger_depth() > 1;
  columns_null boolean;
  statement_sql text;
  definition jsonb;
  checked jsonb;
  problem text;
BEGIN
  PERFORM micromegas._mm_next_version();
  IF TG_OP = 'INSERT' THEN
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
    -- Rows stay "as shipped" only through the extension's own scripts.
    NEW.shipped := OLD.shipped AND micromegas._mm_installing();
  END IF;
  IF TG_OP = 'UPDATE' AND internal AND NEW.load_status = 'failed' AND OLD.load_status IS DISTINCT FROM 'failed'
     AND (NEW.view_set_name, NEW.definition_sql, NEW.extract_query, NEW.count_src_query,
          NEW.merge_partitions_query, NEW.update_group, NEW.view_options)
         IS NOT DISTINCT FROM
         (OLD.view_set_name, OLD.definition_sql, OLD.extract_query, OLD.count_src_query,
          OLD.merge_partitions_query, OLD.update_group, OLD.view_options) THEN
    -- The extension marks a definition whose source changed as failed to load.
    RETURN NEW;
  END IF;
  IF TG_OP = 'UPDATE' AND NEW.view_set_name IS DISTINCT FROM OLD.view_set_name THEN
    RAISE EXCEPTION 'cannot rename materialized view "%"', OLD.view_set_name
      USING ERRCODE = 'feature_not_supported',
            HINT = 'Create the view under the new name, then drop the old one.';
  END IF;

  columns_null := NEW.extract_query IS NULL AND NEW.count_src_query IS NULL
    AND NEW.merge_partitions_query IS NULL AND NEW.update_group IS NULL AND NEW.view_options IS NULL;
  statement_sql := NEW.definition_sql;
  IF TG_OP = 'UPDATE' AND NOT columns_null
     AND NEW.definition_sql IS NOT DISTINCT FROM OLD.definition_sql
     AND (NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query, NEW.update_group, NEW.view_options)
         IS DISTINCT FROM
         (OLD.extract_query, OLD.count_src_query, OLD.merge_partitions_query, OLD.update_group, OLD.view_options) THEN
    -- Only the columns changed: the stored text is re-rendered from them.
    statement_sql := NULL;
  END IF;

  IF columns_null THEN
    definition := micromegas._mm_definition_from_row(NEW.view_set_name, statement_sql,
                                                     NULL, NULL, NULL, NULL, NULL);
  ELSE
    definition := micromegas._mm_definition_from_row(NEW.view_set_name, statement_sql,
      NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query, NEW.update_group, NEW.view_options);
  END IF;
  NEW.view_set_name := definition->>'name';
  IF EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = NEW.view_set_name) THEN
    RAISE EXCEPTION 'view set "%" already exists as a built-in view set', NEW.view_set_name
      USING ERRCODE = 'duplicate_object',
            DETAIL = 'Built-in view sets (registered by the services) and materialized views share one namespace.',
            HINT = 'Choose another name for the materialized view.';
  END IF;

  IF (TG_OP = 'INSERT' OR internal) AND NEW.load_status = 'failed' THEN
    -- A restored row that had failed to load is validated again: it loads
    -- if it plans now, and is kept as failed with the fresh reason if its
    -- queries still do not plan. Any other problem is refused as usual.
    BEGIN
      checked := micromegas._mm_check(definition);
    EXCEPTION WHEN invalid_object_definition THEN
      GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
    END;
  ELSE
    checked := micromegas._mm_check(definition);
  END IF;

  NEW.extract_query := definition->>'extract_query';
  NEW.count_src_query := definition->>'count_src_query';
  NEW.merge_partitions_query := definition->>'merge_partitions_query';
  NEW.update_group := (definition->>'update_group')::integer;
  NEW.view_options := definition->'options';
  NEW.definition_sql := coalesce(statement_sql, checked->>'definition_sql', NEW.definition_sql);
  IF problem IS NULL THEN
    NEW.schema_ipc := checked->>'schema_ipc';
    NEW.schema_json := checked->'schema_json';
    NEW.schema_hash := decode(checked->>'schema_hash', 'hex');
    NEW.reads := ARRAY(SELECT jsonb_array_elements_text(checked->'reads'));
    NEW.load_status := 'ok';
    NEW.load_error := NULL;
  ELSE
    -- No schema: the empty one. What it reads: the view sets its queries name.
    checked := micromegas._mm_normalize_schema('[]');
    NEW.schema_ipc := checked->>'schema_ipc';
    NEW.schema_json := checked->'schema_json';
    NEW.schema_hash := decode(checked->>'schema_hash', 'hex');
    NEW.reads := ARRAY(SELECT r FROM unnest(micromegas._mm_referenced_relations(definition)) r
                        WHERE r <> NEW.view_set_name
                          AND (EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = r)
                               OR EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = r))
                        ORDER BY r);
    NEW.load_status := 'failed';
    NEW.load_error := 'no longer valid when restored: ' || problem;
  END IF;
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

-- AFTER UPDATE of a definition whose schema or group moved: its dependents
-- must still validate, or the change is refused. After a failed definition
-- validates again, its dependents are re-checked and cleared too.
CREATE OR REPLACE FUNCTION micromegas._mm_definitions_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF OLD.load_status = 'failed' AND NEW.load_status = 'ok' THEN
    -- Re-validated after a failure: what reads it may load again.
    PERFORM micromegas._mm_recheck_dependents(NEW.view_set_name, false);
  ELSIF NEW.schema_ipc IS DISTINCT FROM OLD.schema_ipc OR NEW.update_group IS DISTINCT FROM OLD.update_group THEN
    PERFORM micromegas._mm_recheck_dependents(NEW.view_set_name, true);
  END IF;
  RETURN NULL;
END
$$;

-- AFTER a built-in view set's schema or group changed: the service's code is
-- the truth, so dependents that no longer validate are marked, not refused.
CREATE OR REPLACE FUNCTION micromegas._mm_builtins_after_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM micromegas._mm_recheck_dependents(OLD.view_set_name, false);
  ELSIF TG_OP = 'INSERT' OR NEW.schema_ipc IS DISTINCT FROM OLD.schema_ipc
     OR NEW.update_group IS DISTINCT FROM OLD.update_group OR NEW.kind IS DISTINCT FROM OLD.kind THEN
    PERFORM micromegas._mm_recheck_dependents(NEW.view_set_name, false);
  END IF;
  RETURN NULL;
END
$$;

-- Built-in view sets: the schema is normalized (JSON or IPC in, every form
-- stored), the catalog version moves, and services are told.
CREATE OR REPLACE FUNCTION micromegas._mm_builtins_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  normalized jsonb;
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
    normalized := micromegas._mm_normalize_schema(NEW.schema_ipc);
  ELSIF NEW.schema_json IS NOT NULL THEN
    normalized := micromegas._mm_normalize_schema(NEW.schema_json::text);
  ELSE
    RAISE EXCEPTION 'built-in view set "%" needs a schema', NEW.view_set_name
      USING ERRCODE = 'not_null_violation', HINT = 'Set schema_json or schema_ipc.';
  END IF;
  NEW.schema_ipc := normalized->>'schema_ipc';
  NEW.schema_json := normalized->'schema_json';
  NEW.schema_hash := decode(normalized->>'schema_hash', 'hex');
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

DROP FUNCTION micromegas._mm_restoring();

-- A service pushes its code's current schema for a built-in view set at
-- startup. The schema is base64 Arrow IPC or JSON.
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
  normalized jsonb := micromegas._mm_normalize_schema(schema);
BEGIN
  -- The name rules and the shared namespace are the table trigger's.
  PERFORM micromegas._mm_lock_catalog();
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
-- definition that reads a view set that does not exist, whose update_group
-- is not above the group of something it reads, or that loads while
-- something it reads failed to load. Always empty.
CREATE OR REPLACE FUNCTION micromegas.mm_catalog_violations()
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

DROP FUNCTION micromegas.mm_drop_view(name, boolean);
-- A view set name as a function parameter: text (never truncated like
-- "name"), as its own type so that a single text argument resolves to the
-- statement form of mm_drop_view below (text is the preferred string type).
CREATE DOMAIN micromegas.view_set_name AS text;

-- DROP MATERIALIZED VIEW by name, with the name rule CREATE applies.
CREATE FUNCTION micromegas.mm_drop_view(name micromegas.view_set_name, if_exists boolean DEFAULT false)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  target text := name::text;
BEGIN
  PERFORM micromegas._mm_check_name(target, 'reference');
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

REVOKE EXECUTE ON FUNCTION micromegas.mm_drop_view(micromegas.view_set_name, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION micromegas.mm_drop_view(micromegas.view_set_name, boolean) TO micromegas_admin;
COMMENT ON FUNCTION micromegas.mm_drop_view(micromegas.view_set_name, boolean) IS
  'Drop a view set definition by name';

-- DROP MATERIALIZED VIEW [IF EXISTS] <name>, or just a bare view name.
CREATE OR REPLACE FUNCTION micromegas.mm_drop_view(statement text)
RETURNS TABLE (view_set_name text, status text, version bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  parsed jsonb;
BEGIN
  IF statement ~ '^\s*[a-z_][a-z0-9_]*\s*;?\s*$' THEN
    RETURN QUERY SELECT * FROM micromegas.mm_drop_view(btrim(statement, E' \t\r\n;')::micromegas.view_set_name, false);
    RETURN;
  END IF;
  parsed := micromegas._mm_parse_statement(statement);
  IF parsed->>'kind' <> 'drop' THEN
    RAISE EXCEPTION 'mm_drop_view expects DROP MATERIALIZED VIEW, not CREATE'
      USING ERRCODE = 'syntax_error', HINT = 'Use micromegas.mm_create_view() to create a view.';
  END IF;
  RETURN QUERY SELECT * FROM micromegas.mm_drop_view((parsed->>'name')::micromegas.view_set_name, (parsed->>'if_exists')::boolean);
END
$$;

-- The functions that call internal ones run as the extension's owner.
ALTER FUNCTION micromegas.mm_create_view(text) SECURITY DEFINER;
ALTER FUNCTION micromegas.mm_create_view(text, text, text, text, integer, text, text, text, text, text, text, boolean) SECURITY DEFINER;
ALTER FUNCTION micromegas.mm_explain_view(text) SECURITY DEFINER;
ALTER FUNCTION micromegas._mm_definitions_before_delete() SECURITY DEFINER;
ALTER FUNCTION micromegas._mm_track_removed() SECURITY DEFINER;
ALTER FUNCTION micromegas._mm_apply_removed() SECURITY DEFINER;
ALTER FUNCTION micromegas._mm_notify() SECURITY DEFINER;
ALTER FUNCTION micromegas._mm_builtins_before_delete() SECURITY DEFINER;

-- Privileges: internal functions for neither role; the reader's reads.
REVOKE SELECT ON micromegas.catalog_state FROM micromegas_admin;
GRANT SELECT ON micromegas.lakehouse_view_set_definitions, micromegas.builtin_view_sets,
                micromegas.catalog_state TO micromegas_reader;
DO $$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'micromegas'::regnamespace AND p.proname LIKE '\_mm\_%' LOOP
    EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM micromegas_admin', f);
  END LOOP;
END
$$;
GRANT EXECUTE ON FUNCTION micromegas.list_view_set_definitions(), micromegas.list_view_sets(),
  micromegas.mm_view_set_snapshot(), micromegas.mm_materialization_order(),
  micromegas.list_view_dependencies(), micromegas.mm_catalog_version(),
  micromegas.mm_explain_view(text), micromegas.mm_catalog_violations() TO micromegas_reader;

-- The shipped built-in view sets as this version ships them. Rows a service
-- registered (not shipped) are the services' truth and stay. The trigger
-- re-validates every definition reading a changed one.
UPDATE micromegas.builtin_view_sets b
   SET schema_json = s->'schema'
  FROM jsonb_array_elements(micromegas._mm_shipped_builtins()) AS s
 WHERE b.shipped AND b.view_set_name = s->>'view_set_name';
