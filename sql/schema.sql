-- micromegas_views: the schema, the role, the tables and the triggers that
-- guard them. Runs first in CREATE EXTENSION (pgrx "bootstrap").
--
-- Every function pins search_path and qualifies every name, so nothing in
-- public or pg_temp can stand in for an object of this extension. Trigger
-- functions are SECURITY DEFINER: they call the internal functions (version,
-- lock, validation) that neither role may call directly; who may write is
-- decided by the table privileges checked before any trigger runs.

-- The schema is the control file's (schema = micromegas): Postgres creates
-- it before this script when it does not exist, and records the extension
-- in it, so DROP SCHEMA public CASCADE never reaches the catalog.
COMMENT ON SCHEMA micromegas IS 'micromegas_views: materialized view set definitions';

-- <roles>
-- The roles: micromegas_reader reads the catalog (dashboards, a FlightSQL
-- replica that only loads it), micromegas_service (a member of the reader:
-- the daemon and the ingestion and query services) writes partitions, claims
-- files and runs jobs, micromegas_admin (a member of the reader, not of the
-- service) defines views, retires, grants and denies. What each may do is
-- the privilege matrix (sql/privileges.sql). Roles belong to the cluster,
-- not to a database, so they are created only when missing and DROP
-- EXTENSION leaves them.
--
-- A role of one of these names that already exists could have been made by
-- someone else to collect the privileges this extension is about to grant
-- (a CREATEROLE user who pre-created micromegas_admin and is a member of it,
-- or holds ADMIN OPTION on it). An existing role is refused unless the
-- superuser installing says otherwise when it has LOGIN, SUPERUSER,
-- CREATEROLE, a role holding ADMIN OPTION on it, objects or default
-- privileges, or — unless it carries the extension's mark — members beyond
-- the extension's own admin/service -> reader. The mark is the role setting
-- micromegas_views.extension_role = <its own name>, which CREATE EXTENSION
-- writes on the three roles (ALTER ROLE ... SET). Only a superuser can
-- write it: the setting is superuser-only once the library is loaded, and a
-- role setting of a parameter Postgres does not know yet is refused to
-- every other role. pg_dumpall --roles-only carries it, so a restore into a
-- new cluster, or a CREATE EXTENSION in a second database, finds the roles
-- marked, and their members are the ones granted since the first install. The library is loaded
-- first so that the settings below are the superuser-only ones, not
-- placeholders any role could have set for the database.
LOAD 'MODULE_PATHNAME';
DO $$
DECLARE
  r record;
  problems text;
  found text[] := '{}';
BEGIN
  FOR r IN SELECT a.oid, a.rolname, a.rolcanlogin, a.rolsuper, a.rolcreaterole,
                  EXISTS (SELECT 1 FROM pg_catalog.pg_db_role_setting s
                           WHERE s.setdatabase = 0 AND s.setrole = a.oid
                             AND pg_catalog.format('micromegas_views.extension_role=%s', a.rolname) = ANY (s.setconfig)) AS marked
             FROM pg_catalog.pg_roles a
            WHERE a.rolname IN ('micromegas_admin', 'micromegas_reader', 'micromegas_service')
            ORDER BY a.rolname LOOP
    problems := concat_ws('; ',
      CASE WHEN r.rolsuper THEN 'it is a superuser' END,
      CASE WHEN r.rolcreaterole THEN 'it has CREATEROLE' END,
      CASE WHEN r.rolcanlogin THEN 'it can log in' END,
      -- the members of a role the extension made were granted it since
      (SELECT 'its members are ' || string_agg(pg_catalog.quote_ident(m.rolname), ', ' ORDER BY m.rolname)
         FROM pg_catalog.pg_auth_members x JOIN pg_catalog.pg_roles m ON m.oid = x.member
        WHERE x.roleid = r.oid AND NOT r.marked
          AND NOT (r.rolname = 'micromegas_reader' AND m.rolname IN ('micromegas_admin', 'micromegas_service')
                   AND NOT x.admin_option)),
      (SELECT 'ADMIN OPTION on it is held by ' || string_agg(pg_catalog.quote_ident(m.rolname), ', ' ORDER BY m.rolname)
         FROM pg_catalog.pg_auth_members x JOIN pg_catalog.pg_roles m ON m.oid = x.member
        WHERE x.roleid = r.oid AND x.admin_option),
      -- objects of this database it owns or holds privileges on (a SECURITY
      -- DEFINER function it owns would run with the privileges granted to
      -- it), default privileges
      (SELECT 'it owns or has privileges on ' || count(*) || ' object(s)'
         FROM pg_catalog.pg_shdepend d
        WHERE d.refclassid = 'pg_catalog.pg_authid'::regclass AND d.refobjid = r.oid AND d.deptype IN ('o', 'a')
          AND d.dbid = (SELECT db.oid FROM pg_catalog.pg_database db WHERE db.datname = pg_catalog.current_database())
       HAVING count(*) > 0),
      (SELECT 'it has default privileges set' FROM pg_catalog.pg_default_acl a
        WHERE a.defaclrole = r.oid LIMIT 1));
    CONTINUE WHEN problems = '';
    found := found || pg_catalog.format('role "%s" already exists: %s', r.rolname, problems);
  END LOOP;
  IF found <> '{}' THEN
    IF pg_catalog.current_setting('micromegas_views.adopt_existing_roles') = 'on' THEN
      RAISE WARNING '%; adopted as they are', pg_catalog.array_to_string(found, '; ');
    ELSE
      RAISE EXCEPTION '%', pg_catalog.array_to_string(found, '; ')
        USING ERRCODE = 'duplicate_object',
              DETAIL = 'Every member of these roles would get the privileges micromegas_views grants them.',
              HINT = 'Roles micromegas_views made carry its mark (the role setting micromegas_views.extension_role) '
                     'and are used as they are; these do not. If their members are the ones you expect, run '
                     'SET micromegas_views.adopt_existing_roles = on (superuser only) and CREATE EXTENSION again; '
                     'otherwise drop or rename the roles first.';
    END IF;
  END IF;
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
-- <role marks>
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
-- </role marks>
-- </roles>
COMMENT ON ROLE micromegas_reader IS
  'micromegas_views: reads the catalog (definitions, order, partitions, history, jobs); for dashboards and replicas';
COMMENT ON ROLE micromegas_service IS
  'micromegas_views: the services (writes partitions, runs jobs, loads the deny list and grants); a member of micromegas_reader';
COMMENT ON ROLE micromegas_admin IS
  'micromegas_views: defines view sets, retires partitions, manages the deny list and grants; a member of micromegas_reader';

-- The catalog version: one row, bumped by every committed change. Its row
-- lock is the catalog lock every write path takes before reading what it checks.
CREATE TABLE micromegas.catalog_state (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  version bigint NOT NULL
);
COMMENT ON TABLE micromegas.catalog_state IS
  'The catalog version (one row): strictly increases with every committed change to the definitions; its row is the catalog lock';
COMMENT ON COLUMN micromegas.catalog_state.singleton IS 'Always true: the table has one row';
COMMENT ON COLUMN micromegas.catalog_state.version IS 'The catalog version';
INSERT INTO micromegas.catalog_state VALUES (true, 0);

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
COMMENT ON FUNCTION micromegas._mm_catalog_state_restore() IS
  'Trigger: on restore, continues the catalog version above the dumped one';
CREATE TRIGGER catalog_state_restore
  BEFORE INSERT ON micromegas.catalog_state
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_catalog_state_restore();

-- The code-defined view sets the services own: what a definition may read.
CREATE TABLE micromegas.builtin_view_sets (
  view_set_name text PRIMARY KEY,
  update_group integer,
  kind text NOT NULL CHECK (kind IN ('raw', 'materialized', 'instance_only')),
  has_view_maker boolean NOT NULL DEFAULT false,
  global_instance_available boolean NOT NULL DEFAULT true,
  schema_ipc text NOT NULL,
  schema_json jsonb NOT NULL,
  schema_hash bytea NOT NULL,
  registered_at timestamptz NOT NULL,
  registered_by text NOT NULL,
  -- true while the row is exactly as CREATE EXTENSION shipped it; such rows
  -- are not dumped (CREATE EXTENSION recreates them)
  shipped boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE micromegas.builtin_view_sets IS
  'The view sets defined in the services'' code, with the schema a service registered: what definitions may read';
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

-- The DDL-defined view sets. The column contract the services read.
CREATE TABLE micromegas.lakehouse_view_set_definitions (
  view_set_name text PRIMARY KEY,
  definition_sql text NOT NULL,
  extract_query text NOT NULL,
  count_src_query text NOT NULL,
  merge_partitions_query text NOT NULL,
  update_group integer NOT NULL,
  view_options jsonb NOT NULL,
  schema_ipc text NOT NULL,
  schema_json jsonb NOT NULL,
  schema_hash bytea NOT NULL,
  reads text[] NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  updated_by text,
  load_status text NOT NULL DEFAULT 'ok' CHECK (load_status IN ('ok', 'failed')),
  load_error text,
  shipped boolean NOT NULL DEFAULT false,
  -- The Postgres role (session_user) that wrote the row; updated_by is the
  -- claim a service makes for its end user.
  updated_by_role text,
  -- The author obligations the definition does not meet (core/src/author.rs):
  -- [{check, sqlstate, message, hint}], derived like the schema.
  warnings jsonb NOT NULL DEFAULT '[]',
  -- What the validation read besides the definition (the sources' stored
  -- rows, the plan-node limit, the code's version), hashed: a write of the
  -- same definition against the same sources takes the derived columns
  -- above instead of planning again. Always derived; NULL when failed (0.1.9).
  sources_hash bytea
);
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
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.sources_hash IS
  'SHA-256 of what the validation read (sources as stored, plan-node limit, code version); the same definition written against the same sources reuses the derived columns. Always derived; NULL when failed';
CREATE INDEX lakehouse_view_set_definitions_reads
  ON micromegas.lakehouse_view_set_definitions USING gin (reads) WITH (fastupdate = off);

COMMENT ON TABLE micromegas.lakehouse_view_set_definitions IS
  'One row per DDL-defined view set; every write is validated and announced by triggers';

-- Shipped rows an admin deleted, so that a restore (which runs CREATE
-- EXTENSION, then loads the dumped rows) does not bring them back.
CREATE TABLE micromegas.removed_shipped_rows (
  table_name text NOT NULL CHECK (table_name IN ('builtin_view_sets', 'lakehouse_view_set_definitions')),
  view_set_name text NOT NULL,
  PRIMARY KEY (table_name, view_set_name)
);
COMMENT ON TABLE micromegas.removed_shipped_rows IS
  'Shipped rows an admin removed, so that a restore (which runs CREATE EXTENSION first) removes them again';
COMMENT ON COLUMN micromegas.removed_shipped_rows.table_name IS 'builtin_view_sets or lakehouse_view_set_definitions';
COMMENT ON COLUMN micromegas.removed_shipped_rows.view_set_name IS 'The removed row''s name';

-- Every function that writes calls this first: on a hot standby (a server
-- in recovery) the catalog is read-only, and the write is refused here with
-- one message naming the operation, before any statement of it runs
-- (otherwise whichever statement came first would fail with Postgres' own
-- words, e.g. "cannot execute SELECT FOR UPDATE in a read-only
-- transaction"). Returns true so that a DECLARE can call it.
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

-- The catalog lock and version. SECURITY DEFINER: admins may not write
-- catalog_state themselves, so the version can only move forward by one.
-- PL/pgSQL, not SQL, here and for the other small helpers on the write
-- path: Postgres (before 18) parses and plans a SQL function's body on
-- every call, PL/pgSQL keeps its plans (a CREATE + DROP is ~10% faster).
CREATE FUNCTION micromegas._mm_lock_catalog() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v bigint;
BEGIN
  SELECT s.version INTO v FROM micromegas.catalog_state s FOR UPDATE;
  RETURN v;
END
$$;
COMMENT ON FUNCTION micromegas._mm_lock_catalog() IS
  'Takes the catalog lock (the catalog_state row) and returns the catalog version';

CREATE FUNCTION micromegas._mm_next_version() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v bigint;
BEGIN
  UPDATE micromegas.catalog_state SET version = version + 1 RETURNING version INTO v;
  RETURN v;
END
$$;
COMMENT ON FUNCTION micromegas._mm_next_version() IS
  'Increments the catalog version and returns it';

CREATE FUNCTION micromegas.mm_catalog_version() RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (SELECT s.version FROM micromegas.catalog_state s);
END
$$;
COMMENT ON FUNCTION micromegas.mm_catalog_version() IS
  'Strictly increases with every committed change to the definitions, drops included';

-- True only while this extension's own CREATE or ALTER EXTENSION script
-- runs (Postgres' creating_extension): no setting can make it true.
CREATE FUNCTION micromegas._mm_installing() RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN micromegas._mm_creating_extension();
END
$$;
COMMENT ON FUNCTION micromegas._mm_installing() IS
  'True only while this extension''s own script runs (_mm_creating_extension)';

CREATE FUNCTION micromegas._mm_actor() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  actor text := coalesce(nullif(current_setting('micromegas_views.actor', true), ''), session_user::text);
BEGIN
  -- Every table that records an actor holds 255 characters.
  IF length(actor) > 255 THEN
    RAISE EXCEPTION 'micromegas_views.actor is too long: % characters, the limit is 255', length(actor)
      USING ERRCODE = 'string_data_right_truncation',
            HINT = 'Set it to the name of the user the service acts for.';
  END IF;
  RETURN actor;
END
$$;
COMMENT ON FUNCTION micromegas._mm_actor() IS
  'The actor of a write: micromegas_views.actor when a service passes its user''s name, else session_user';

-- The refusal of a strict re-check (_mm_recheck).
CREATE FUNCTION micromegas._mm_raise_broken_dependent(source text, dependent text, problem text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION 'cannot change materialized view "%" because materialized view "%" depends on it', source, dependent
    USING ERRCODE = 'dependent_objects_still_exist',
          DETAIL = format('materialized view "%s" would no longer be valid: %s', dependent, problem),
          HINT = format('Keep what "%s" reads unchanged, or replace or drop it first.', dependent);
END
$$;
COMMENT ON FUNCTION micromegas._mm_raise_broken_dependent(text,text,text) IS
  'Raises 2BP01: a change would break a definition that reads the changed one';

-- What an admin requires of the author checks (mm_require_author_checks):
-- for every role of the database ('*') or for the members of a role. A
-- session's micromegas_views.author_checks can be stricter, never laxer.
-- <author_check_requirements>
CREATE TABLE micromegas.author_check_requirements (
  applies_to text PRIMARY KEY,
  level text NOT NULL CHECK (level IN ('warn', 'error')),
  set_at timestamptz NOT NULL,
  set_by text NOT NULL
);
COMMENT ON TABLE micromegas.author_check_requirements IS
  'Author-check levels an admin required (applies_to: * for every role, or a role whose members it binds)';
COMMENT ON COLUMN micromegas.author_check_requirements.applies_to IS '* for every role of the database, or a role whose members (and itself) it binds';
COMMENT ON COLUMN micromegas.author_check_requirements.level IS 'The least strict author-check level those sessions may have: warn or error';
COMMENT ON COLUMN micromegas.author_check_requirements.set_at IS 'When it was last set';
COMMENT ON COLUMN micromegas.author_check_requirements.set_by IS 'The actor who set it';
-- </author_check_requirements>

-- Whether a requirement binds this session: one for everyone, or for a
-- role the session's user or its current role (after SET ROLE) is, or is a
-- granted member of — switching roles does not shed a requirement.
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
COMMENT ON FUNCTION micromegas._mm_requirement_binds(text) IS
  'Whether an author-check requirement binds this session (* or a role its user or current role was granted)';

-- The author-check level in force for this write: the stricter of the
-- session's setting and every requirement that binds it, ranked by their
-- order in the library (_mm_author_check_levels).
CREATE FUNCTION micromegas._mm_author_check_level() RETURNS text
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

-- The author obligations a definition misses, raised at the level in force
-- (_mm_author_check_level): a
-- WARNING per finding (SQLSTATE class 01, 01M01..01M03), or the first one
-- as an error (the same code in class 42), or nothing.
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
COMMENT ON FUNCTION micromegas._mm_report_author_findings(text,jsonb) IS
  'Raises a definition''s author-check findings at the level in force: WARNINGs (01M0x), an error (42M0x), or nothing';

-- Whether a definition named `name` replaces a stored one; refuses a name
-- a built-in view set has, and (when `creating`) a plain CREATE of an
-- existing view. The write path and the read-only dry run both ask it.
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
COMMENT ON FUNCTION micromegas._mm_name_taken(text,boolean,boolean) IS
  'Whether a definition replaces a stored one; refuses a built-in''s name and a plain CREATE of an existing view';

-- What a change of a definition row sets off, decided once for the write
-- and for the read-only dry run: the write's AFTER UPDATE trigger
-- (_mm_definitions_after_update) and the dry run (_mm_dry_run_read_only, and
-- _mm_recheck for each dependent it would rewrite) both call it with the row
-- before and after. A definition that loads again after it had failed
-- re-checks its dependents leniently; one whose schema or group moved,
-- strictly, except inside a lenient re-check (a built-in's registration:
-- the service's code is the truth) or while this extension's own script
-- runs (ALTER EXTENSION UPDATE re-validating the stored definitions: the new
-- version's inference is the truth), where a dependent that no longer
-- validates is marked failed, never the definition it reads. No caller can
-- set either: both are backend state only this library writes
-- (src/pg/trust.rs, _mm_installing). Then a NOTICE if the new schema hash
-- makes some of its partitions incompatible. With `dry`, nothing is
-- written: what the write would have written so far travels in the four
-- arrays (name, schema, group, load error: NULL when it loads), which every
-- step reads over the stored rows.
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

-- One row a dry run would have written, kept in its four arrays.
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
COMMENT ON FUNCTION micromegas._mm_dry_write(text, text, integer, text, text[], text[], integer[], text[]) IS
  'One row a read-only dry run would have written, kept in its arrays';

-- Re-checks every definition that reads `source` after `source` changed
-- (schema or group) or loads again, in (update_group, name) order as they
-- are when it starts. A dependent that still validates but whose schema
-- moved (types or nullability), or that had failed and validates again, is
-- rewritten (which re-checks its own dependents in turn, depth first; the
-- rewrite's validation is the one just made, remembered by the backend, not
-- a second planning). One that no longer validates either refuses the change
-- (strict: a DDL view was replaced) or is marked as failed to load (lenient:
-- a built-in schema was registered), with every view downstream of it that
-- loads. The write and the dry run (`dry`: the arrays of
-- _mm_definition_changed) take every decision here; the dry run only does
-- not write.
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

-- Whether a caller's INSERT is a superuser loading a dumped row (what
-- pg_restore does): it alone keeps the row's given audit columns and may
-- load a definition that had failed to load. A dumped row carries every
-- column, so one without its creation time is an ordinary write.
CREATE FUNCTION micromegas._mm_loading(given_created_at timestamptz) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN given_created_at IS NOT NULL AND micromegas._mm_caller_is_superuser();
END
$$;
COMMENT ON FUNCTION micromegas._mm_loading(timestamp with time zone) IS
  'Whether an INSERT is a superuser loading a dumped row (pg_restore): it keeps its audit columns';

-- Whether an INSERT into the deny list or the grants keeps the creation
-- columns it was given: the extension's own install, or a superuser loading
-- a dumped row that names its creator. Otherwise they are computed.
CREATE FUNCTION micromegas._mm_keeps_creation(given_created_at timestamptz, given_created_by text) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN micromegas._mm_installing()
      OR (nullif(btrim(given_created_by), '') IS NOT NULL AND micromegas._mm_loading(given_created_at));
END
$$;
COMMENT ON FUNCTION micromegas._mm_keeps_creation(timestamp with time zone,text) IS
  'Whether a write keeps its given creation columns (a superuser loading a dumped row) or they are computed';

-- BEFORE INSERT OR UPDATE: (plan ahead,) lock, derive, validate — one call
-- to _mm_prepare_definition. Whatever path writes the row, it is checked
-- exactly like mm_create_view; the schema, hash, reads, load status and
-- audit columns are always derived, never taken from the writer. An INSERT
-- of a view that exists is refused (42710), shipped or not, unless its
-- statement says CREATE OR REPLACE: then it becomes an UPDATE of that row.
-- The extension's own writes are told apart by the intent its code pushed
-- (src/pg/trust.rs), which no caller can set: only a re-check may mark a
-- definition failed or keep the audit columns, and only a superuser's
-- pg_restore load (_mm_loading) keeps the columns of a dumped row.
CREATE FUNCTION micromegas._mm_definitions_before_write() RETURNS trigger
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

-- BEFORE DELETE: lock, and refuse to break a definition that reads this one.
CREATE FUNCTION micromegas._mm_definitions_before_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dependents text;
BEGIN
  PERFORM micromegas._mm_next_version();
  SELECT string_agg(format('materialized view "%s" depends on materialized view "%s"',
                           d.view_set_name, OLD.view_set_name), E'\n' ORDER BY d.view_set_name)
    INTO dependents
    FROM micromegas.lakehouse_view_set_definitions d
   WHERE d.reads @> ARRAY[OLD.view_set_name];
  IF dependents IS NOT NULL THEN
    RAISE EXCEPTION 'cannot drop materialized view "%" because other objects depend on it', OLD.view_set_name
      USING ERRCODE = 'dependent_objects_still_exist',
            DETAIL = dependents,
            HINT = 'Drop the dependent materialized views first; there is no CASCADE.';
  END IF;
  RETURN OLD;
END
$$;
COMMENT ON FUNCTION micromegas._mm_definitions_before_delete() IS
  'Trigger: takes the catalog lock and refuses to drop a definition another one reads';

-- A deleted row that CREATE EXTENSION ships is remembered (and forgotten
-- again when a row of that name is written back).
CREATE FUNCTION micromegas._mm_remember_removed(table_name text, view_set_name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF (table_name = 'lakehouse_view_set_definitions' AND view_set_name = 'log_stats')
     OR (table_name = 'builtin_view_sets' AND EXISTS (
           SELECT 1 FROM jsonb_array_elements(micromegas._mm_shipped_builtins()) b
            WHERE b->>'view_set_name' = view_set_name)) THEN
    INSERT INTO micromegas.removed_shipped_rows VALUES (table_name, view_set_name) ON CONFLICT DO NOTHING;
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas._mm_remember_removed(text,text) IS
  'Records that a shipped row was removed, so a restore removes it again';

-- AFTER INSERT or DELETE of either table: keep removed_shipped_rows current.
CREATE FUNCTION micromegas._mm_track_removed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM micromegas._mm_remember_removed(TG_TABLE_NAME, OLD.view_set_name);
  ELSE
    DELETE FROM micromegas.removed_shipped_rows r
     WHERE r.table_name = TG_TABLE_NAME AND r.view_set_name = NEW.view_set_name;
  END IF;
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_track_removed() IS
  'Trigger: remembers a removed shipped row (see _mm_remember_removed)';

-- Loading a remembered removal (a restore) removes the freshly shipped row.
CREATE FUNCTION micromegas._mm_apply_removed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NEW.table_name = 'lakehouse_view_set_definitions' THEN
    DELETE FROM micromegas.lakehouse_view_set_definitions d
     WHERE d.view_set_name = NEW.view_set_name AND d.shipped;
  ELSE
    DELETE FROM micromegas.builtin_view_sets b
     WHERE b.view_set_name = NEW.view_set_name AND b.shipped;
  END IF;
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_apply_removed() IS
  'Trigger: applies removed_shipped_rows on restore (a shipped row the dump says was removed is deleted again)';

-- AFTER each committed row change of either table: one NOTIFY with a small
-- JSON payload. NOTIFY is transactional, so a rolled-back change sends nothing.
CREATE FUNCTION micromegas._mm_notify() RETURNS trigger
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
COMMENT ON FUNCTION micromegas._mm_notify() IS
  'Trigger: notifies micromegas_view_definitions of a change, with the catalog version';

-- AFTER UPDATE of a definition: what the change sets off
-- (_mm_definition_changed, which the dry run calls too).
CREATE FUNCTION micromegas._mm_definitions_after_update() RETURNS trigger
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

-- AFTER a built-in view set's schema or group changed: the service's code is
-- the truth, so dependents that no longer validate are marked, not refused.
CREATE FUNCTION micromegas._mm_builtins_after_write() RETURNS trigger
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

CREATE FUNCTION micromegas._mm_refuse_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION 'TRUNCATE is not allowed on %.%', TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'feature_not_supported',
          HINT = 'Use DELETE (for a view, mm_drop_view), so that each row''s checks run and services are notified.';
END
$$;
COMMENT ON FUNCTION micromegas._mm_refuse_truncate() IS
  'Trigger: refuses TRUNCATE of a catalog table (row triggers would not run)';

CREATE TRIGGER definitions_before_write
  BEFORE INSERT OR UPDATE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_before_write();
CREATE TRIGGER definitions_before_delete
  BEFORE DELETE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_before_delete();
CREATE TRIGGER definitions_notify
  AFTER INSERT OR UPDATE OR DELETE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_notify();
CREATE TRIGGER definitions_after_update
  AFTER UPDATE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_after_update();
CREATE TRIGGER definitions_track_removed_insert
  AFTER INSERT ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW WHEN (NEW.view_set_name = 'log_stats')
  EXECUTE FUNCTION micromegas._mm_track_removed();
CREATE TRIGGER definitions_track_removed_delete
  AFTER DELETE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW WHEN (OLD.view_set_name = 'log_stats')
  EXECUTE FUNCTION micromegas._mm_track_removed();
CREATE TRIGGER definitions_no_truncate
  BEFORE TRUNCATE ON micromegas.lakehouse_view_set_definitions
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- Built-in view sets: the schema is normalized (JSON or IPC in, every form
-- stored), the catalog version moves, and services are told.
CREATE FUNCTION micromegas._mm_builtins_before_write() RETURNS trigger
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
COMMENT ON FUNCTION micromegas._mm_builtins_before_write() IS
  'Trigger: validates a built-in view set''s schema and fills its stored forms and audit columns';

CREATE FUNCTION micromegas._mm_builtins_before_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM micromegas._mm_next_version();
  RETURN OLD;
END
$$;
COMMENT ON FUNCTION micromegas._mm_builtins_before_delete() IS
  'Trigger: refuses to delete a built-in view set a definition reads';

CREATE TRIGGER builtins_before_write
  BEFORE INSERT OR UPDATE ON micromegas.builtin_view_sets
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_builtins_before_write();
CREATE TRIGGER builtins_before_delete
  BEFORE DELETE ON micromegas.builtin_view_sets
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_builtins_before_delete();
CREATE TRIGGER builtins_notify
  AFTER INSERT OR UPDATE OR DELETE ON micromegas.builtin_view_sets
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_notify();
CREATE TRIGGER builtins_after_write
  AFTER INSERT OR UPDATE OR DELETE ON micromegas.builtin_view_sets
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_builtins_after_write();
CREATE TRIGGER builtins_track_removed
  AFTER INSERT OR DELETE ON micromegas.builtin_view_sets
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_track_removed();
CREATE TRIGGER removed_shipped_rows_apply
  AFTER INSERT ON micromegas.removed_shipped_rows
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_apply_removed();
CREATE TRIGGER builtins_no_truncate
  BEFORE TRUNCATE ON micromegas.builtin_view_sets
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();
