-- The views the lakehouse suite materializes: log_stats (shipped; reads
-- log_entries, merge_sort_order) and one per other source, one of them with
-- hourly partitions, and one view that reads another view.
SELECT status FROM micromegas.mm_create_view($$
CREATE MATERIALIZED VIEW measures_hourly WITH (
  extract_query = 'SELECT date_bin(''1 hour'', time) AS hour, process_id, name, unit, count(*) AS n,
                          min(value) AS lo, max(value) AS hi
                     FROM measures WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''
                    GROUP BY 1, process_id, name, unit',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks
                      WHERE array_has("streams.tags", ''metrics'')
                        AND insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT hour, process_id, name, unit, sum(n) AS n, min(lo) AS lo, max(hi) AS hi
                              FROM {source} GROUP BY hour, process_id, name, unit',
  update_group = 3100, time_column = 'hour',
  source_partition_delta = '1 hour', merge_partition_delta = '1 hour')$$);

SELECT status FROM micromegas.mm_create_view($$
CREATE MATERIALIZED VIEW blocks_per_process WITH (
  extract_query = 'SELECT process_id, date_bin(''1 hour'', insert_time) AS hour, count(*) AS blocks,
                          sum(nb_objects) AS objects
                     FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''
                    GROUP BY process_id, 2',
  count_src_query = 'SELECT count(*) AS count FROM blocks
                      WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT process_id, hour, sum(blocks) AS blocks, sum(objects) AS objects
                              FROM {source} GROUP BY process_id, hour',
  update_group = 3200, time_column = 'hour')$$);

SELECT status FROM micromegas.mm_create_view($$
CREATE MATERIALIZED VIEW processes_seen WITH (
  extract_query = 'SELECT process_id, exe, computer, count(*) AS n, max(insert_time) AS last_insert
                     FROM processes WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''
                    GROUP BY process_id, exe, computer',
  count_src_query = 'SELECT count(*) AS count FROM blocks
                      WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT process_id, exe, computer, sum(n) AS n, max(last_insert) AS last_insert
                              FROM {source} GROUP BY process_id, exe, computer',
  update_group = 3300, time_column = 'last_insert')$$);

SELECT status FROM micromegas.mm_create_view($$
CREATE MATERIALIZED VIEW streams_by_format WITH (
  extract_query = 'SELECT format, process_id, count(*) AS streams, max(insert_time) AS last_insert
                     FROM streams WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''
                    GROUP BY format, process_id',
  count_src_query = 'SELECT count(*) AS count FROM blocks
                      WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT format, process_id, sum(streams) AS streams, max(last_insert) AS last_insert
                              FROM {source} GROUP BY format, process_id',
  update_group = 3300, time_column = 'last_insert')$$);

SELECT status FROM micromegas.mm_create_view($$
CREATE MATERIALIZED VIEW log_levels_daily WITH (
  extract_query = 'SELECT date_bin(''1 day'', time_bin) AS day, level, audience, sum(count) AS count
                     FROM log_stats GROUP BY 1, level, audience',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks
                      WHERE array_has("streams.tags", ''log'')
                        AND insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT day, level, audience, sum(count) AS count FROM {source}
                              GROUP BY day, level, audience',
  update_group = 4000, time_column = 'day')$$);
