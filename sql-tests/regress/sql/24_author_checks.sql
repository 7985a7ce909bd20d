-- The author obligations micromegas leaves to the author, checked on the
-- planned queries: each check fires on its true positives and stays silent
-- on its near misses. A finding is a WARNING (class 01) by default, a
-- refusal (class 42) with micromegas_views.author_checks = error, nothing
-- with off; an admin can require a level a session cannot relax.
SET TimeZone = 'UTC';
CREATE FUNCTION ac_view(name text, extract_sql text, merge_sql text, grp int DEFAULT 4000) RETURNS text
LANGUAGE sql AS $f$
  SELECT format($$CREATE OR REPLACE MATERIALIZED VIEW %s WITH (extract_query = %L, count_src_query = %L,
    merge_partitions_query = %L, update_group = %s, time_column = 'time_bin')$$, name, extract_sql,
    'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
    merge_sql, grp)
$f$;
-- A fresh install's definitions (log_stats) meet every obligation.
SELECT view_set_name, warnings FROM micromegas.list_view_set_definitions() WHERE view_set_name = 'log_stats';
-- (the SQLSTATEs are in the stored findings, shown below)
\set SHOW_CONTEXT never
\set counted '$q$SELECT date_bin(''1 minute'', time) AS time_bin, process_id, count(*) AS count FROM log_entries WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}'' GROUP BY 1, 2$q$'

-- 1. non_composable_merge
-- true positive: count(*) over partitions that already hold counts
SELECT status FROM micromegas.mm_create_view(ac_view('ac_merge_count', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2'));
-- true positive: an average of averages
SELECT status FROM micromegas.mm_create_view(ac_view('ac_merge_avg',
  $q$SELECT date_bin('1 minute', time) AS time_bin, process_id, avg(level) AS mean_level FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY 1, 2$q$,
  'SELECT time_bin, process_id, avg(mean_level) AS mean_level FROM {source} GROUP BY 1, 2'));
-- near misses: sum of the counts; max; a merge that only copies rows
SELECT status FROM micromegas.mm_create_view(ac_view('ac_merge_sum', :counted,
  'SELECT time_bin, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2'));
SELECT status FROM micromegas.mm_create_view(ac_view('ac_merge_max', :counted,
  'SELECT time_bin, process_id, max(count) AS count FROM {source} GROUP BY 1, 2'));
SELECT status FROM micromegas.mm_create_view(ac_view('ac_merge_copy', :counted,
  'SELECT time_bin, process_id, count FROM {source}'));

-- 2. double_count_without_range
-- true positive: count(*) of raw rows with no {begin}/{end}
SELECT status FROM micromegas.mm_create_view(ac_view('ac_unranged_count',
  $q$SELECT date_bin('1 minute', time) AS time_bin, process_id, count(*) AS count FROM log_entries GROUP BY 1, 2$q$,
  'SELECT time_bin, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2'));
-- near misses: the same count bounded by insert_time (above); max unbounded
SELECT status FROM micromegas.mm_create_view(ac_view('ac_unranged_max',
  $q$SELECT date_bin('1 minute', time) AS time_bin, process_id, max(level) AS top FROM log_entries GROUP BY 1, 2$q$,
  'SELECT time_bin, process_id, max(top) AS top FROM {source} GROUP BY 1, 2'));

-- 3. range_filter_column
-- true positive: a raw source bounded on its event time
SELECT status FROM micromegas.mm_create_view(ac_view('ac_event_time',
  $q$SELECT date_bin('1 minute', time) AS time_bin, process_id, count(*) AS count FROM log_entries WHERE time >= '{begin}' AND time < '{end}' GROUP BY 1, 2$q$,
  'SELECT time_bin, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2'));
-- near miss: a view over a materialized view, bounded on its time_bin
SELECT status FROM micromegas.mm_create_view(ac_view('ac_over_view',
  $q$SELECT date_bin('1 hour', time_bin) AS time_bin, process_id, sum(count) AS count FROM ac_merge_sum WHERE time_bin >= '{begin}' AND time_bin < '{end}' GROUP BY 1, 2$q$,
  'SELECT time_bin, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2', 5000));

-- What each view carries: list_view_set_definitions() and mm_explain_view.
SELECT view_set_name, jsonb_path_query_array(warnings, '$[*].check') AS checks
  FROM micromegas.list_view_set_definitions() WHERE view_set_name LIKE 'ac\_%' ORDER BY 1;
SELECT w->>'check' AS check, w->>'sqlstate' AS sqlstate, w->>'message' AS message, w->>'hint' AS hint
  FROM micromegas.lakehouse_view_set_definitions d, jsonb_array_elements(d.warnings) w
 WHERE d.view_set_name IN ('ac_merge_count', 'ac_merge_avg', 'ac_unranged_count', 'ac_event_time') ORDER BY 1, 3;
SELECT view_set_name, would_be, jsonb_path_query_array(warnings, '$[*].check') AS checks
  FROM micromegas.mm_explain_view(ac_view('ac_merge_count', :counted,
       'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2'));

-- author_checks = error refuses with the same message in class 42 (and the
-- dry run says so); off raises nothing but still records the finding.
SET micromegas_views.author_checks = error;
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', ac_view('ac_refused', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2')));
SELECT view_set_name, would_be, problems FROM micromegas.mm_explain_view(ac_view('ac_refused', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2'));
SELECT count(*) AS refused_not_stored FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'ac_refused';
-- The same holds for a write of what a view already stores (its stored
-- findings taken, not planned again, since 0.1.9): refused, left as it was.
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', ac_view('ac_merge_count', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2')));
SET micromegas_views.author_checks = off;
SELECT status FROM micromegas.mm_create_view(ac_view('ac_silent', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2'));
SELECT jsonb_array_length(warnings) AS recorded FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'ac_silent';
RESET micromegas_views.author_checks;

-- An admin requires error for the members of a role: their session cannot
-- switch it off; another admin keeps the default; lifted with off.
CREATE ROLE ac_strict IN ROLE micromegas_admin;
CREATE ROLE ac_lenient IN ROLE micromegas_admin;
SET ROLE ac_lenient;
SELECT * FROM micromegas.mm_require_author_checks('error', 'ac_strict');
SELECT * FROM mmv_try($$SELECT micromegas.mm_require_author_checks('strict')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_require_author_checks('warn', 'no_such_role')$$);
SET ROLE ac_strict;
SET micromegas_views.author_checks = off;
SELECT sqlstate, message FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', ac_view('ac_by_strict', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2')));
SET ROLE ac_lenient;
SELECT sqlstate FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', ac_view('ac_by_lenient', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2')));
-- Switching roles does not shed it: a login member of ac_strict acting as
-- plain micromegas_admin is still bound.
RESET ROLE;
CREATE ROLE ac_alice LOGIN IN ROLE ac_strict, micromegas_admin;
SET SESSION AUTHORIZATION ac_alice;
SET ROLE micromegas_admin;
SET micromegas_views.author_checks = off;
SELECT sqlstate FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', ac_view('ac_by_alice', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2')));
-- Nor can those it binds lower it.
SELECT sqlstate, message, detail FROM mmv_try($$SELECT micromegas.mm_require_author_checks('off', 'ac_strict')$$);
RESET ROLE;
RESET SESSION AUTHORIZATION;
SET ROLE ac_lenient;
-- for the whole database: nobody's session gets below warn
SELECT * FROM micromegas.mm_require_author_checks('warn');
-- an admin it does not bind lifts ac_strict's
SELECT * FROM micromegas.mm_require_author_checks('off', 'ac_strict');
SET ROLE ac_strict;
SET micromegas_views.author_checks = off;
SELECT status FROM micromegas.mm_create_view(ac_view('ac_by_strict', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2'));
-- the database's requirement binds everyone: only a superuser lifts it
SELECT sqlstate FROM mmv_try($$SELECT micromegas.mm_require_author_checks('off')$$);
RESET ROLE;
RESET micromegas_views.author_checks;
SELECT * FROM micromegas.mm_require_author_checks('off');
-- A superuser is bound only by what it was granted and by '*': a
-- requirement for micromegas_admin's members does not bind it (it is not a
-- granted member), one for everyone does.
SELECT * FROM micromegas.mm_require_author_checks('error', 'micromegas_admin');
SET micromegas_views.author_checks = off;
SELECT status FROM micromegas.mm_create_view(ac_view('ac_by_superuser', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2'));
SELECT * FROM micromegas.mm_require_author_checks('error');
SELECT sqlstate FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', ac_view('ac_by_superuser_2', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2')));
RESET micromegas_views.author_checks;
SELECT * FROM micromegas.mm_require_author_checks('off');
SELECT * FROM micromegas.mm_require_author_checks('off', 'micromegas_admin');
-- Requirements are kept by role name: renaming the role lifts its requirement.
CREATE ROLE ac_named IN ROLE micromegas_admin;
SELECT * FROM micromegas.mm_require_author_checks('error', 'ac_named');
ALTER ROLE ac_named RENAME TO ac_renamed;
SET ROLE ac_renamed;
SET micromegas_views.author_checks = off;
SELECT status FROM micromegas.mm_create_view(ac_view('ac_by_renamed', :counted,
  'SELECT time_bin, process_id, count(*) AS count FROM {source} GROUP BY 1, 2'));
RESET micromegas_views.author_checks;
RESET ROLE;
SELECT applies_to, level FROM micromegas.author_check_requirements ORDER BY 1;
DELETE FROM micromegas.author_check_requirements WHERE applies_to = 'ac_named';
-- A reader sees the requirements, and may not change them.
CREATE ROLE ac_reader IN ROLE micromegas_reader;
SET ROLE ac_reader;
SELECT count(*) FROM micromegas.author_check_requirements;
SELECT sqlstate FROM mmv_try($$SELECT micromegas.mm_require_author_checks('off')$$);
RESET ROLE;

SELECT count(*) AS dropped FROM micromegas.lakehouse_view_set_definitions d,
       LATERAL micromegas.mm_drop_view(d.view_set_name::micromegas.view_set_name)
 WHERE d.view_set_name LIKE 'ac\_%' AND d.view_set_name <> 'ac_merge_sum';
SELECT count(*) AS dropped FROM micromegas.mm_drop_view('ac_merge_sum'::micromegas.view_set_name);
DROP ROLE ac_alice, ac_strict, ac_lenient, ac_reader, ac_renamed;
DROP FUNCTION ac_view(text, text, text, int);
