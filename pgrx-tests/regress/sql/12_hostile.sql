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
  ('unicode noise', (SELECT string_agg(chr(160 + (i * 7919) % 20000), '') FROM generate_series(1, 5000) i)),
  ('nested subqueries', format('CREATE MATERIALIZED VIEW v WITH (extract_query = %L, count_src_query = ''x'', merge_partitions_query = ''y'', update_group = 1, time_column = ''t'')',
     repeat('SELECT * FROM (', 2000) || 'SELECT 1' || repeat(')', 2000))),
  ('nested ctes', format('CREATE MATERIALIZED VIEW v WITH (extract_query = %L, count_src_query = ''SELECT 1 AS count FROM blocks WHERE ''''{begin}'''' < ''''{end}'''''', merge_partitions_query = ''SELECT * FROM {source}'', update_group = 9000, time_column = ''t'')',
     (SELECT string_agg(format('WITH c%s AS (', i), '') FROM generate_series(1, 1500) i) || 'SELECT 1' || repeat(') SELECT * FROM c', 1) || repeat(')', 1499))),
  ('deep expression', format('CREATE MATERIALIZED VIEW v WITH (extract_query = %L, count_src_query = ''x'', merge_partitions_query = ''y'', update_group = 1, time_column = ''t'')',
     'SELECT ' || repeat('-', 10000) || '1 AS x')),
  ('long chain', format('CREATE MATERIALIZED VIEW v WITH (extract_query = %L, count_src_query = ''SELECT 1 AS count FROM blocks WHERE ''''{begin}'''' < ''''{end}'''''', merge_partitions_query = ''SELECT * FROM {source}'', update_group = 9000, time_column = ''t'')',
     'SELECT 1' || repeat(' * 2', 30000) || ' AS x')),
  ('deep case', format('CREATE MATERIALIZED VIEW v WITH (extract_query = %L, count_src_query = ''x'', merge_partitions_query = ''y'', update_group = 1, time_column = ''t'')',
     'SELECT ' || repeat('CASE WHEN true THEN ', 3000) || '1' || repeat(' END', 3000) || ' AS x')),
  ('huge query', format('CREATE MATERIALIZED VIEW v WITH (extract_query = %L)', 'SELECT ' || repeat('1 + ', 300000) || '1'));

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
  FROM hostile h, mmv_try(format('SELECT micromegas.mm_create_view(%L)', h.statement)) r
 WHERE r.sqlstate IN ('XX000', 'ok');
SELECT count(*) AS written FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'v';
SELECT pg_postmaster_start_time() = :'started' AS same_postmaster;
