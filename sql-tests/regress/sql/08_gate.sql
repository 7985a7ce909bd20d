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

-- Internal functions are callable by neither role, not even an admin.
SET ROLE mmv_test_admin;
SELECT * FROM mmv_try($$SELECT micromegas._mm_next_version()$$);
SELECT * FROM mmv_try($$SELECT micromegas._mm_lock_catalog()$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas._mm_prepare_definition('v', NULL, NULL, NULL, NULL, NULL, NULL, false)$$);
RESET ROLE;

-- micromegas_reader reads the catalog and writes nothing; admin is a member.
SELECT pg_has_role('micromegas_admin', 'micromegas_reader', 'MEMBER') AS admin_is_reader,
       rolcanlogin AS reader_can_login FROM pg_roles WHERE rolname = 'micromegas_reader';
CREATE ROLE mmv_test_reader LOGIN IN ROLE micromegas_reader;
SELECT replace(micromegas._mm_shipped_log_stats(), 'log_stats', 'explained_by_reader') AS explained \gset
SET ROLE mmv_test_reader;
SELECT count(*) > 0 AS lists FROM micromegas.list_view_set_definitions();
SELECT count(*) > 0 AS lists_sets FROM micromegas.list_view_sets();
SELECT count(*) > 0 AS snapshots FROM micromegas.mm_view_set_snapshot();
SELECT count(*) > 0 AS orders FROM micromegas.mm_materialization_order();
SELECT count(*) > 0 AS dependencies FROM micromegas.list_view_dependencies();
SELECT count(*) AS violations FROM micromegas.mm_catalog_violations();
SELECT count(*) > 0 AS selects FROM micromegas.lakehouse_view_set_definitions;
SELECT view_set_name, would_be FROM micromegas.mm_explain_view(:'explained');
SELECT * FROM mmv_try($$SELECT micromegas._mm_shipped_log_stats()$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW x WITH (update_group = 1)')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('log_stats')$$);
SELECT * FROM mmv_try($$DELETE FROM micromegas.lakehouse_view_set_definitions$$);
SELECT * FROM mmv_try($$UPDATE micromegas.lakehouse_view_set_definitions SET update_group = 1$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_register_builtin_view_set('svc', '[]', 1000)$$);
SELECT * FROM mmv_try($$SELECT micromegas._mm_next_version()$$);
RESET ROLE;
SELECT count(*) AS explained_view_stored FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'explained_by_reader';

DROP OWNED BY mmv_test_admin, mmv_test_user, mmv_test_reader;
DROP ROLE mmv_test_admin;
DROP ROLE mmv_test_user;
DROP ROLE mmv_test_reader;

-- A micromegas_* role that already exists and could hand the extension's
-- privileges to someone is refused (42710) until the superuser installing
-- says otherwise: one that can log in, one with a member it did not make
-- (a CREATEROLE user who pre-created micromegas_admin and joined it), one
-- that has CREATEROLE. Nothing is created by a refused CREATE EXTENSION.
-- The roles here lose the extension's mark first (as roles someone else
-- pre-created would not have it): a marked role's members are its own.
\set regress_db :DBNAME
CREATE DATABASE mmv_gate_roles;
ALTER ROLE micromegas_reader RESET micromegas_views.extension_role;
ALTER ROLE micromegas_admin RESET micromegas_views.extension_role;
ALTER ROLE micromegas_service RESET micromegas_views.extension_role;
ALTER ROLE micromegas_reader LOGIN;
CREATE ROLE mmv_gate_squatter;
GRANT micromegas_admin TO mmv_gate_squatter;
ALTER ROLE micromegas_service CREATEROLE;
\c mmv_gate_roles
CREATE SCHEMA btree_gist;
CREATE EXTENSION btree_gist SCHEMA btree_gist;
\set VERBOSITY default
\set SHOW_CONTEXT never
CREATE EXTENSION micromegas_views;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'micromegas_views';
ALTER ROLE micromegas_reader NOLOGIN;
CREATE EXTENSION micromegas_views;
ALTER ROLE micromegas_service NOCREATEROLE;
CREATE EXTENSION micromegas_views;
-- Each alone (the squatter's membership set aside meanwhile): a superuser
-- role, and ADMIN OPTION held even by an expected member.
REVOKE micromegas_admin FROM mmv_gate_squatter;
ALTER ROLE micromegas_reader SUPERUSER;
CREATE EXTENSION micromegas_views;
ALTER ROLE micromegas_reader NOSUPERUSER;
GRANT micromegas_reader TO micromegas_admin WITH ADMIN OPTION;
CREATE EXTENSION micromegas_views;
REVOKE ADMIN OPTION FOR micromegas_reader FROM micromegas_admin;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'micromegas_views';
GRANT micromegas_admin TO mmv_gate_squatter;
-- A setting only a superuser may set adopts the roles as they are.
CREATE ROLE mmv_gate_plain;
SET ROLE mmv_gate_plain;
SET micromegas_views.adopt_existing_roles = on;
RESET ROLE;
DROP ROLE mmv_gate_plain;
SET micromegas_views.adopt_existing_roles = on;
CREATE EXTENSION micromegas_views;
RESET micromegas_views.adopt_existing_roles;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'micromegas_views';
-- The install marked the roles it adopted: the next CREATE EXTENSION takes
-- the squatter's membership as the role's own.
SELECT r.rolname, s.setconfig FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
 WHERE r.rolname LIKE 'micromegas\_%' AND s.setdatabase = 0 ORDER BY 1;
-- DROP EXTENSION removes everything in the schema (partition metadata and
-- the file queue included) and leaves the empty schema, btree_gist and the
-- cluster's roles.
SELECT micromegas.mm_write_partition('log_stats', 'global', '2026-01-01', '2026-01-02', NULL, NULL, 's3://b/gate0', 10,
  (SELECT schema_hash FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'), '\x00', 1);
SELECT micromegas.mm_write_partition('log_stats', 'global', '2026-01-02', '2026-01-03', NULL, NULL, 's3://b/gate1', 10,
  (SELECT schema_hash FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'), '\x00', 1);
SELECT micromegas.retire_partition_by_file('s3://b/gate1');
SELECT (SELECT count(*) FROM micromegas.lakehouse_partitions) AS partitions,
       (SELECT count(*) FROM micromegas.temporary_files) AS queued_files;
DROP EXTENSION micromegas_views;
SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'micromegas') AS relations,
       (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'micromegas') AS functions,
       (SELECT count(*) FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'micromegas') AS types,
       EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'micromegas') AS schema_left,
       EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gist') AS btree_gist_left,
       (SELECT count(*) FROM pg_roles WHERE rolname IN ('micromegas_admin', 'micromegas_reader', 'micromegas_service')) AS roles_left;
\c :regress_db
REVOKE micromegas_admin FROM mmv_gate_squatter;
DROP ROLE mmv_gate_squatter;
DROP DATABASE mmv_gate_roles;
