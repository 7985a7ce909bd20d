-- Objects planted in public and pg_temp, named like what the extension
-- calls, never run: every function pins search_path and qualifies names.
CREATE TABLE planted_calls (what text);
CREATE ROLE mmv_test_planter LOGIN IN ROLE micromegas_admin;
GRANT ALL ON SCHEMA public TO mmv_test_planter;
GRANT ALL ON planted_calls TO mmv_test_planter;
SET ROLE mmv_test_planter;
SET search_path = public, pg_temp;
CREATE FUNCTION public.pg_notify(text, text) RETURNS void LANGUAGE sql AS $$ INSERT INTO public.planted_calls VALUES ('public.pg_notify') $$;
CREATE FUNCTION public.format(text, VARIADIC "any") RETURNS text LANGUAGE sql AS $$ SELECT 'hijacked' $$;
CREATE FUNCTION public.jsonb_agg(anyelement) RETURNS jsonb LANGUAGE sql AS $$ SELECT '[]'::jsonb $$;
CREATE FUNCTION public.coalesce_actor() RETURNS text LANGUAGE sql AS $$ SELECT 'hijacked' $$;
CREATE FUNCTION public.session_user() RETURNS text LANGUAGE sql AS $$ SELECT 'hijacked' $$;
CREATE TABLE public.lakehouse_view_set_definitions (view_set_name text);
CREATE TABLE public.catalog_state (version bigint);
CREATE TEMP TABLE builtin_view_sets (view_set_name text);
CREATE FUNCTION pg_temp.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$;
CREATE FUNCTION public.current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT 'hijacked' $$;

SELECT view_set_name, status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW planted WITH (
  extract_query = 'SELECT time, process_id FROM log_entries WHERE msg <> ''''''); DROP TABLE planted_calls; --''',
  count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT time, process_id FROM {source}', update_group = 4000, time_column = 'time')$$);
SELECT view_set_name, updated_by, updated_at > '2001-01-01' AS real_clock, reads
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'planted';
SELECT extract_query FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'planted';
SELECT count(*) AS rows_in_public_copy FROM public.lakehouse_view_set_definitions;
SELECT view_set_name, status FROM micromegas.mm_drop_view('planted');
SELECT count(*) AS planted_functions_called FROM planted_calls;
RESET search_path;
RESET ROLE;

-- Every SECURITY DEFINER function of the extension pins search_path.
SELECT p.proname, p.proconfig
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'micromegas' AND p.prosecdef ORDER BY 1;
-- Every SQL and PL/pgSQL function of the extension does too.
SELECT count(*) AS functions_without_pinned_search_path
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
 WHERE n.nspname = 'micromegas' AND l.lanname IN ('sql', 'plpgsql')
   AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false);
-- Nothing but mm_catalog_version and list_view_sets is executable by PUBLIC.
SELECT p.proname
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'micromegas' AND has_function_privilege('public', p.oid, 'EXECUTE') IS NOT NULL
   AND EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
 ORDER BY 1;

DROP OWNED BY mmv_test_planter;
DROP ROLE mmv_test_planter;
DROP TABLE planted_calls;

-- The extension is recorded in its own schema, so the database owner's
-- DROP SCHEMA public CASCADE leaves it (and every definition) alone, when
-- btree_gist is installed as the README says (a schema of its own).
\set regress_db :DBNAME
CREATE DATABASE mmv_public_drop;
\c mmv_public_drop
CREATE SCHEMA btree_gist;
CREATE EXTENSION btree_gist SCHEMA btree_gist;
CREATE EXTENSION micromegas_views;
SELECT extnamespace::regnamespace AS extension_schema FROM pg_extension WHERE extname = 'micromegas_views';
DROP SCHEMA public CASCADE;
SELECT extname, extversion FROM pg_extension WHERE extname = 'micromegas_views';
SELECT count(*) AS definitions_left FROM micromegas.lakehouse_view_set_definitions;
\c :regress_db
DROP DATABASE mmv_public_drop;
-- btree_gist in public (CREATE EXTENSION ... CASCADE puts it there) is
-- reported when the extension is created: that DROP would reach it.
CREATE DATABASE mmv_public_gist;
\c mmv_public_gist
CREATE EXTENSION micromegas_views CASCADE;
SELECT e.extname, e.extnamespace::regnamespace FROM pg_extension e ORDER BY 1;
\c :regress_db
DROP DATABASE mmv_public_gist;
