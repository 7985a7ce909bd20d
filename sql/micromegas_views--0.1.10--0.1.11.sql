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

CREATE OR REPLACE FUNCTION micromegas._mm_jobs_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_notify('micromegas_jobs', json_build_object(
    'op', CASE WHEN TG_OP = 'UPDATE' AND NEW.cancel_requested AND NOT OLD.cancel_requested
                 THEN 'cancel_requested' ELSE NEW.state END)::text);
  RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION micromegas.mm_explain_view(statement text)
RETURNS TABLE (view_set_name text, would_be text, schema text, schema_hash bytea, reads text[],
               dependents text[], materialization_position bigint, problems text[], warnings jsonb)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM micromegas._mm_explain_view(statement, true)
$$;
COMMENT ON FUNCTION micromegas.mm_explain_view(text) IS
  'Dry run of mm_create_view: every check, nothing written, no lock taken or waited for; the same answer on a hot standby';
COMMENT ON FUNCTION micromegas._mm_explain_view(text, boolean) IS
  'mm_explain_view by _mm_dry_run_read_only (read_only), or by a rolled-back write, its oracle in the tests';
