-- On the primary, before the standby is cloned: a catalog with something
-- of every kind (definitions and a dependent, history, partitions, jobs, a
-- deny rule, a grant), and the helper that shows an error as a row (a
-- standby cannot create it, but runs it: it reads and writes nothing).
SET TimeZone = 'UTC';
CREATE FUNCTION mmv_try(statement text)
RETURNS TABLE (sqlstate text, message text, detail text, hint text)
LANGUAGE plpgsql AS $$
DECLARE
  s text; m text; d text; h text;
BEGIN
  EXECUTE statement;
  RETURN QUERY SELECT 'ok'::text, NULL::text, NULL::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT,
                          d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
  RETURN QUERY SELECT s, m, nullif(d, ''), nullif(h, '');
END
$$;
CREATE FUNCTION st_view(name text, extract_sql text, merge_sql text, grp int, replace boolean DEFAULT false) RETURNS text
LANGUAGE sql AS $f$
  SELECT format($$CREATE %sMATERIALIZED VIEW %s WITH (extract_query = %L, count_src_query = %L,
    merge_partitions_query = %L, update_group = %s, time_column = 'time')$$,
    CASE WHEN replace THEN 'OR REPLACE ' ELSE '' END, name, extract_sql,
    'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
    merge_sql, grp)
$f$;
SELECT status FROM micromegas.mm_create_view(st_view('st_a',
  'SELECT time, process_id, level FROM log_entries', 'SELECT time, process_id, level FROM {source}', 4000));
SELECT status FROM micromegas.mm_create_view(st_view('st_b',
  'SELECT time, process_id, level AS peak FROM st_a', 'SELECT time, process_id, peak FROM {source}', 5000));
SELECT status FROM micromegas.mm_create_view(st_view('st_a',
  'SELECT time, process_id, level FROM log_entries WHERE level < 9', 'SELECT time, process_id, level FROM {source}', 4000, true));
SELECT micromegas.mm_write_partition('st_a', 'global', '2024-01-01', '2024-01-02', NULL, NULL,
  's3://bucket/st_a/1', 10, schema_hash, NULL, 100) IS NOT NULL AS written
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'st_a';
SELECT micromegas.mm_write_partition('st_a', 'global', '2024-01-02', '2024-01-03', NULL, NULL,
  's3://bucket/st_a/2', 10, '\x01', NULL, 100) IS NOT NULL AS written_old_schema;
SELECT count(*) AS jobs FROM (SELECT micromegas.mm_refresh_view('st_b', '2024-01-01', '2024-01-02')) j;
SELECT count(*) AS rules FROM micromegas.deny_queries('sql_hash = ''9f2c41ab73de0155''', 'too expensive');
SELECT count(*) AS grants FROM micromegas.mm_grant_audience('ops', 'read', 'group:sre');
