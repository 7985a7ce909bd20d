-- The DDL grammar: accepted forms, then one rejected case per rule.
SELECT * FROM micromegas.mm_create_view($stmt$
  -- keywords in any case, comments, dollar tags, quoted literals
  create materialized VIEW Parse_Ok /* the name folds to lower case */ with (
    extract_query = $q$SELECT time, process_id FROM log_entries WHERE msg <> 'it''s'$q$,
    count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
    merge_partitions_query = $$SELECT time, process_id FROM {source}$$,
    update_group = 4000,
    time_column = 'time'
  );
$stmt$) AS r(name, status, version_ignored) \gset
\echo :name :status
SELECT extract_query, count_src_query FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'parse_ok';

-- A quoted lower-case name is accepted as written.
SELECT view_set_name, status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW "parse_quoted" WITH (
  extract_query = 'SELECT time, process_id FROM log_entries', count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT time, process_id FROM {source}', update_group = 4000, time_column = 'time')$$);

-- Rejected: 42601 with the position.
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view('CREATE VIEW v WITH (update_group = 1)')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW v WITH (update_group = 1')$$);
SELECT * FROM mmv_try($t$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW v WITH (extract_query = $$unterminated)')$t$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW v WITH (update_group = 1) trailing')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW v WITH (update_group = bare_word)')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view('DROP MATERIALIZED VIEW v')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('CREATE MATERIALIZED VIEW v WITH (update_group = 1)')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('DROP MATERIALIZED VIEW a, b')$$);
