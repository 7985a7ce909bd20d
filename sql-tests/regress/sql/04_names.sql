-- View names: lower-case identifiers, not reserved, unique.
\set body 'extract_query = ''SELECT time, process_id FROM log_entries'', count_src_query = ''SELECT count(*) AS count FROM blocks WHERE insert_time >= ''''{begin}'''' AND insert_time < ''''{end}'''''', merge_partitions_query = ''SELECT time, process_id FROM {source}'', update_group = 4000, time_column = ''time'''
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', format('CREATE MATERIALIZED VIEW "CamelCase" WITH (%s)', :'body')));
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', format('CREATE MATERIALIZED VIEW source WITH (%s)', :'body')));
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', format('CREATE MATERIALIZED VIEW __hidden WITH (%s)', :'body')));
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', format('CREATE MATERIALIZED VIEW log_entries WITH (%s)', :'body')));
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', format('CREATE MATERIALIZED VIEW thread_spans WITH (%s)', :'body')));
-- CREATE of an existing name without OR REPLACE: 42710; with it: replaced.
SELECT * FROM mmv_try(format('SELECT micromegas.mm_create_view(%L)', format('CREATE MATERIALIZED VIEW parse_ok WITH (%s)', :'body')));
SELECT view_set_name, status FROM micromegas.mm_create_view(format('CREATE OR REPLACE MATERIALIZED VIEW parse_ok WITH (%s)', :'body'));
-- DROP: dropped, not_found with IF EXISTS, 42704 without, 42809 for a built-in.
SELECT view_set_name, status FROM micromegas.mm_drop_view('DROP MATERIALIZED VIEW parse_quoted;');
SELECT view_set_name, status FROM micromegas.mm_drop_view('drop materialized view if exists parse_quoted');
SELECT view_set_name, status FROM micromegas.mm_drop_view('parse_ok', true);
SELECT view_set_name, status FROM micromegas.mm_drop_view(name => 'parse_ok', if_exists => true);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('DROP MATERIALIZED VIEW parse_quoted')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view(name => 'nope')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('DROP MATERIALIZED VIEW blocks')$$);
