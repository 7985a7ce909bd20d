-- The query deny list: rules compiled with DataFusion before
-- anything is written, on every path; the cap; listing, matching, removing,
-- recording hits; the announcements; and mm_sql_hash.
-- 1. A good rule: one (time, msg) row, msg the new id.
SELECT count(*) AS rows, bool_and(msg ~ '^[0-9a-f-]{36}$') AS msg_is_the_id
  FROM micromegas.deny_queries('sql_hash = ''9f2c41ab73de0155'' AND entrypoint = ''grafana-alert''',
                               'alert rule re-firing on failure; owner notified');
SET micromegas_views.actor = 'oncall@example.com';
SELECT count(*) FROM micromegas.deny_queries('user_id = ''dashboards-svc'' AND notebook = ''fleet-overview''',
                                            'dashboard stuck at a 1s refresh interval');
SELECT count(*) FROM micromegas.deny_queries('sql LIKE ''%thread_spans%'' OR client_ip = ''10.4.9.221''',
                                            'incident: thread_spans scan storm');
RESET micromegas_views.actor;
SELECT created_by, reason, match_expr, last_hit_at FROM micromegas.list_query_denials();

-- 2. Refused, before anything is written, with DataFusion's diagnostic.
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('client', 'not boolean')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('true', 'no column')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('1 = 1', 'no column')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('client = 42', 'coercion')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('notebook = CAST(''2024-01-01'' AS TIMESTAMP)', 'coercion')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('notebook = now()', 'not a rule function')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('levenshtein(sql, ''abc'') < 2', 'quadratic')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('sql || sql = ''x''', 'multiplies')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('user = ''jean''', 'user is a function')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('colour = ''red''', 'unknown column')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('count(client) > 1', 'aggregate')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('row_number() OVER () = 1 AND client = ''a''', 'window')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('client IN (SELECT 1)', 'subquery')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('length(repeat(sql, 1000000)) > 5', 'amplifies its input')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('client = ''a''; DROP TABLE x', 'two statements')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('client = ''a''', '   ')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('client = ''a''', NULL)$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('regexp_like(sql, ''('')', 'bad pattern')$$);
-- The same checks on a direct write of the table.
SELECT * FROM mmv_try($$INSERT INTO micromegas.query_deny_list (match_expr, reason) VALUES ('client = 42', 'direct')$$);
SELECT * FROM mmv_try($$UPDATE micromegas.query_deny_list SET match_expr = 'true' WHERE reason LIKE 'incident%'$$);
SELECT sqlstate, regexp_replace(message, '[0-9a-f-]{36}', '<rule_id>') AS message, hint
  FROM mmv_try($$UPDATE micromegas.query_deny_list SET created_by = 'someone else'$$);
SELECT * FROM mmv_try($$TRUNCATE micromegas.query_deny_list$$);
SELECT count(*) AS rules FROM micromegas.query_deny_list;

-- 3. Matching: the first TRUE rule, oldest first; NULL is no match.
SELECT reason FROM micromegas.mm_match_query_denial(entrypoint => 'grafana-alert', sql_hash => '9f2c41ab73de0155');
SELECT reason FROM micromegas.mm_match_query_denial(user_id => 'dashboards-svc');  -- notebook NULL: no match
SELECT reason FROM micromegas.mm_match_query_denial(user_id => 'dashboards-svc', notebook => 'fleet-overview');
SELECT reason FROM micromegas.mm_match_query_denial(sql => 'SELECT * FROM thread_spans', client_ip => '10.0.0.1');
-- sql_hash, when not given, is the fingerprint of sql.
SELECT count(*) FROM micromegas.deny_queries(format('sql_hash = %L', micromegas.mm_sql_hash('SELECT count(*) FROM measures WHERE name = ''cpu''')), 'by fingerprint');
SELECT reason FROM micromegas.mm_match_query_denial(sql => 'select COUNT(*) from measures where name = ''mem''');
SELECT reason FROM micromegas.mm_match_query_denial_context('{"entrypoint": "grafana-alert", "sql_hash": "9f2c41ab73de0155"}');
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_match_query_denial_context('{"entrypointz": "x"}')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_match_query_denial_context('[1]')$$);

-- 4. Hits: last_hit_at only moves forward, and announces nothing.
SELECT micromegas.mm_record_query_denial_hits(ARRAY(SELECT rule_id FROM micromegas.query_deny_list WHERE reason LIKE 'incident%'),
                                              '2026-01-02 00:00:00+00');
SELECT micromegas.mm_record_query_denial_hits(ARRAY(SELECT rule_id FROM micromegas.query_deny_list WHERE reason LIKE 'incident%'),
                                              '2026-01-01 00:00:00+00');
SELECT reason, last_hit_at FROM micromegas.list_query_denials() WHERE last_hit_at IS NOT NULL;
-- A rule that does not exist is skipped (one rule recorded of two ids); a
-- NULL time is now.
SELECT micromegas.mm_record_query_denial_hits(ARRAY[gen_random_uuid()] || ARRAY(SELECT rule_id FROM micromegas.query_deny_list WHERE reason LIKE 'incident%'), NULL);
SELECT reason, last_hit_at > now() - interval '1 minute' AS hit_now FROM micromegas.list_query_denials() WHERE last_hit_at IS NOT NULL;

-- 5. Removing: the three outcomes, as text.
SELECT micromegas.remove_query_denial(rule_id) = 'SUCCESS: removed rule ' || rule_id AS removed
  FROM micromegas.list_query_denials() WHERE reason = 'by fingerprint';
SELECT micromegas.remove_query_denial('00000000-0000-4000-8000-000000000000');
SELECT micromegas.remove_query_denial('not-a-uuid');

-- 6. The cap, exactly (a superuser setting: no other role may lift it).
SET micromegas_views.query_deny_max_rules = 3;
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('client = ''one too many''', 'cap')$$);
SET micromegas_views.query_deny_max_rules = 4;
SELECT count(*) FROM micromegas.deny_queries('client = ''fourth''', 'cap');
RESET micromegas_views.query_deny_max_rules;
CREATE ROLE mmv_deny_admin IN ROLE micromegas_admin;
SET ROLE mmv_deny_admin;
SELECT * FROM mmv_try($$SET micromegas_views.query_deny_max_rules = 1000$$);
-- An admin uses the functions; a reader may match and record hits, not write.
SELECT count(*) AS admin_sees FROM micromegas.list_query_denials();
RESET ROLE;
CREATE ROLE mmv_deny_reader IN ROLE micromegas_reader;
SET ROLE mmv_deny_reader;
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('client = ''x''', 'reader')$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.list_query_denials()$$);
SELECT * FROM mmv_try($$DELETE FROM micromegas.query_deny_list$$);
-- A plain reader (a dashboard) neither loads the rules nor records hits:
-- that is the service's.
SELECT * FROM mmv_try($$SELECT reason FROM micromegas.mm_match_query_denial(client => 'fourth')$$);
SELECT * FROM mmv_try($$SELECT count(*) FROM micromegas.query_deny_list$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_record_query_denial_hits(ARRAY(SELECT gen_random_uuid()), now())$$);
RESET ROLE;
CREATE ROLE mmv_deny_service IN ROLE micromegas_service;
SET ROLE mmv_deny_service;
SELECT reason FROM micromegas.mm_match_query_denial(client => 'fourth');
SELECT count(*) AS service_loads FROM micromegas.query_deny_list;
SELECT * FROM mmv_try($$SELECT * FROM micromegas.deny_queries('client = ''x''', 'service')$$);
RESET ROLE;

-- 7. mm_sql_hash: the issue's vectors, and what must not change the hash.
SELECT s, micromegas.mm_sql_hash(s) FROM (VALUES
  ('SELECT 1'),
  ('SELECT a FROM t WHERE b = 1'),
  ('select  A from T  -- c
   where /* x */ B = 99'),
  ('SELECT time, msg FROM log_entries WHERE time >= ''2024-01-01T00:00:00Z'' AND level <= 3'),
  ('SELECT b."processes.exe" FROM blocks b'),
  ('SELECT $$x$$, E''a'', X''0F'', N''n'', 1.5e3'),
  ('SELECT ''unterminated')) v(s);
SELECT count(DISTINCT micromegas.mm_sql_hash(s)) AS distinct_hashes FROM (VALUES
  ('SELECT name FROM processes WHERE pid = 7 AND exe = ''a'''),
  ('select name from processes where pid = 123456 and exe = ''other'''),
  ('SELECT name
      FROM processes -- comment
     WHERE pid = 0.5 /* another */ AND exe = ''''')) v(s);
SELECT micromegas.mm_sql_hash('SELECT $$a$$') <> micromegas.mm_sql_hash('SELECT $$b$$') AS dollar_quotes_count,
       micromegas.mm_sql_hash('SELECT "A"') <> micromegas.mm_sql_hash('SELECT "a"') AS quoted_case_counts;

-- coalesce and nvl (which DataFusion defines only as a rewrite) compile and
-- decide; a reason of tabs and newlines is blank; no id is no rule (0.1.10).
DELETE FROM micromegas.query_deny_list;
SELECT sqlstate FROM mmv_try($$SELECT micromegas.deny_queries('coalesce(user_id, ''anonymous'') = ''anonymous''', 'no user')$$);
SELECT (SELECT count(*) FROM micromegas.mm_match_query_denial(client => 'c')) AS anonymous_denied,
       (SELECT count(*) FROM micromegas.mm_match_query_denial(client => 'c', user_id => 'bob')) AS bob_denied;
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas.deny_queries('user_id = ''b''', E'\t\n ')$$);
SELECT micromegas.remove_query_denial(NULL);
DELETE FROM micromegas.query_deny_list;
DROP ROLE mmv_deny_admin, mmv_deny_reader, mmv_deny_service;
