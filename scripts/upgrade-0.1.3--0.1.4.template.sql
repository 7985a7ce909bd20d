-- micromegas_views 0.1.3 -> 0.1.4. What changes:
-- * partition metadata (sql/partitions.sql, all new): lakehouse_partitions
--   and temporary_files, listing, retiring, incompatible partitions, the
--   write path and the atomic swap, the regeneration plan;
-- * a DROP retires the view's global partitions: mm_drop_view reports how
--   many and how many bytes (two more result columns); mm_create_view
--   reports how many partitions do not match the new schema (one more);
-- * the role micromegas_service (the services that write partitions);
-- * the overlap guard needs btree_gist: CREATE EXTENSION btree_gist before
--   ALTER EXTENSION micromegas_views UPDATE.

-- The roles, as CREATE EXTENSION makes them.
--@verbatim schema.sql:roles

--@rust _mm_file_retention_seconds

--@file partitions.sql

-- Result columns added: dropped and created again.
DROP FUNCTION micromegas.mm_create_view(text);
DROP FUNCTION micromegas.mm_create_view(text, text, text, text, integer, text, text, text, text, text, text, boolean);
DROP FUNCTION micromegas.mm_drop_view(text);
DROP FUNCTION micromegas.mm_drop_view(micromegas.view_set_name, boolean);
DROP FUNCTION micromegas._mm_drop(text, boolean);

--@new CREATE FUNCTION micromegas.mm_create_view(statement text)

--@new CREATE FUNCTION micromegas.mm_create_view(\n  name text,

--@new CREATE FUNCTION micromegas._mm_drop(

--@new CREATE FUNCTION micromegas.mm_drop_view(name micromegas.view_set_name

--@new CREATE FUNCTION micromegas.mm_drop_view(statement text)

SELECT pg_catalog.pg_extension_config_dump('micromegas.lakehouse_partitions', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.temporary_files', '');

--@verbatim api.sql:comments

--@verbatim api.sql:privileges
