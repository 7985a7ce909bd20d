-- micromegas_views 0.1.3 -> 0.1.4. What changes:
-- * partition metadata (sql/partitions.sql, all new): lakehouse_partitions
--   and temporary_files, listing, retiring, incompatible partitions, the
--   write path and the atomic swap, the regeneration plan;
-- * options with_no_data (false: a CREATE queues a refresh; mm_create_view
--   returns its job_id, one more column) and auto_refresh (carried in
--   mm_view_set_snapshot, one more column);
-- * a DROP retires the view's global partitions: mm_drop_view reports how
--   many and how many bytes (two more result columns); mm_create_view
--   reports how many partitions do not match the new schema (one more);
-- * the role micromegas_service (the services that write partitions);
-- * definition history (sql/history.sql, all new): every version of every
--   definition, describe / restore / prune; the redirect of a CREATE OR
--   REPLACE into an UPDATE marks itself so the history says "replace";
-- * jobs (sql/jobs.sql, all new): refresh and regeneration requests, the
--   workers' claim / heartbeat / finish with leases, cancel;
-- * the overlap guard needs btree_gist: CREATE EXTENSION btree_gist before
--   ALTER EXTENSION micromegas_views UPDATE.

-- The roles, as CREATE EXTENSION makes them.
--@verbatim schema.sql:roles

--@rust _mm_file_retention_seconds

--@rust _mm_job_lease_seconds

--@rust _mm_job_max_attempts

--@file partitions.sql

--@file history.sql

--@file jobs.sql

-- The history begins with every definition as it is now.
INSERT INTO micromegas.lakehouse_view_set_definition_history
  (view_set_name, version, operation, definition_sql, extract_query, count_src_query, merge_partitions_query,
   update_group, view_options, schema_ipc, schema_hash, load_status, load_error, updated_by, updated_by_role,
   changed_at)
SELECT d.view_set_name, s.version, CASE WHEN d.shipped THEN 'install' ELSE 'upgrade' END, d.definition_sql,
       d.extract_query, d.count_src_query, d.merge_partitions_query, d.update_group, d.view_options, d.schema_ipc,
       d.schema_hash, d.load_status, d.load_error, d.updated_by, d.updated_by_role, d.updated_at
  FROM micromegas.lakehouse_view_set_definitions d, micromegas.catalog_state s;

--@replace CREATE FUNCTION micromegas._mm_definitions_before_write()

-- Result columns added: dropped and created again.
DROP FUNCTION micromegas.mm_create_view(text);
DROP FUNCTION micromegas.mm_create_view(text, text, text, text, integer, text, text, text, text, text, text, boolean);
DROP FUNCTION micromegas.mm_drop_view(text);
DROP FUNCTION micromegas.mm_drop_view(micromegas.view_set_name, boolean);
DROP FUNCTION micromegas._mm_drop(text, boolean);
DROP FUNCTION micromegas.mm_view_set_snapshot();

--@new CREATE FUNCTION micromegas.mm_create_view(statement text)

--@new CREATE FUNCTION micromegas.mm_create_view(\n  name text,

--@new CREATE FUNCTION micromegas._mm_drop(

--@new CREATE FUNCTION micromegas.mm_drop_view(name micromegas.view_set_name

--@new CREATE FUNCTION micromegas.mm_drop_view(statement text)

--@new CREATE FUNCTION micromegas.mm_view_set_snapshot()

SELECT pg_catalog.pg_extension_config_dump('micromegas.lakehouse_partitions', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.temporary_files', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.lakehouse_view_set_definition_history',
                                           $$WHERE operation <> 'install'$$);
SELECT pg_catalog.pg_extension_config_dump('micromegas.jobs', '');

--@verbatim api.sql:comments

--@verbatim api.sql:privileges
