-- The gate: only members of micromegas_admin (and superusers) may change or
-- list definitions. Everyone else gets Postgres' own permission denied (42501).
CREATE ROLE mmv_test_admin LOGIN IN ROLE micromegas_admin;
CREATE ROLE mmv_test_user LOGIN;

SET ROLE mmv_test_user;
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW x WITH (update_group = 1)')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('log_stats')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view(name => 'log_stats')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.list_view_set_definitions()$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.lakehouse_view_set_definitions$$);
SELECT * FROM mmv_try($$DELETE FROM micromegas.lakehouse_view_set_definitions$$);
SELECT * FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql) VALUES ('x', 'y')$$);
SELECT * FROM mmv_try($$UPDATE micromegas.catalog_state SET version = 0$$);
SELECT * FROM mmv_try($$SELECT micromegas._mm_next_version()$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_register_builtin_view_set('blocks', '[]', 1000)$$);
-- Reading the catalog version is open to everyone.
SELECT micromegas.mm_catalog_version() > 0 AS readable;
RESET ROLE;

SET ROLE mmv_test_admin;
SELECT view_set_name, status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW by_admin WITH (extract_query = 'SELECT time, process_id FROM log_entries', count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', merge_partitions_query = 'SELECT time, process_id FROM {source}', update_group = 4000, time_column = 'time')$$);
SELECT view_set_name, updated_by FROM micromegas.list_view_set_definitions() WHERE view_set_name = 'by_admin';
SELECT * FROM mmv_try($$UPDATE micromegas.catalog_state SET version = 0$$);
SELECT view_set_name, status FROM micromegas.mm_drop_view('by_admin');
RESET ROLE;

DROP OWNED BY mmv_test_admin, mmv_test_user;
DROP ROLE mmv_test_admin;
DROP ROLE mmv_test_user;
