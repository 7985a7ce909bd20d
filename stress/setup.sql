-- The randomized DDL stress: one step creates, replaces or drops a view in a
-- small name space (s_1 … s_6) reading log_entries or a lower-numbered view,
-- with a random group and column set, so that many steps are refused. Refusals
-- are expected and counted; anything else aborts the run.
-- The cluster's roles were made by the first install and have members by
-- now: adopted (README, Operations).
SET micromegas_views.adopt_existing_roles = on;
CREATE SCHEMA IF NOT EXISTS btree_gist;
CREATE EXTENSION IF NOT EXISTS btree_gist SCHEMA btree_gist;
CREATE EXTENSION IF NOT EXISTS micromegas_views;
DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 's\_%';

CREATE TABLE IF NOT EXISTS mmv_stress_outcomes (outcome text, n bigint, PRIMARY KEY (outcome));
TRUNCATE mmv_stress_outcomes;

CREATE OR REPLACE FUNCTION mmv_stress_step(n int, op int, wide int, src int, grp int) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  source text := CASE WHEN n = 1 OR src = 0 THEN 'log_entries' ELSE 's_' || (1 + src % (n - 1)) END;
  cols text := CASE WHEN wide = 1 THEN 'time, process_id, level' ELSE 'time, process_id' END;
  result text;
BEGIN
  IF op = 3 THEN
    PERFORM micromegas.mm_drop_view(format('DROP MATERIALIZED VIEW IF EXISTS s_%s', n));
    result := 'drop';
  ELSE
    PERFORM micromegas.mm_create_view(format(
      'CREATE OR REPLACE MATERIALIZED VIEW s_%s WITH (extract_query = %L, count_src_query = %L, merge_partitions_query = %L, update_group = %s, time_column = %L)',
      n, format('SELECT %s FROM %s', cols, source),
      'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
      format('SELECT %s FROM {source}', cols), 4000 + grp * 100, 'time'));
    result := 'create_or_replace';
  END IF;
  INSERT INTO mmv_stress_outcomes VALUES (result, 1) ON CONFLICT (outcome) DO UPDATE SET n = mmv_stress_outcomes.n + 1;
  RETURN result;
EXCEPTION
  WHEN dependent_objects_still_exist OR invalid_object_definition THEN
    INSERT INTO mmv_stress_outcomes VALUES ('refused ' || SQLSTATE, 1) ON CONFLICT (outcome) DO UPDATE SET n = mmv_stress_outcomes.n + 1;
    RETURN 'refused';
END
$$;
