-- Engine limits: deep or huge input ends in a clean ERROR naming the limit,
-- a slow validation honours statement_timeout and the validation time
-- limit, and the session goes on working afterwards. The server never
-- restarts (checked at the end, and in the server log by the test runner).
SELECT pg_postmaster_start_time() AS started \gset

-- A valid definition whose extract_query is the given text.
CREATE FUNCTION pg_temp.with_extract(query text) RETURNS text
LANGUAGE sql AS $$
  SELECT format('CREATE MATERIALIZED VIEW limits_v WITH (extract_query = %L, count_src_query = %L, merge_partitions_query = %L, update_group = 9000, time_column = %L)',
    query,
    'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
    'SELECT * FROM {source}', 'time_bin')
$$;
-- A chain of CTEs each reading the previous one twice: a few hundred bytes
-- that plan to about 7 * 2^depth nodes.
CREATE FUNCTION pg_temp.cte_chain(depth int) RETURNS text
LANGUAGE sql AS $$
  SELECT 'WITH c0 AS (SELECT date_bin(''1 minute'', time) AS time_bin, process_id FROM log_entries)'
      || string_agg(format(', c%s AS (SELECT * FROM c%s UNION ALL SELECT * FROM c%s)', i, i - 1, i - 1), '' ORDER BY i)
      || format(' SELECT * FROM c%s', depth)
    FROM generate_series(1, depth) i
$$;

-- The same shape under the limit is a valid view (checked, then rolled back).
BEGIN;
SELECT view_set_name, status FROM micromegas.mm_create_view(pg_temp.with_extract(pg_temp.cte_chain(6)));
ROLLBACK;

-- 1. The exponential CTE chain is refused before planning, well inside a
--    one-second statement_timeout, at depth 15 and at depth 200.
SET statement_timeout = '1s';
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', pg_temp.with_extract(pg_temp.cte_chain(15))));
SELECT sqlstate, message FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', pg_temp.with_extract(pg_temp.cte_chain(200))));
-- Through a direct INSERT too.
SELECT sqlstate, message FROM mmv_try(format(
  'INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql) VALUES (''limits_v'', %L)',
  pg_temp.with_extract(pg_temp.cte_chain(15))));
RESET statement_timeout;
-- The size limit holds when the columns are written directly, too.
SELECT sqlstate, message FROM mmv_try(format(
  'INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, extract_query, count_src_query, merge_partitions_query, update_group, view_options) VALUES (''limits_v'', %L, ''x'', ''y'', 1, ''{"time_column": "t"}'')',
  'SELECT ' || repeat('1 + ', 200000) || '1'));

-- 1b. A query too wide to plan (3,000 columns read and returned through
--     three SELECTs: DataFusion resolves each column by a linear search,
--     seconds of work it cannot be interrupted in) is refused before
--     planning, well inside a one-second statement_timeout; for a reader
--     asking mm_explain_view too. Named columns under the limit are fine.
CREATE FUNCTION pg_temp.wide_extract(columns int, levels int) RETURNS text
LANGUAGE sql AS $$
  SELECT repeat('SELECT * FROM (', levels)
      || 'SELECT date_bin(''1 minute'', time) AS time_bin, process_id, '
      || (SELECT string_agg(format('1 AS c%s', i), ', ') FROM generate_series(1, columns) i)
      || ' FROM log_entries'
      || (SELECT string_agg(format(') w%s', i), '') FROM generate_series(1, levels) i)
$$;
SET statement_timeout = '1s';
SELECT sqlstate, message, detail, hint FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)',
  pg_temp.with_extract(pg_temp.wide_extract(3000, 2))));
CREATE ROLE limits_reader NOLOGIN IN ROLE micromegas_reader;
SET ROLE limits_reader;
SELECT would_be, problems FROM micromegas.mm_explain_view(pg_temp.with_extract(pg_temp.wide_extract(3000, 2)));
RESET ROLE;
DROP ROLE limits_reader;
RESET statement_timeout;
SELECT view_set_name, would_be, problems FROM micromegas.mm_explain_view(pg_temp.with_extract(pg_temp.wide_extract(300, 2)));

-- 2. A deep type string (150,000 levels, just under the 1 MiB size limit, so
--    that it reaches the depth check): registration and a direct INSERT of
--    the built-in row.
SELECT sqlstate, message, detail FROM mmv_try(format(
  'SELECT micromegas.mm_register_builtin_view_set(''deep'', %L, 1)',
  json_build_object('fields', json_build_array(json_build_object('name', 'a', 'type',
    repeat('List(', 150000) || 'Int64' || repeat(')', 150000))))::text));
SELECT sqlstate, message, detail FROM mmv_try(format(
  'INSERT INTO micromegas.builtin_view_sets (view_set_name, kind, schema_json) VALUES (''deep'', ''materialized'', %L)',
  json_build_object('fields', json_build_array(json_build_object('name', 'a', 'type',
    repeat('List(', 150000) || 'Int64' || repeat(')', 150000))))::text));
-- One level past what Arrow IPC reads back, and the deepest it does.
SELECT sqlstate, message, detail FROM mmv_try(format(
  'SELECT micromegas.mm_register_builtin_view_set(''deep'', %L, 1)',
  json_build_object('fields', json_build_array(json_build_object('name', 'a', 'type',
    repeat('List(', 61) || 'Int64' || repeat(')', 61))))::text));
BEGIN;
SELECT view_set_name, length(encode(schema_hash, 'hex')) AS hash_hex_chars
  FROM micromegas.mm_register_builtin_view_set('deep',
    json_build_object('fields', json_build_array(json_build_object('name', 'a', 'type',
      repeat('List(', 60) || 'Int64' || repeat(')', 60))))::text, 1);
ROLLBACK;
-- Too many fields, too large a schema, JSON nested past serde's limit.
SELECT sqlstate, message FROM mmv_try(format(
  'SELECT micromegas.mm_register_builtin_view_set(''wide'', %L, 1)',
  (SELECT json_agg(json_build_object('name', 'f' || i, 'type', 'Int64')) FROM generate_series(1, 10001) i)::text));
SELECT sqlstate, message FROM mmv_try(format(
  'SELECT micromegas.mm_register_builtin_view_set(''huge'', %L, 1)', repeat('A', 2 * 1024 * 1024)));
SELECT sqlstate, message FROM mmv_try(format(
  'SELECT micromegas.mm_register_builtin_view_set(''nested'', %L, 1)', repeat('[', 5000) || repeat(']', 5000)));
-- Four bytes whose length prefix claims 1.7 GB: refused before anything is
-- allocated (arrow's stream reader would allocate what the prefix claims).
SELECT sqlstate, message, detail FROM mmv_try($$SELECT micromegas.mm_register_builtin_view_set('claims', 'AgARZw==', 1)$$);
SELECT count(*) AS registered FROM micromegas.builtin_view_sets WHERE view_set_name IN ('deep', 'wide', 'huge', 'nested', 'claims');

-- 3. A slow validation under a raised plan-node limit (superuser only) is
--    stopped by statement_timeout within about its one second, and the
--    session works normally right after.
SET micromegas_views.max_plan_nodes = 250000;
SET statement_timeout = '1s';
SELECT clock_timestamp() AS t0 \gset
-- (A cancel is not an error PL/pgSQL can catch: it is shown tersely.)
\set VERBOSITY terse
SELECT view_set_name FROM micromegas.mm_create_view(pg_temp.with_extract(pg_temp.cte_chain(15)));
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
SELECT clock_timestamp() - :'t0'::timestamptz < interval '2 seconds' AS stopped_within_2s;
RESET statement_timeout;
SELECT view_set_name, would_be, problems FROM micromegas.mm_explain_view(replace(micromegas._mm_shipped_log_stats(), 'log_stats', 'log_stats_again'));

-- 4. The validation time limit: the same input, 100 ms allowed.
SET micromegas_views.validation_timeout = '100ms';
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', pg_temp.with_extract(pg_temp.cte_chain(13))));
RESET micromegas_views.validation_timeout;
RESET micromegas_views.max_plan_nodes;
SHOW micromegas_views.validation_timeout;
SHOW micromegas_views.max_plan_nodes;

-- 5. Only a superuser may raise the plan-node limit; the time limit is
--    capped at a minute for everyone.
CREATE ROLE limits_admin NOLOGIN IN ROLE micromegas_admin;
SET ROLE limits_admin;
SELECT sqlstate, message FROM mmv_try('SET micromegas_views.max_plan_nodes = 250000');
SELECT sqlstate, message FROM mmv_try('SET micromegas_views.validation_timeout = ''10min''');
SELECT sqlstate FROM mmv_try('SET micromegas_views.validation_timeout = ''30s''');
-- 6. Every setting: who may change it, its range and its default (what
--    docs/operations.md and src/pg/settings.rs say). An admin may change
--    none of the superuser-only ones, in either direction; out of range is
--    refused for a superuser too.
SELECT name, context, vartype, unit, min_val, max_val, boot_val, enumvals
  FROM pg_settings WHERE name LIKE 'micromegas\_views.%' ORDER BY name;
SELECT s.name, lo.sqlstate AS to_min, hi.sqlstate AS to_max
  FROM pg_settings s, LATERAL mmv_try(format('SET %s = %L', s.name, s.min_val)) lo,
       LATERAL mmv_try(format('SET %s = %L', s.name, s.max_val)) hi
 WHERE s.name LIKE 'micromegas\_views.%' AND s.context = 'superuser' AND s.vartype = 'integer' ORDER BY 1;
SELECT sqlstate FROM mmv_try('SET micromegas_views.adopt_existing_roles = on');
SELECT sqlstate FROM mmv_try('SET micromegas_views.author_checks = off');
RESET micromegas_views.author_checks;
RESET ROLE;
DROP ROLE limits_admin;
SELECT s.name, hi.sqlstate AS above_max, strpos(hi.message, s.name) > 0 AS names_it,
       lo.sqlstate AS below_min, strpos(lo.message, s.name) > 0 AS names_it_too
  FROM pg_settings s, LATERAL mmv_try(format('SET %s = %s', s.name, s.max_val::bigint + 1)) hi,
       LATERAL mmv_try(format('SET %s = %s', s.name, s.min_val::bigint - 1)) lo
 WHERE s.name LIKE 'micromegas\_views.%' AND s.vartype = 'integer' ORDER BY 1;
SELECT sqlstate, message FROM mmv_try('SET micromegas_views.author_checks = lenient');

-- 7. Wide and deep shapes that once crashed the backend:
--    a UNION ALL of 1,000 arms (its parsed tree was cloned and dropped on
--    the backend's own stack, recursing once per arm) plans and is stored;
--    a CAST to a type nested 20,000 deep (Arrow recursed once per level,
--    past even the planning thread's stack) is refused as too deeply
--    nested, in a definition and in a deny rule.
SELECT string_agg(format('SELECT time, process_id, level FROM log_entries WHERE level > %s', i), ' UNION ALL ') AS wide
  FROM generate_series(1, 1000) i \gset
SET micromegas_views.validation_timeout = '60s';
SELECT view_set_name, status FROM micromegas.mm_create_view(format(
  'CREATE MATERIALIZED VIEW limits_wide WITH (extract_query = %L, count_src_query = %L, merge_partitions_query = %L, update_group = 4000, time_column = %L)',
  :'wide', 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  'SELECT time, process_id, level FROM {source}', 'time'));
SELECT would_be FROM micromegas.mm_explain_view((SELECT replace(definition_sql, 'CREATE MATERIALIZED', 'CREATE OR REPLACE MATERIALIZED')
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'limits_wide'));
SELECT status FROM micromegas.mm_drop_view('limits_wide');
RESET micromegas_views.validation_timeout;
SELECT 'INT' || repeat('[]', 20000) AS deep_type \gset
SELECT sqlstate, message, detail FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', format(
  'CREATE MATERIALIZED VIEW limits_deep_type WITH (extract_query = %L, count_src_query = %L, merge_partitions_query = %L, update_group = 4000, time_column = %L)',
  format('SELECT time, process_id, CAST(NULL AS %s) AS x FROM log_entries', :'deep_type'),
  'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  'SELECT time, process_id, x FROM {source}', 'time')));
SELECT sqlstate, message FROM mmv_try(format('SELECT micromegas.deny_queries(%L, %L)',
  format('CAST(client AS %s) IS NULL', :'deep_type'), 'deep type'));
-- The same depth written as ARRAY<…> (the parser recursed per level before
-- any check ran) and as a typed string (INT[]… '{}', planned as a cast).
SELECT would_be, problems FROM micromegas.mm_explain_view(format(
  'CREATE MATERIALIZED VIEW limits_deep_type WITH (extract_query = %L, count_src_query = %L, merge_partitions_query = %L, update_group = 4000, time_column = %L)',
  format('SELECT time, process_id, CAST(1 AS %sINT%s) AS x FROM log_entries', repeat('ARRAY<', 15000), repeat('>', 15000)),
  'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  'SELECT time, process_id, x FROM {source}', 'time'));
SELECT would_be, problems FROM micromegas.mm_explain_view(format(
  'CREATE MATERIALIZED VIEW limits_deep_type WITH (extract_query = %L, count_src_query = %L, merge_partitions_query = %L, update_group = 4000, time_column = %L)',
  format('SELECT time, process_id, %s ''{}'' AS x FROM log_entries', :'deep_type'),
  'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  'SELECT time, process_id, x FROM {source}', 'time'));

SELECT count(*) AS written FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'limits_v';
SELECT pg_postmaster_start_time() = :'started' AS same_postmaster;
