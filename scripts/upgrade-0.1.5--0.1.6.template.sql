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

--@rust _mm_check_definition_with

-- The prepared row carries the findings.
DROP FUNCTION micromegas._mm_prepare_definition(text, text, text, text, text, integer, jsonb, boolean);
--@rust _mm_prepare_definition

--@rust _mm_author_checks

ALTER TABLE micromegas.lakehouse_view_set_definitions ADD COLUMN warnings jsonb NOT NULL DEFAULT '[]';
--@verbatim schema.sql:author_check_requirements
SELECT pg_catalog.pg_extension_config_dump('micromegas.author_check_requirements', '');

--@new CREATE FUNCTION micromegas._mm_requirement_binds(

--@new CREATE FUNCTION micromegas._mm_author_check_level(

--@new CREATE FUNCTION micromegas._mm_report_author_findings(

--@new CREATE FUNCTION micromegas.mm_require_author_checks(
COMMENT ON FUNCTION micromegas.mm_require_author_checks(text, text) IS
  'Require the author checks at warn or error (off lifts it) for every role of the database or for the members of a role';
COMMENT ON TABLE micromegas.author_check_requirements IS
  'Author-check levels an admin required (applies_to: * for every role, or a role whose members it binds)';

DROP FUNCTION micromegas.list_view_set_definitions();
--@new CREATE FUNCTION micromegas.list_view_set_definitions()
COMMENT ON FUNCTION micromegas.list_view_set_definitions() IS
  'Every stored definition, including those that failed to load';

--@rust _mm_intent_held

--@new CREATE FUNCTION micromegas._mm_require_writable(
COMMENT ON FUNCTION micromegas._mm_require_writable(text) IS
  'Refuses a write on a hot standby (25006, naming the operation); every writing function calls it first';

--@new CREATE FUNCTION micromegas._mm_raise_broken_dependent(

--@new CREATE FUNCTION micromegas._mm_name_taken(

--@replace CREATE FUNCTION micromegas._mm_recheck_dependents(

--@replace CREATE FUNCTION micromegas._mm_definitions_after_update()

--@replace CREATE FUNCTION micromegas._mm_definitions_before_write()

--@new CREATE FUNCTION micromegas._mm_report_incompatible(

--@replace CREATE FUNCTION micromegas._mm_definitions_report_incompatible()

--@new CREATE FUNCTION micromegas._mm_explain_view(

--@new CREATE FUNCTION micromegas._mm_dry_run_read_only(

--@new CREATE FUNCTION micromegas._mm_dry_write(

--@new CREATE FUNCTION micromegas._mm_recheck_read_only(

DROP FUNCTION micromegas.mm_explain_view(text);
--@new CREATE FUNCTION micromegas.mm_explain_view(

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
--@replace CREATE FUNCTION micromegas._mm_lock_catalog()
--@replace CREATE FUNCTION micromegas._mm_next_version()
--@replace CREATE FUNCTION micromegas.mm_catalog_version()
--@replace CREATE FUNCTION micromegas._mm_actor()
--@replace CREATE FUNCTION micromegas._mm_incompatible_count(

--@replace CREATE FUNCTION micromegas.mm_create_view(statement text)

--@replace CREATE FUNCTION micromegas.mm_create_view(\n  name text,

--@replace CREATE FUNCTION micromegas.mm_drop_view(name

--@replace CREATE FUNCTION micromegas.mm_drop_view(statement text)

--@replace CREATE FUNCTION micromegas.mm_restore_view(

--@replace CREATE FUNCTION micromegas.mm_prune_view_history(

--@replace CREATE FUNCTION micromegas.mm_register_builtin_view_set(

--@replace CREATE FUNCTION micromegas.retire_partitions(

--@replace CREATE FUNCTION micromegas.retire_partition_by_metadata(

--@replace CREATE FUNCTION micromegas.retire_partition_by_file(

--@replace CREATE FUNCTION micromegas.retire_incompatible_partitions(

--@replace CREATE FUNCTION micromegas.mm_write_partition(

--@replace CREATE FUNCTION micromegas.mm_replace_partitions(

--@replace CREATE FUNCTION micromegas.mm_expired_files(

--@replace CREATE FUNCTION micromegas.mm_refresh_view(

--@replace CREATE FUNCTION micromegas.regenerate_partitions(

--@replace CREATE FUNCTION micromegas.mm_cancel_job(

--@replace CREATE FUNCTION micromegas.mm_claim_job(

--@replace CREATE FUNCTION micromegas.mm_claim_jobs(

-- A claim and a heartbeat no longer notify (a WHEN clause keeps the
-- trigger function from being called at all).
DROP TRIGGER jobs_notify ON micromegas.jobs;
--@replace CREATE FUNCTION micromegas._mm_jobs_notify()
--@verbatim jobs.sql:jobs_notify_triggers

--@replace CREATE FUNCTION micromegas.mm_heartbeat_job(

--@replace CREATE FUNCTION micromegas.mm_finish_job(

--@replace CREATE FUNCTION micromegas.mm_record_query_denial_hits(

--@replace CREATE FUNCTION micromegas.deny_queries(

--@replace CREATE FUNCTION micromegas.remove_query_denial(

--@replace CREATE FUNCTION micromegas.mm_grant_audience(

--@replace CREATE FUNCTION micromegas.mm_revoke_audience(

-- Every object of the extension carries a COMMENT (\df+, \d+, \dT+).
--@verbatim api.sql:object_comments

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
--@replace CREATE FUNCTION micromegas.mm_privilege_matrix()

SELECT micromegas._mm_apply_privileges();
