-- Every CREATE-time check through SQL (42P17), and a direct INSERT refused
-- exactly like mm_create_view. Each case changes one option of a valid view.
CREATE FUNCTION check_view(extract_q text DEFAULT NULL, count_q text DEFAULT NULL, merge_q text DEFAULT NULL,
                           grp integer DEFAULT 4000, time_col text DEFAULT 'time_bin', sort_order text DEFAULT 'time_bin, target')
RETURNS TABLE (sqlstate text, message text, detail text, hint text) LANGUAGE sql AS $f$
  SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', format(
    'CREATE OR REPLACE MATERIALIZED VIEW checked WITH (extract_query = %s, count_src_query = %s, merge_partitions_query = %s, update_group = %s, time_column = %L, merge_sort_order = %L)',
    quote_literal(coalesce(extract_q, $$SELECT date_bin('1 minute', time) AS time_bin, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY time_bin, target, audience$$)),
    quote_literal(coalesce(count_q, $$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$)),
    quote_literal(coalesce(merge_q, $$SELECT time_bin, target, sum(count) AS count, audience FROM {source} GROUP BY time_bin, target, audience$$)),
    grp, time_col, sort_order)))
$f$;

-- Accepted: the seed's example.
SELECT * FROM check_view();
-- The extract query must plan.
SELECT * FROM check_view(extract_q => 'SELECT nope FROM log_entries');
SELECT * FROM check_view(extract_q => 'SELECT * FROM no_such_view');
SELECT * FROM check_view(extract_q => 'SELECT no_such_function(msg) FROM log_entries');
-- An audience or process_id column of a string type.
SELECT * FROM check_view(extract_q => 'SELECT time AS time_bin, msg AS target FROM log_entries', merge_q => 'SELECT time_bin, target FROM {source}');
-- The merge output matches the extract schema (names, types, order).
SELECT * FROM check_view(merge_q => 'SELECT time_bin, target, audience, sum(count) AS count FROM {source} GROUP BY 1, 2, 3');
SELECT * FROM check_view(merge_q => 'SELECT time_bin, target, sum(count) AS total, audience FROM {source} GROUP BY 1, 2, 4');
-- The count query: exactly one integer column named count.
SELECT * FROM check_view(count_q => $$SELECT sum(nb_objects) AS n FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$);
SELECT * FROM check_view(count_q => $$SELECT avg(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$);
-- Placeholders.
SELECT * FROM check_view(count_q => $$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time < '{end}'$$);
SELECT * FROM check_view(count_q => $$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}'$$);
SELECT * FROM check_view(merge_q => 'SELECT time_bin, target, count, audience FROM log_stats -- FROM {source}');
-- No function that is not immutable: now() is stable, random() volatile.
SELECT * FROM check_view(merge_q => 'SELECT time_bin, target, sum(count) AS count, audience FROM {source} WHERE time_bin < now() GROUP BY 1, 2, 4');
SELECT * FROM check_view(count_q => $$SELECT sum(nb_objects) AS count FROM blocks WHERE random() < 0.5 AND insert_time >= '{begin}' AND insert_time < '{end}'$$);
-- No admin or per-instance function.
SELECT * FROM check_view(extract_q => $$SELECT * FROM view_instance('thread_spans', 'p1')$$);
SELECT * FROM check_view(extract_q => $$SELECT * FROM retire_partitions('log_stats', 'global', '{begin}', '{end}')$$);
-- update_group above every view set read.
SELECT * FROM check_view(grp => 2000);
-- merge_sort_order columns exist.
SELECT * FROM check_view(sort_order => 'time_bin, exe');
-- Time columns exist and are nanosecond timestamps.
SELECT * FROM check_view(time_col => 'time');
SELECT * FROM check_view(time_col => 'count');
-- Exactly one read-only query.
SELECT * FROM check_view(extract_q => $$CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/tmp/x'$$);
SELECT * FROM check_view(extract_q => $$COPY (SELECT 1) TO '/tmp/x'$$);
SELECT * FROM check_view(extract_q => 'INSERT INTO log_entries VALUES (1)');
SELECT * FROM check_view(extract_q => 'SET datafusion.execution.batch_size = 1');
SELECT * FROM check_view(extract_q => 'SELECT 1; SELECT 2');
-- The count query reads only raw tables (never a view).
SELECT * FROM check_view(count_q => $$SELECT count(*) AS count FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$);
SELECT * FROM check_view(count_q => $$SELECT sum(count) AS count FROM log_stats WHERE time_bin >= '{begin}' AND time_bin < '{end}'$$);
-- Instance-only view sets have no global instance.
SELECT * FROM check_view(extract_q => 'SELECT * FROM thread_spans');
-- Hostile sizes: errors, never a crash.
SELECT * FROM check_view(extract_q => 'SELECT ' || repeat('(', 10000) || '1' || repeat(')', 10000) || ' AS x');
SELECT * FROM check_view(extract_q => 'SELECT 1' || repeat(' + 1', 20000) || ' AS x');
SELECT sqlstate, message FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', 'CREATE MATERIALIZED VIEW big WITH (extract_query = ''' || repeat('x', 1024 * 1024) || ''')'));

-- A view reading log_stats: group 4000 validates, 3000 is refused.
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW daily WITH (
  extract_query = $q$SELECT date_bin(''1 day'', time_bin) AS day, process_id, sum(count) AS count FROM log_stats WHERE time_bin >= ''{begin}'' AND time_bin < ''{end}'' GROUP BY 1, 2$q$,
  count_src_query = $q$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''$q$,
  merge_partitions_query = $q$SELECT day, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2$q$,
  update_group = 3000, time_column = ''day'')')$$);
SELECT view_set_name, status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW daily WITH (
  extract_query = $q$SELECT date_bin('1 day', time_bin) AS day, process_id, sum(count) AS count FROM log_stats WHERE time_bin >= '{begin}' AND time_bin < '{end}' GROUP BY 1, 2$q$,
  count_src_query = $q$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$q$,
  merge_partitions_query = $q$SELECT day, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2$q$,
  update_group = 4000, time_column = 'day')$$);
SELECT view_set_name, update_group, reads FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'daily';

-- A direct INSERT goes through the same checks.
SELECT * FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions
  (view_set_name, extract_query, count_src_query, merge_partitions_query, update_group, view_options)
  VALUES ('direct', 'SELECT time, process_id FROM log_entries', 'SELECT count(*) AS count FROM blocks', 'SELECT time, process_id FROM {source}', 4000, '{"time_column": "time"}')$$);
SELECT * FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions
  (view_set_name, extract_query, count_src_query, merge_partitions_query, update_group, view_options)
  VALUES ('direct', 'SELECT time, process_id FROM log_entries', 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', 'SELECT time, process_id FROM {source}', 4000, '{"time_column": "time", "colour": "red"}')$$);
INSERT INTO micromegas.lakehouse_view_set_definitions
  (view_set_name, extract_query, count_src_query, merge_partitions_query, update_group, view_options)
  VALUES ('direct', 'SELECT time, process_id FROM log_entries', $$SELECT count(*) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$, 'SELECT time, process_id FROM {source}', 4000, '{"time_column": "time"}');
SELECT definition_sql, view_options FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'direct';
-- Only the text, or only the columns, may be written; the other is derived.
INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql)
VALUES ('from_text', $$CREATE MATERIALIZED VIEW from_text WITH (extract_query = 'SELECT time, process_id FROM log_entries', count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', merge_partitions_query = 'SELECT time, process_id FROM {source}', update_group = 4500, time_column = 'time')$$);
SELECT update_group, view_options->>'min_time_column' AS min_time FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'from_text';
UPDATE micromegas.lakehouse_view_set_definitions SET update_group = 4600 WHERE view_set_name = 'from_text';
SELECT update_group, definition_sql LIKE '%update_group           = 4600%' AS rerendered FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'from_text';
SELECT * FROM mmv_try($$UPDATE micromegas.lakehouse_view_set_definitions SET update_group = 1500 WHERE view_set_name = 'from_text'$$);
SELECT * FROM mmv_try($$UPDATE micromegas.lakehouse_view_set_definitions SET view_set_name = 'renamed' WHERE view_set_name = 'from_text'$$);
SELECT * FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql) VALUES ('other_name', (SELECT definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'from_text'))$$);
SELECT * FROM mmv_try($$TRUNCATE micromegas.lakehouse_view_set_definitions$$);
-- An INSERT whose text says CREATE OR REPLACE replaces the row (the text
-- is stored as written): the trigger turns it into an UPDATE, so RETURNING
-- gives no row. ON CONFLICT does not upsert: with a plain CREATE text the
-- INSERT is 42710 before any conflict is looked at; with an OR REPLACE text
-- there is no conflict, the text replaces and DO UPDATE never runs.
INSERT INTO micromegas.lakehouse_view_set_definitions (definition_sql)
  SELECT replace(replace(definition_sql, 'CREATE MATERIALIZED VIEW', 'CREATE OR REPLACE MATERIALIZED VIEW'), '= 4600', '= 4700')
    FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'from_text'
RETURNING view_set_name;
SELECT update_group, left(definition_sql, 46) AS stored_text
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'from_text';
SELECT * FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql)
  SELECT view_set_name, replace(definition_sql, 'CREATE OR REPLACE', 'CREATE')
    FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'from_text'
  ON CONFLICT (view_set_name) DO UPDATE SET update_group = 4800$$);
SELECT * FROM mmv_try($$INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql)
  SELECT view_set_name, replace(definition_sql, 'CREATE OR REPLACE', 'CREATE')
    FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'from_text'
  ON CONFLICT DO NOTHING$$);
INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql)
  SELECT view_set_name, definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'from_text'
  ON CONFLICT (view_set_name) DO UPDATE SET update_group = 4800;
SELECT update_group FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'from_text';
