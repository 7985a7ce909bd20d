-- The options' rules: required, defaults, formats.
\set q 'extract_query = $$SELECT date_bin(''1 minute'', time) AS time_bin, process_id, count(*) AS count FROM log_entries GROUP BY 1, 2$$, count_src_query = $$SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''$$, merge_partitions_query = $$SELECT time_bin, process_id, sum(count) AS count FROM {source} GROUP BY 1, 2$$'

-- Defaults: both deltas '1 day', merge delta follows the source delta, no sort order.
SELECT status FROM micromegas.mm_create_view(format('CREATE MATERIALIZED VIEW opt_defaults WITH (%s, update_group = 4000, time_column = %L)', :'q', 'time_bin'));
SELECT status FROM micromegas.mm_create_view(format('CREATE MATERIALIZED VIEW opt_delta WITH (%s, update_group = 4000, time_column = %L, source_partition_delta = %L, merge_sort_order = %L)', :'q', 'time_bin', '6 hours', 'time_bin, process_id'));
SELECT status FROM micromegas.mm_create_view(format('CREATE MATERIALIZED VIEW opt_minmax WITH (%s, update_group = 4000, min_time_column = %L, max_time_column = %L, merge_partition_delta = %L)', :'q', 'time_bin', 'time_bin', '2 days'));
SELECT view_set_name, view_options FROM micromegas.lakehouse_view_set_definitions
 WHERE view_set_name LIKE 'opt_%' ORDER BY 1;

-- Rejected: 22023.
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, time_column = ''time_bin'')')$f$, replace(:'q', '''', '''''')));
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, update_group = 4000)')$f$, replace(:'q', '''', '''''')));
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, update_group = 4000, min_time_column = ''time_bin'')')$f$, replace(:'q', '''', '''''')));
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, update_group = 4000, time_column = ''time_bin'', colour = ''red'')')$f$, replace(:'q', '''', '''''')));
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, update_group = 4000, time_column = ''time_bin'', time_column = ''x'')')$f$, replace(:'q', '''', '''''')));
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, update_group = ''4000'', time_column = ''time_bin'')')$f$, replace(:'q', '''', '''''')));
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, update_group = 4000, time_column = ''time_bin'', source_partition_delta = ''1 week'')')$f$, replace(:'q', '''', '''''')));
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, update_group = 4000, time_column = ''time_bin'', merge_partition_delta = ''0 days'')')$f$, replace(:'q', '''', '''''')));
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, update_group = 4000, time_column = ''time_bin'', merge_sort_order = '' , '')')$f$, replace(:'q', '''', '''''')));
SELECT * FROM mmv_try(format($f$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW o WITH (%s, update_group = 99999999999, time_column = ''time_bin'')')$f$, replace(:'q', '''', '''''')));
SELECT count(*) AS unchanged FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'o';

-- The named-argument form stores a canonical statement.
SELECT view_set_name, status FROM micromegas.mm_create_view(
  name => 'opt_named',
  extract_query => 'SELECT time, process_id FROM log_entries',
  count_src_query => $$SELECT count(*) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$,
  merge_partitions_query => 'SELECT time, process_id FROM {source}',
  update_group => 4000,
  time_column => 'time',
  merge_sort_order => 'time');
SELECT definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'opt_named';
SELECT view_set_name, status FROM micromegas.mm_create_view(
  name => 'opt_named', or_replace => true,
  extract_query => 'SELECT time, process_id FROM log_entries WHERE level < 3',
  count_src_query => $$SELECT count(*) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'$$,
  merge_partitions_query => 'SELECT time, process_id FROM {source}',
  update_group => 4000, time_column => 'time');
SELECT * FROM mmv_try($$SELECT micromegas.mm_create_view(name => 'opt_unnamed_time', extract_query => 'x', count_src_query => 'y', merge_partitions_query => 'z', update_group => 1)$$);
