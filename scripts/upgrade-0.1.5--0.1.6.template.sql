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
--   could be refused).

--@rust _mm_check_definition_with

--@new CREATE FUNCTION micromegas._mm_require_writable(
COMMENT ON FUNCTION micromegas._mm_require_writable(text) IS
  'Refuses a write on a hot standby (25006, naming the operation); every writing function calls it first';

--@new CREATE FUNCTION micromegas._mm_raise_broken_dependent(

--@new CREATE FUNCTION micromegas._mm_name_taken(

--@replace CREATE FUNCTION micromegas._mm_recheck_dependents(

--@replace CREATE FUNCTION micromegas._mm_definitions_before_write()

--@new CREATE FUNCTION micromegas._mm_report_incompatible(

--@replace CREATE FUNCTION micromegas._mm_definitions_report_incompatible()

--@new CREATE FUNCTION micromegas._mm_explain_view(

--@new CREATE FUNCTION micromegas._mm_dry_run_read_only(

--@new CREATE FUNCTION micromegas._mm_dry_write(

--@new CREATE FUNCTION micromegas._mm_recheck_read_only(

--@replace CREATE FUNCTION micromegas.mm_explain_view(

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

--@replace CREATE FUNCTION micromegas.mm_heartbeat_job(

--@replace CREATE FUNCTION micromegas.mm_finish_job(

--@replace CREATE FUNCTION micromegas.mm_record_query_denial_hits(

--@replace CREATE FUNCTION micromegas.deny_queries(

--@replace CREATE FUNCTION micromegas.remove_query_denial(

--@replace CREATE FUNCTION micromegas.mm_grant_audience(

--@replace CREATE FUNCTION micromegas.mm_revoke_audience(

-- The new functions are internal: revoked from every role like the others.
SELECT micromegas._mm_apply_privileges();
