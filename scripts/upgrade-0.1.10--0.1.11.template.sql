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
-- * materialize_partitions (new; micromegas' name, regenerate_partitions'
--   privileges and buckets): one 'materialize' job per bucket, which the
--   daemon writes only where stale; both queue through _mm_queue_buckets.
-- * a write plans its definition before it takes the catalog lock
--   (_mm_plan_ahead, new): under the lock it takes that answer from memory
--   unless the catalog rows the definition reads moved meanwhile, so a long
--   validation no longer holds other writers. The re-check of the
--   definitions that read a replaced view, or a re-registered built-in
--   (_mm_plan_builtin_ahead, new), is planned ahead of the lock too, and
--   so is mm_restore_view.
-- * a job's row shows its progress (jobs.progress, new): a worker's
--   heartbeat may carry it (mm_heartbeat_job's third argument, new,
--   DEFAULT NULL: two-argument calls work as before); a claim clears it.
-- * mm_replace_partitions and mm_write_partition refuse a view set that
--   does not exist and hold its row until they commit (_mm_hold_view_set,
--   new): no partition is recorded for a view dropped while it was being
--   materialized.
-- * the re-check of the definitions reading a changed one is one routine
--   for the write and for the read-only dry run (_mm_recheck and
--   _mm_definition_changed, new; _mm_recheck_dependents and
--   _mm_recheck_read_only go): the dry run differs only in not writing.
-- * what a trigger reports to the function that ran its statement (the
--   view a replace replaced, the job a create queued, what a drop retired)
--   is backend memory (_mm_report, _mm_take_report, new), not settings
--   any role could write.
--@verbatim schema.sql:role marks

COMMENT ON TABLE micromegas.query_deny_list IS
  'Query deny list: a FlightSQL query whose context makes match_expr TRUE is rejected';
COMMENT ON TABLE micromegas.audience_grants IS
  'Audience grants: who may read or mint each audience';

--@replace CREATE FUNCTION micromegas._mm_jobs_notify(
--@replace CREATE FUNCTION micromegas.mm_explain_view(
COMMENT ON FUNCTION micromegas.mm_explain_view(text) IS
  'Dry run of mm_create_view: every check, nothing written, no lock taken or waited for; the same answer on a hot standby';
COMMENT ON FUNCTION micromegas._mm_explain_view(text, boolean) IS
  'mm_explain_view by _mm_dry_run_read_only (read_only), or by a rolled-back write, its oracle in the tests';

--@rust _mm_plan_ahead
--@rust _mm_plan_builtin_ahead
--@replace CREATE FUNCTION micromegas.mm_register_builtin_view_set(
--@replace CREATE FUNCTION micromegas.mm_create_view(\n  name text,
--@replace CREATE FUNCTION micromegas._mm_definitions_before_write(
--@replace CREATE FUNCTION micromegas.mm_restore_view(
--@replace CREATE FUNCTION micromegas.mm_privilege_matrix(
--@new CREATE FUNCTION micromegas._mm_queue_buckets(
--@replace CREATE FUNCTION micromegas.regenerate_partitions(
-- A running job's progress, reported with its heartbeats.
ALTER TABLE micromegas.jobs ADD COLUMN progress jsonb;
COMMENT ON COLUMN micromegas.jobs.progress IS 'What the running (or last) attempt reported with its heartbeats, a JSON object; NULL until it reports';
DROP FUNCTION micromegas.mm_heartbeat_job(uuid, uuid);
--@new CREATE FUNCTION micromegas.mm_heartbeat_job(
--@replace CREATE FUNCTION micromegas.mm_claim_jobs(
--@new CREATE FUNCTION micromegas._mm_snapshot_per_statement(
--@new CREATE FUNCTION micromegas._mm_hold_view_set(
--@replace CREATE FUNCTION micromegas.mm_expired_files(
--@replace CREATE FUNCTION micromegas.mm_write_partition(
--@replace CREATE FUNCTION micromegas.mm_replace_partitions(
--@new CREATE FUNCTION micromegas.materialize_partitions(
-- The re-check of dependents is one routine for the write and the dry run
-- (_mm_recheck, _mm_definition_changed): the AFTER UPDATE trigger reports
-- incompatible partitions itself, and the dry run's copies go.
DROP TRIGGER definitions_report_incompatible_update ON micromegas.lakehouse_view_set_definitions;
DROP FUNCTION micromegas._mm_recheck_dependents(text, boolean);
DROP FUNCTION micromegas._mm_recheck_read_only(text, boolean, text[], text[], integer[], text[]);
DROP FUNCTION micromegas._mm_recheck_definition(text, text, text, text, integer, jsonb);
--@new CREATE FUNCTION micromegas._mm_definition_changed(
--@replace CREATE FUNCTION micromegas._mm_dry_write(
--@new CREATE FUNCTION micromegas._mm_recheck(
--@replace CREATE FUNCTION micromegas._mm_definitions_after_update(
--@replace CREATE FUNCTION micromegas._mm_builtins_after_write(
--@replace CREATE FUNCTION micromegas._mm_definitions_report_incompatible(
--@replace CREATE FUNCTION micromegas._mm_dry_run_read_only(
--@comment _mm_recheck_definition_with
-- What a trigger tells the function that ran its statement travels in
-- backend memory (_mm_report, _mm_take_report, new), not in settings any
-- role may write.
--@rust _mm_report
--@rust _mm_take_report
--@replace CREATE FUNCTION micromegas.mm_create_view(statement text)
--@replace CREATE FUNCTION micromegas._mm_drop(
--@replace CREATE FUNCTION micromegas._mm_definitions_retire_dropped(
--@replace CREATE FUNCTION micromegas._mm_definitions_refresh_on_create(
-- The author-check levels are ranked by their order in the library.
--@rust _mm_author_check_levels
--@replace CREATE FUNCTION micromegas._mm_author_check_level(
--@replace CREATE FUNCTION micromegas.mm_require_author_checks(
SELECT micromegas._mm_apply_privileges();
