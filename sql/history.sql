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
CREATE INDEX lakehouse_view_set_definition_history_name
  ON micromegas.lakehouse_view_set_definition_history (view_set_name, version);
CREATE INDEX lakehouse_view_set_definition_history_changed
  ON micromegas.lakehouse_view_set_definition_history (changed_at);
COMMENT ON TABLE micromegas.lakehouse_view_set_definition_history IS
  'Every committed version of every materialized view definition (written by a trigger)';

-- What kind of write an INSERT or UPDATE of a definition is: the extension's
-- own (install; a re-check of a dependent, or a dumped row loaded over a
-- shipped one), a restore, a CREATE OR REPLACE turned into an UPDATE, or a
-- caller's create or replace. Told by the intent the extension's own code
-- pushed (src/pg/trust.rs), never by a setting or the trigger depth. The
-- history records it; with_no_data = false acts on creates and replaces only.
CREATE FUNCTION micromegas._mm_write_kind(tg_op text, view_set_name text) RETURNS text
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
COMMENT ON FUNCTION micromegas._mm_write_kind(text,text) IS
  'The history operation of a write (create, replace, recheck, restore, drop) from the trigger and the intent';

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
COMMENT ON FUNCTION micromegas._mm_definitions_history() IS
  'Trigger: records every change of a definition in lakehouse_view_set_definition_history';
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
COMMENT ON FUNCTION micromegas.mm_view_history(text) IS
  'Every version of a view: operation, catalog version, who and when';

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
COMMENT ON FUNCTION micromegas._mm_history_version(text,bigint) IS
  'One version of a definition from the history; raises when the view never had it';

-- A view as it is (version NULL) or as it was at a version of its history.
-- Row types, so that the arguments keep their names (name, version).
CREATE TYPE micromegas.view_version AS (
  view_set_name text, version bigint, operation text, current boolean, definition_sql text,
  update_group integer, schema text, schema_hash bytea, load_status text, load_error text,
  updated_by text, changed_at timestamptz);
COMMENT ON TYPE micromegas.view_version IS
  'One version of a definition as mm_describe_view returns it';
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
CREATE TYPE micromegas.view_change AS (
  view_set_name text, status text, version bigint, incompatible_partitions bigint);
COMMENT ON TYPE micromegas.view_change IS
  'What a definition change returned: the view, its status, the catalog version, incompatible partitions';
COMMENT ON COLUMN micromegas.view_change.view_set_name IS 'The view';
COMMENT ON COLUMN micromegas.view_change.status IS 'What happened';
COMMENT ON COLUMN micromegas.view_change.version IS 'The catalog version';
COMMENT ON COLUMN micromegas.view_change.incompatible_partitions IS 'Its partitions the new schema hash makes incompatible';
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
COMMENT ON FUNCTION micromegas.mm_describe_view(text, bigint) IS
  'A view as it is, or as it was at a version, with its schema';

-- Puts a view back as it was at a version: written like a CREATE OR
-- REPLACE (or a CREATE, when the view was dropped), so validated, its
-- dependents re-checked, announced, and recorded as a 'restore'.
CREATE FUNCTION micromegas.mm_restore_view(name text, version bigint)
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

-- Forgets versions older than the interval, except each view's latest.
CREATE FUNCTION micromegas.mm_prune_view_history(older_than interval)
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
COMMENT ON FUNCTION micromegas.mm_prune_view_history(interval) IS
  'Forget versions older than the interval (each view keeps its latest)';
