-- mm_explain_view on a hot standby cannot write, not even to roll back: it
-- asks the write path's questions without writing (_mm_explain_view with
-- read_only => true). Here, on the primary, both ways answer every case,
-- and must answer the same (scripts/standby_test.sh asks a real standby).
SET TimeZone = 'UTC';
CREATE FUNCTION sd_view(name text, extract_sql text, merge_sql text, grp int, replace boolean DEFAULT false) RETURNS text
LANGUAGE sql AS $f$
  SELECT format($$CREATE %sMATERIALIZED VIEW %s WITH (extract_query = %L, count_src_query = %L,
    merge_partitions_query = %L, update_group = %s, time_column = 'time')$$,
    CASE WHEN replace THEN 'OR REPLACE ' ELSE '' END, name, extract_sql,
    'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
    merge_sql, grp)
$f$;
-- a chain: sd_a (raw) <- sd_b <- sd_c, and sd_d beside sd_b.
SELECT status FROM micromegas.mm_create_view(sd_view('sd_a',
  'SELECT time, process_id, level FROM log_entries', 'SELECT time, process_id, level FROM {source}', 4000));
SELECT status FROM micromegas.mm_create_view(sd_view('sd_b',
  'SELECT time, process_id, level AS peak FROM sd_a', 'SELECT time, process_id, peak FROM {source}', 5000));
SELECT status FROM micromegas.mm_create_view(sd_view('sd_c',
  'SELECT time, process_id, peak + 1 AS next FROM sd_b', 'SELECT time, process_id, next FROM {source}', 6000));
SELECT status FROM micromegas.mm_create_view(sd_view('sd_d',
  'SELECT time, process_id, level FROM sd_a', 'SELECT time, process_id, level FROM {source}', 5000));

CREATE TABLE sd_cases (label text PRIMARY KEY, statement text);
INSERT INTO sd_cases VALUES
  ('new view', sd_view('sd_new', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}', 4500)),
  ('new view reading a chain', sd_view('sd_new2', 'SELECT time, process_id, next FROM sd_c', 'SELECT time, process_id, next FROM {source}', 7000)),
  ('plain create of an existing view', sd_view('sd_a', 'SELECT time, process_id, level FROM log_entries', 'SELECT time, process_id, level FROM {source}', 4000)),
  ('a built-in''s name', sd_view('log_entries', 'SELECT time FROM blocks', 'SELECT time FROM {source}', 4000)),
  ('replace, same schema', sd_view('sd_a', 'SELECT time, process_id, level FROM log_entries WHERE level < 9', 'SELECT time, process_id, level FROM {source}', 4000, true)),
  ('replace moving a group, dependents still above', sd_view('sd_a', 'SELECT time, process_id, level FROM log_entries', 'SELECT time, process_id, level FROM {source}', 3000, true)),
  ('replace moving a group above a dependent', sd_view('sd_a', 'SELECT time, process_id, level FROM log_entries', 'SELECT time, process_id, level FROM {source}', 5500, true)),
  ('replace widening a type: dependents follow', sd_view('sd_a', 'SELECT time, process_id, CAST(level AS bigint) AS level FROM log_entries', 'SELECT time, process_id, level FROM {source}', 4000, true)),
  ('replace breaking a dependent of a dependent', sd_view('sd_a', 'SELECT time, process_id, CAST(level AS text) AS level FROM log_entries', 'SELECT time, process_id, level FROM {source}', 4000, true)),
  ('replace dropping a column a dependent reads', sd_view('sd_a', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}', 4000, true)),
  ('replace in the middle of the chain', sd_view('sd_b', 'SELECT time, process_id, CAST(level AS double) AS peak FROM sd_a', 'SELECT time, process_id, peak FROM {source}', 5000, true)),
  ('unknown column', sd_view('sd_x', 'SELECT nope FROM log_entries', 'SELECT nope FROM {source}', 4000)),
  ('not a statement', 'CREATE MATERIALIZED VIEW sd_y WITH (oops)'),
  ('a drop statement', 'DROP MATERIALIZED VIEW sd_a');

-- Each case, answered the read-only way, and whether the rolled-back write
-- answers exactly the same (every column).
-- (The position and the list of valid fields depend on what earlier tests
-- left in the catalog: only their presence is shown.)
SELECT c.label, r.view_set_name, r.would_be, r.dependents, r.materialization_position IS NOT NULL AS positioned,
       regexp_replace(r.problems::text, 'Valid fields are [^"]*', 'Valid fields are ...') AS problems,
       ROW(r.*)::text IS NOT DISTINCT FROM ROW(w.*)::text AS same_as_write
  FROM sd_cases c,
       LATERAL micromegas._mm_explain_view(c.statement, true) r,
       LATERAL micromegas._mm_explain_view(c.statement, false) w
 ORDER BY c.label;
-- The schema the read-only way computes is the write's, field by field.
SELECT c.label, r.schema = w.schema AND r.schema_hash = w.schema_hash AND r.reads = w.reads AS same_schema
  FROM sd_cases c,
       LATERAL micromegas._mm_explain_view(c.statement, true) r,
       LATERAL micromegas._mm_explain_view(c.statement, false) w
 WHERE r.would_be <> 'refused' ORDER BY c.label;
-- Neither wrote anything: the catalog version and the rows are as before.
SELECT micromegas.mm_catalog_version() = (SELECT max(version) FROM micromegas.lakehouse_view_set_definition_history) AS unchanged_version,
       (SELECT count(*) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'sd\_%') AS sd_views;
SELECT v AS dropped, (SELECT count(*) FROM micromegas.mm_drop_view(v::micromegas.view_set_name)) AS rows
  FROM unnest(ARRAY['sd_c', 'sd_b', 'sd_d', 'sd_a']) v;

-- Shapes with views that failed to load (a built-in lost a column they
-- read): the write re-checks a failed view's dependents leniently, and
-- rewrites a failed dependent that validates again even when its schema
-- stays; the dry run follows both.
CREATE FUNCTION sd_builtin(name text, with_level boolean, with_extra boolean) RETURNS text
LANGUAGE sql AS $f$
  SELECT view_set_name FROM micromegas.mm_register_builtin_view_set(name, format('{"fields": [%s]}', concat_ws(', ',
    '{"name": "time", "type": "Timestamp(ns, \"+00:00\")", "nullable": false}',
    '{"name": "process_id", "type": "Utf8", "nullable": false}',
    CASE WHEN with_level THEN '{"name": "level", "type": "Int32", "nullable": true}' END,
    CASE WHEN with_extra THEN '{"name": "extra", "type": "Int64", "nullable": true}' END)), 2500)
$f$;
SELECT sd_builtin('sd_xb', true, true);
SELECT status FROM micromegas.mm_create_view(sd_view('sd_s1', 'SELECT time, process_id, level FROM sd_xb', 'SELECT time, process_id, level FROM {source}', 4000));
SELECT status FROM micromegas.mm_create_view(sd_view('sd_a1',
  'SELECT sd_s1.time, sd_s1.process_id, sd_s1.level, extra FROM sd_s1 JOIN sd_xb ON sd_s1.process_id = sd_xb.process_id',
  'SELECT time, process_id, level, extra FROM {source}', 5000));
SELECT status FROM micromegas.mm_create_view(sd_view('sd_c1',
  'SELECT sd_a1.time, sd_a1.process_id, sd_a1.extra, sd_s1.level FROM sd_a1 JOIN sd_s1 ON sd_a1.process_id = sd_s1.process_id',
  'SELECT time, process_id, extra, level FROM {source}', 6000));
SELECT sd_builtin('sd_xb', true, false);
SELECT sd_builtin('sd_xc', true, false);
SELECT status FROM micromegas.mm_create_view(sd_view('sd_s2', 'SELECT time, process_id, level FROM sd_xc', 'SELECT time, process_id, level FROM {source}', 4000));
SELECT status FROM micromegas.mm_create_view(sd_view('sd_a2', 'SELECT time, process_id, level + 1 AS lv FROM sd_s2', 'SELECT time, process_id, lv FROM {source}', 5000));
SELECT status FROM micromegas.mm_create_view(sd_view('sd_c2', 'SELECT time, process_id, lv FROM sd_a2', 'SELECT time, process_id, lv FROM {source}', 6000));
-- Registering the built-in again without the column a failed view reads
-- marks what reads it, and is never refused (0.1.5 stored an empty schema
-- on the second mark, and its dependents then refused the registration).
SELECT sd_builtin('sd_xc', false, false);
SELECT sd_builtin('sd_xc', false, true);
SELECT view_set_name, load_status, load_error FROM micromegas.lakehouse_view_set_definitions
 WHERE view_set_name ~ '^sd_[sac][12]$' ORDER BY 1;
SELECT count(*) AS empty_schemas FROM micromegas.lakehouse_view_set_definitions
 WHERE view_set_name ~ '^sd_[sac][12]$' AND schema_json->'fields' = '[]';
INSERT INTO sd_cases VALUES
  ('repairing a view whose failed dependent keeps its schema',
   sd_view('sd_s1', 'SELECT time, process_id, level, CAST(level AS BIGINT) AS extra FROM sd_xb', 'SELECT time, process_id, level, extra FROM {source}', 4000, true)),
  ('replacing a failed view: its failed dependents re-checked leniently',
   sd_view('sd_s2', 'SELECT time, process_id, process_id AS level FROM sd_xc', 'SELECT time, process_id, level FROM {source}', 4000, true)),
  ('replacing a failed view: its dependents load again',
   sd_view('sd_s2', 'SELECT time, process_id, CAST(7 AS INT) AS level FROM sd_xc', 'SELECT time, process_id, level FROM {source}', 4000, true));
SELECT c.label, r.would_be, regexp_replace(r.problems::text, 'Valid fields are [^"]*', 'Valid fields are ...') AS problems,
       ROW(r.*)::text IS NOT DISTINCT FROM ROW(w.*)::text AS same_as_write
  FROM sd_cases c,
       LATERAL micromegas._mm_explain_view(c.statement, true) r,
       LATERAL micromegas._mm_explain_view(c.statement, false) w
 WHERE c.label ~ 'fail' ORDER BY c.label;
-- The write agrees: the repair and the replace both go through.
SELECT status FROM micromegas.mm_create_view((SELECT statement FROM sd_cases WHERE label ~ '^repairing'));
SELECT status FROM micromegas.mm_create_view((SELECT statement FROM sd_cases WHERE label ~ 'load again'));
SELECT view_set_name, load_status FROM micromegas.lakehouse_view_set_definitions
 WHERE view_set_name ~ '^sd_[sac][12]$' ORDER BY 1;
-- In a read-only transaction on a primary, mm_explain_view asks without
-- writing too (it would otherwise answer 25006 as the definition's problem).
BEGIN READ ONLY;
SELECT view_set_name, would_be, problems FROM micromegas.mm_explain_view(
  sd_view('sd_new', 'SELECT time, process_id FROM log_entries', 'SELECT time, process_id FROM {source}', 4500));
COMMIT;
SELECT v AS dropped, (SELECT count(*) FROM micromegas.mm_drop_view(v::micromegas.view_set_name)) AS rows
  FROM unnest(ARRAY['sd_c1', 'sd_a1', 'sd_s1', 'sd_c2', 'sd_a2', 'sd_s2']) v;
DELETE FROM micromegas.builtin_view_sets WHERE view_set_name IN ('sd_xb', 'sd_xc');
DROP FUNCTION sd_builtin(text, boolean, boolean);
DROP TABLE sd_cases;
DROP FUNCTION sd_view(text, text, text, int, boolean);
