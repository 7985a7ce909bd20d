-- Hostile input: every input ends in a clean ERROR (or success), never a dead
-- backend. The postmaster's start time is compared at the end, and the test
-- runner also checks the server log for "terminated by signal".
SELECT pg_postmaster_start_time() AS started \gset

CREATE TEMP TABLE hostile (label text, statement text);
-- Every prefix of a valid statement (truncated input).
INSERT INTO hostile
SELECT 'prefix ' || n, left(micromegas._mm_shipped_log_stats(), n)
  FROM generate_series(0, length(micromegas._mm_shipped_log_stats()) - 1, 7) n;
INSERT INTO hostile VALUES
  ('unbalanced quote', 'CREATE MATERIALIZED VIEW v WITH (extract_query = ''SELECT 1)'),
  ('unbalanced dollar', 'CREATE MATERIALIZED VIEW v WITH (extract_query = $$SELECT 1)'),
  ('unbalanced tag', 'CREATE MATERIALIZED VIEW v WITH (extract_query = $a$SELECT 1$b$)'),
  ('bad tag', 'CREATE MATERIALIZED VIEW v WITH (extract_query = $1a$x$1a$)'),
  ('unclosed comment', 'CREATE MATERIALIZED VIEW v /* WITH (update_group = 1)'),
  ('huge number', 'CREATE MATERIALIZED VIEW v WITH (update_group = ' || repeat('9', 5000) || ')'),
  ('huge negative', 'CREATE MATERIALIZED VIEW v WITH (update_group = -' || repeat('9', 50) || ')'),
  ('float group', 'CREATE MATERIALIZED VIEW v WITH (update_group = 1.5e300)'),
  ('only parens', repeat('(', 5000)),
  ('many options', 'CREATE MATERIALIZED VIEW v WITH (' || (SELECT string_agg(format('o%s = %s', i, i), ', ') FROM generate_series(1, 10000) i) || ')'),
  ('many known options', 'CREATE MATERIALIZED VIEW v WITH (' || (SELECT string_agg('update_group = 1', ', ') FROM generate_series(1, 10000) i) || ')'),
  ('noise', (SELECT string_agg(chr(1 + (i * 7919) % 126), '') FROM generate_series(1, 5000) i)),
  ('unicode noise', (SELECT string_agg(chr(160 + (i * 7919) % 20000), '') FROM generate_series(1, 5000) i));

-- Deep or huge queries inside an otherwise valid statement, so that each
-- reaches the query parser or planner (not an earlier check).
CREATE FUNCTION pg_temp.with_extract(query text) RETURNS text
LANGUAGE sql AS $$
  SELECT format('CREATE MATERIALIZED VIEW v WITH (extract_query = %L, count_src_query = %L, merge_partitions_query = %L, update_group = 9000, time_column = %L)',
    query,
    'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
    'SELECT * FROM {source}', 'time_bin')
$$;
CREATE TEMP TABLE deep (label text, statement text);
INSERT INTO deep VALUES
  ('nested subqueries', pg_temp.with_extract(repeat('SELECT * FROM (', 2000) || 'SELECT 1' || repeat(')', 2000))),
  ('nested ctes', pg_temp.with_extract((SELECT string_agg(format('WITH c%s AS (', i), '') FROM generate_series(1, 1500) i) || 'SELECT 1' || ') SELECT * FROM c1' || repeat(')', 1499))),
  ('deep unary minus', pg_temp.with_extract('SELECT ' || repeat('- ', 10000) || '1 AS x')),
  ('long chain', pg_temp.with_extract('SELECT 1' || repeat(' * 2', 30000) || ' AS x')),
  ('deep case (a syntax error past the parser limit)', pg_temp.with_extract('SELECT ' || repeat('CASE WHEN true THEN ', 3000) || '1' || repeat(' END', 3000) || ' AS x')),
  ('deep in list', pg_temp.with_extract('SELECT 1 AS x WHERE 1 IN (' || repeat('(', 5000) || '1' || repeat(')', 5000) || ')')),
  ('exponential ctes', pg_temp.with_extract('WITH c0 AS (SELECT 1 AS x)' || (SELECT string_agg(format(', c%s AS (SELECT * FROM c%s UNION ALL SELECT * FROM c%s)', i, i - 1, i - 1), '' ORDER BY i) FROM generate_series(1, 40) i) || ' SELECT * FROM c40')),
  ('huge query', pg_temp.with_extract('SELECT ' || repeat('1 + ', 300000) || '1'));

-- Each reaches the query parser or planner and gets its own SQLSTATE: 54001
-- for depth and plan size, 54000 for size.
SELECT d.label, r.sqlstate, r.message
  FROM deep d, mmv_try(format('SELECT micromegas.mm_create_view(%L)', d.statement)) r ORDER BY d.label;
SELECT d.label, r.sqlstate
  FROM deep d, mmv_try(format('INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql) VALUES (''v'', %L)', d.statement)) r
 ORDER BY d.label;

-- Through the function and through a direct INSERT: the SQLSTATE classes seen.
SELECT r.sqlstate, count(*) AS inputs
  FROM hostile h, mmv_try(format('SELECT micromegas.mm_create_view(%L)', h.statement)) r
 GROUP BY 1 ORDER BY 1;
SELECT r.sqlstate, count(*) AS inputs
  FROM hostile h, mmv_try(format('INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql) VALUES (''v'', %L)', h.statement)) r
 GROUP BY 1 ORDER BY 1;
SELECT r.sqlstate, count(*) AS inputs
  FROM hostile h, mmv_try(format('SELECT micromegas.mm_drop_view(%L)', h.statement)) r
 GROUP BY 1 ORDER BY 1;
-- No internal error anywhere, nothing written, and the server never restarted.
SELECT h.label, r.sqlstate, r.message
  FROM (SELECT * FROM hostile UNION ALL SELECT * FROM deep) h,
       mmv_try(format('SELECT micromegas.mm_create_view(%L)', h.statement)) r
 WHERE r.sqlstate IN ('XX000', 'ok');
SELECT count(*) AS written FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'v';
SELECT pg_postmaster_start_time() = :'started' AS same_postmaster;
