-- Mistakes a new user makes in the first hour, each with the message it
-- gets. Every message names the offending thing, and says what to do
-- instead where the fix is not plain from it.
CREATE ROLE mmv_first_admin LOGIN IN ROLE micromegas_admin;
CREATE ROLE mmv_first_reader LOGIN IN ROLE micromegas_reader;
CREATE FUNCTION first_view(options text, name text DEFAULT 'first')
RETURNS TABLE (sqlstate text, message text, detail text, hint text) LANGUAGE sql AS $f$
  SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)',
    format('CREATE MATERIALIZED VIEW %s WITH (%s)', name, options)))
$f$;
\set count 'count_src_query = $q$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''$q$'
\set extract 'extract_query = $q$SELECT date_bin(''1 hour'', time) AS time_bin, process_id, count(*) AS n FROM log_entries WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}'' GROUP BY 1, 2$q$'
\set merge 'merge_partitions_query = $q$SELECT time_bin, process_id, sum(n) AS n FROM {source} GROUP BY 1, 2$q$'
SET ROLE mmv_first_admin;

-- 1. A quote inside a single-quoted query ends it.
SELECT * FROM mmv_try($s$SELECT micromegas.mm_create_view($$CREATE MATERIALIZED VIEW first WITH (
  extract_query = 'SELECT date_bin('1 hour', time) AS time_bin, process_id FROM log_entries',
  update_group = 3000)$$)$s$);
-- 2. The same quote in the SQL literal that carries the statement: Postgres' own syntax error.
SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW first WITH (extract_query = 'SELECT 1')');
-- 3. A misspelled option.
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', update_grup = 3000, time_column = ''time_bin''');
-- 4. A required option left out.
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', time_column = ''time_bin''');
-- 5. update_group given as a string.
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', update_group = ''3000'', time_column = ''time_bin''');
-- 6. A name that is a built-in's; a name in capitals folds to lower case, as in Postgres.
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''', '"ErrorRate"');
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''', 'log_entries');
-- 7. A misspelled source, a misspelled column.
SELECT * FROM first_view(replace(:'extract', 'FROM log_entries', 'FROM log_entires') || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''');
SELECT * FROM first_view(replace(:'extract', 'process_id,', 'proces_id,') || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''');
-- 8. An interval DataFusion cannot read, which would fail only when materialized.
SELECT * FROM first_view(replace(:'extract', '1 hour', '1 fortnight') || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''');
SELECT * FROM first_view(replace(:'extract', '1 hour', 'banana') || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''');
-- 9. A time column that is not a nanosecond timestamp, or not in the output.
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''n''');
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time''');
-- 10. The count query: its column not named count; without {begin}.
SELECT * FROM first_view(:'extract' || ', ' || replace(:'count', 'AS count', 'AS total') || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''');
SELECT * FROM first_view(:'extract' || ', count_src_query = ''SELECT sum(nb_objects) AS count FROM blocks'', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''');
-- 11. The merge query reads the view by its name, not {source}; or forgets a column.
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || replace(:'merge', '{source}', 'first') || ', update_group = 3000, time_column = ''time_bin''');
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || replace(:'merge', ', sum(n) AS n', '') || ', update_group = 3000, time_column = ''time_bin''');
-- 12. now() in a query (its result would be frozen into a partition).
SELECT * FROM first_view(replace(:'extract', 'count(*) AS n', 'count(*) AS n, now() AS seen') || ', ' || :'count' || ', ' || replace(:'merge', 'sum(n) AS n', 'sum(n) AS n, max(seen) AS seen') || ', update_group = 3000, time_column = ''time_bin''');
-- 13. No audience or process_id column to filter readers by.
SELECT * FROM first_view(replace(:'extract', ', process_id', '') || ', ' || :'count' || ', ' || replace(:'merge', ', process_id', '') || ', update_group = 3000, time_column = ''time_bin''');
-- 14. Two statements in one query.
SELECT * FROM first_view('extract_query = ''SELECT 1; SELECT 2'', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''');
-- 15. An option value DataFusion's intervals do not allow.
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin'', source_partition_delta = ''1 week''');
-- 16. The view is created; a view over it in a lower update_group than what it reads.
SELECT sqlstate FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''');
SELECT * FROM first_view('extract_query = ''SELECT time_bin, process_id, n FROM first'', ' || :'count' || ', ' || :'merge' || ', update_group = 2000, time_column = ''time_bin''', 'over_first');
-- 17. CREATE again without OR REPLACE.
SELECT * FROM first_view(:'extract' || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''');
-- 18. A misspelled named argument: Postgres' own lookup error (the named
--     arguments are listed by \df micromegas.mm_create_view).
SELECT micromegas.mm_create_view(name => 'x', extract_query => 'SELECT 1', count_src_query => 'SELECT 1',
  merge_partitions_query => 'SELECT 1', update_group => 3000, time_colum => 'time_bin');
-- 19. DROP with CASCADE; DROP of a built-in; DROP of a name that is not there.
SELECT sqlstate FROM first_view('extract_query = ''SELECT time_bin, process_id, n FROM first'', ' || :'count' || ', ' || :'merge' || ', update_group = 4000, time_column = ''time_bin''', 'over_first');
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('DROP MATERIALIZED VIEW first CASCADE')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('DROP MATERIALIZED VIEW blocks')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('DROP MATERIALIZED VIEW frist')$$);
-- 20. DROP of a view another reads: the DETAIL names the dependent.
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('first')$$);
-- 21. A DROP statement given to mm_create_view, and a CREATE to mm_drop_view.
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view('DROP MATERIALIZED VIEW first')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('CREATE MATERIALIZED VIEW first WITH (update_group = 1)')$$);
-- 22. Writing the catalog table by hand: TRUNCATE is refused (the privilege, for an admin).
SELECT * FROM mmv_try('TRUNCATE micromegas.lakehouse_view_set_definitions');
-- 23. A wrong value for one of the extension's settings (the library is loaded in this session).
SELECT * FROM mmv_try($$SET micromegas_views.author_checks = 'strict'$$);
RESET ROLE;
-- 24. A reader calling an admin function, or writing the table.
SET ROLE mmv_first_reader;
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('first')$$);
SELECT * FROM mmv_try($$DELETE FROM micromegas.lakehouse_view_set_definitions$$);
-- 25. A reader's dry run of the same mistake as an admin's: the same answer.
SELECT would_be, problems FROM micromegas.mm_explain_view(format('CREATE MATERIALIZED VIEW first2 WITH (%s, %s, %s, update_group = 3000, time_column = %L)',
  replace(:'extract', '1 hour', '1 fortnight'), :'count', :'merge', 'time_bin'));
-- 26. A placeholder outside quotes, and one that is not a placeholder.
SET ROLE mmv_first_admin;
SELECT * FROM first_view(replace(:'extract', '>= ''{begin}''', '>= {begin}') || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''', 'second');
SELECT * FROM first_view(replace(:'extract', '{begin}', '{start}') || ', ' || :'count' || ', ' || :'merge' || ', update_group = 3000, time_column = ''time_bin''', 'second');
-- 27. A bare name in capitals folds to lower case, as in a statement.
SELECT view_set_name, status FROM micromegas.mm_drop_view('OVER_FIRST');
SELECT sqlstate FROM first_view('extract_query = ''SELECT time_bin, process_id, n FROM first'', ' || :'count' || ', ' || :'merge' || ', update_group = 4000, time_column = ''time_bin''', 'over_first');
RESET ROLE;

-- Nothing above changed what was created.
SELECT view_set_name, update_group FROM micromegas.lakehouse_view_set_definitions
 WHERE view_set_name IN ('first', 'over_first') ORDER BY 1;
SELECT micromegas.mm_drop_view('over_first') IS NOT NULL AS dropped, micromegas.mm_drop_view('first') IS NOT NULL AS dropped;
DROP FUNCTION first_view(text, text);
DROP ROLE mmv_first_admin, mmv_first_reader;
