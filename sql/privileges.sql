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
-- for docs/operations.md.

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
COMMENT ON FUNCTION micromegas._mm_apply_privileges() IS
  'Revokes every privilege on the schema''s objects and grants again what mm_privilege_matrix() declares; refuses an object the matrix does not name';

COMMENT ON FUNCTION micromegas.mm_privilege_matrix() IS
  'What each role is granted on each function and table of the extension (inherited rights not repeated); the grants are made from it';
