CREATE MATERIALIZED VIEW log_stats WITH (
  extract_query = $$
    SELECT date_bin('1 minute', time) AS time_bin, process_id, level, target, count(*) AS count,
           arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience
      FROM log_entries
     WHERE insert_time >= '{begin}' AND insert_time < '{end}'
     GROUP BY process_id, level, target, time_bin
  $$,
  count_src_query = $$
    SELECT sum(nb_objects) AS count
      FROM blocks
     WHERE array_has("streams.tags", 'log')
       AND insert_time >= '{begin}' AND insert_time < '{end}'
  $$,
  merge_partitions_query = $$
    SELECT time_bin, process_id, level, target, sum(count) AS count, audience
      FROM {source}
     GROUP BY process_id, level, target, time_bin, audience
  $$,
  update_group           = 3000,
  time_column            = 'time_bin',
  source_partition_delta = '1 day',
  merge_partition_delta  = '1 day',
  merge_sort_order       = 'time_bin, process_id, level, target'
);
