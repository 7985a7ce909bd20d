-- Catalog integrity: checks on the planned query (not its text), micromegas'
-- own load-time rules, failed sources, one namespace for built-ins and DDL
-- views, name rules on every path, no settable install mode, and an audit
-- column no setting can forge. Every refused write changes nothing.
CREATE FUNCTION pg_temp.view(name text, extract_q text, merge_q text,
                             count_q text DEFAULT $$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$,
                             grp integer DEFAULT 4000, time_col text DEFAULT 'time')
RETURNS text LANGUAGE sql AS $f$
  SELECT format('CREATE MATERIALIZED VIEW %s WITH (extract_query = %L, count_src_query = %L, merge_partitions_query = %L, update_group = %s, time_column = %L)',
                name, extract_q, count_q, merge_q, grp, time_col)
$f$;
CREATE FUNCTION pg_temp.try_create(statement text)
RETURNS TABLE (sqlstate text, message text, detail text) LANGUAGE sql AS $f$
  SELECT sqlstate, message, detail FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', statement))
$f$;
SELECT micromegas.mm_catalog_version() AS v0 \gset

-- 1. micromegas' audience rule: audience decides when present (Utf8 or
--    Dictionary(_, Utf8)); process_id only without it.
SELECT * FROM pg_temp.try_create(pg_temp.view('aud', 'SELECT time, process_id, 1 AS audience FROM log_entries', 'SELECT time, process_id, audience FROM {source}'));
SELECT * FROM pg_temp.try_create(pg_temp.view('aud', $$SELECT time, arrow_cast(process_id, 'LargeUtf8') AS audience FROM log_entries$$, 'SELECT time, audience FROM {source}'));
-- The count is Int64; a count over a derived view set says what the rule is.
SELECT * FROM pg_temp.try_create(pg_temp.view('cnt', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}',
  $$SELECT CAST(count(*) AS INT) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$));
SELECT sqlstate, message FROM pg_temp.try_create(pg_temp.view('cnt', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}',
  $$SELECT count(*) AS count FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$));

-- 2. Placeholders count where the planned query uses them, not in comments
--    or strings; table-function arguments go through the volatility check.
SELECT sqlstate, message FROM pg_temp.try_create(pg_temp.view('ph', 'SELECT time, process_id FROM log_entries',
  'SELECT time, process_id FROM log_entries -- {source}'));
SELECT sqlstate, message FROM pg_temp.try_create(pg_temp.view('ph', 'SELECT time, process_id FROM log_entries',
  'SELECT time, process_id FROM {source}', 'SELECT count(*) AS count FROM blocks -- {begin} {end}'));
SELECT sqlstate, message FROM pg_temp.try_create(pg_temp.view('ph', 'SELECT time, process_id FROM log_entries',
  'SELECT time, process_id FROM {source}', $$SELECT count(*) AS count FROM blocks WHERE insert_time >= '{begin}' AND stream_id <> 'x{end}'$$));
SELECT sqlstate, message FROM pg_temp.try_create(pg_temp.view('tf',
  'SELECT time, process_id, key FROM log_entries CROSS JOIN jsonb_each(jsonb_parse(CAST(now() AS VARCHAR)))',
  'SELECT time, process_id, key FROM {source}'));

-- 3. A direct INSERT claiming load_status = 'failed' is validated: a
--    reserved name is refused, a valid definition loads, one that does not
--    plan is kept as failed with the fresh reason and what it names.
SELECT sqlstate, message FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions
  (view_set_name, definition_sql, load_status, schema_ipc, reads)
  VALUES ('blocks', 'CREATE MATERIALIZED VIEW blocks WITH (update_group = 1)', 'failed', 'AAAA', '{}')$$);
INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql, load_status, schema_ipc, reads)
VALUES ('claimed_failed', pg_temp.view('claimed_failed', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}'),
        'failed', 'AAAA', '{forged}');
-- A caller's row that does not plan is refused, whatever load_status it claims;
-- only a superuser loading a dumped row (it carries its created_at, as
-- pg_restore's do) keeps one as failed, with the fresh reason.
SELECT sqlstate, message FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql, load_status)
VALUES ('still_failed', pg_temp.view('still_failed', 'SELECT time, process_id, nope FROM log_entries', 'SELECT time, process_id, nope FROM {source}'), 'failed')$$);
INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, created_at, definition_sql, load_status)
VALUES ('still_failed', now(), pg_temp.view('still_failed', 'SELECT time, process_id, nope FROM log_entries', 'SELECT time, process_id, nope FROM {source}'), 'failed');
SELECT view_set_name, load_status, load_error, reads, schema_ipc <> 'AAAA' AS schema_derived
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name IN ('claimed_failed', 'still_failed') ORDER BY 1;
-- Only the extension marks a definition failed: a direct UPDATE re-validates.
UPDATE micromegas.lakehouse_view_set_definitions SET load_status = 'failed', load_error = 'forged'
 WHERE view_set_name = 'claimed_failed';
SELECT view_set_name, load_status, load_error FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'claimed_failed';

-- 4. A definition may not read one that failed to load.
SELECT * FROM pg_temp.try_create(pg_temp.view('reads_failed', 'SELECT time, process_id FROM still_failed',
  'SELECT time, process_id FROM {source}', grp => 5000));
SELECT * FROM micromegas.mm_catalog_violations();
DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name IN ('claimed_failed', 'still_failed');

-- 5. One namespace, both directions, and built-in names follow the name rule.
SELECT view_set_name FROM micromegas.mm_register_builtin_view_set('svc_set', '[{"name": "process_id", "type": "Utf8"}]', 1500);
SELECT * FROM pg_temp.try_create(pg_temp.view('svc_set', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}'));
SELECT view_set_name FROM micromegas.mm_create_view(pg_temp.view('ddl_set', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}'));
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas.mm_register_builtin_view_set('ddl_set', '[{"name": "x", "type": "Utf8"}]', 1500)$$);
SELECT sqlstate, message FROM mmv_try($$INSERT INTO micromegas.builtin_view_sets (view_set_name, kind, schema_json) VALUES ('ddl_set', 'materialized', '[]')$$);
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas.mm_register_builtin_view_set('Svc Set', '[]', 1500)$$);
SELECT sqlstate, message FROM mmv_try(format('SELECT micromegas.mm_register_builtin_view_set(%L, ''[]'', 1500)', repeat('s', 64)));
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas.mm_register_builtin_view_set('__svc', '[]', 1500)$$);
SELECT view_set_name, origin FROM micromegas.list_view_sets() WHERE view_set_name IN ('svc_set', 'ddl_set') ORDER BY 1;

-- 6. Drop applies the name rule in every form: 64 bytes is 42622, never
--    truncated to the 63-byte view of that prefix.
SELECT view_set_name FROM micromegas.mm_create_view(pg_temp.view(repeat('n', 63), 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}'));
SELECT sqlstate, message FROM mmv_try(format('SELECT micromegas.mm_drop_view(%L)', repeat('n', 64)));
SELECT sqlstate, message FROM mmv_try(format('SELECT micromegas.mm_drop_view(name => %L)', repeat('n', 64)));
SELECT sqlstate, message FROM mmv_try(format('SELECT micromegas.mm_drop_view(name => %L, if_exists => true)', repeat('n', 64)));
SELECT sqlstate, message FROM mmv_try(format('SELECT micromegas.mm_drop_view(%L)', 'DROP MATERIALIZED VIEW ' || repeat('n', 64)));
SELECT count(*) AS still_there FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = repeat('n', 63);
SELECT status FROM micromegas.mm_drop_view(repeat('n', 63));
SELECT status FROM micromegas.mm_drop_view(name => 'ddl_set');

-- 7. No setting switches install mode on: the row is an ordinary one (dumped).
SET micromegas_views.installing = on;
SELECT view_set_name FROM micromegas.mm_create_view(pg_temp.view('not_shipped', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}'));
RESET micromegas_views.installing;
SELECT shipped FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'not_shipped';

-- 8. updated_by is the actor a service claims; updated_by_role is the role.
SET micromegas_views.actor = 'alice@example.com';
SELECT status FROM micromegas.mm_create_view(replace(pg_temp.view('not_shipped', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}'),
  'CREATE MATERIALIZED', 'CREATE OR REPLACE MATERIALIZED'));
RESET micromegas_views.actor;
SELECT updated_by, updated_by_role = session_user AS role_is_session_user
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'not_shipped';
SELECT status FROM micromegas.mm_drop_view('not_shipped');
DELETE FROM micromegas.builtin_view_sets WHERE view_set_name = 'svc_set';
SELECT * FROM micromegas.mm_catalog_violations();
