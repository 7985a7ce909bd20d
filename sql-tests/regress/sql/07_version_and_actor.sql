-- The catalog version strictly increases with every committed change.
SELECT micromegas.mm_catalog_version() AS v0 \gset
SELECT status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW v1 WITH (extract_query = 'SELECT time, process_id FROM log_entries', count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', merge_partitions_query = 'SELECT time, process_id FROM {source}', update_group = 4000, time_column = 'time')$$);
SELECT micromegas.mm_catalog_version() > :v0 AS increased_by_create;
SELECT micromegas.mm_catalog_version() AS v1 \gset
-- A failed change leaves it where it was.
SELECT sqlstate FROM mmv_try($$SELECT micromegas.mm_create_view('CREATE MATERIALIZED VIEW v1 WITH (update_group = 1)')$$);
SELECT micromegas.mm_catalog_version() = :v1 AS unchanged_by_error;
SELECT status FROM micromegas.mm_drop_view('v1');
SELECT micromegas.mm_catalog_version() > :v1 AS increased_by_drop;

-- updated_by: the micromegas_views.actor setting, else session_user.
BEGIN;
SET LOCAL micromegas_views.actor = 'alice@example.com';
SELECT status FROM micromegas.mm_create_view($$CREATE MATERIALIZED VIEW v2 WITH (extract_query = 'SELECT time, process_id FROM log_entries', count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', merge_partitions_query = 'SELECT time, process_id FROM {source}', update_group = 4000, time_column = 'time')$$);
COMMIT;
SELECT view_set_name, updated_by, created_at = updated_at AS fresh FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'v2';
UPDATE micromegas.lakehouse_view_set_definitions SET update_group = 4100 WHERE view_set_name = 'v2';
SELECT view_set_name, updated_by, updated_at > created_at AS updated FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'v2';
SELECT status FROM micromegas.mm_drop_view('v2');
-- An actor longer than any table records is refused by name, whatever the
-- write (0.1.10: a bare 22001 from the grants and the deny list before).
SET micromegas_views.actor = 'a-very-long-actor-name-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx';
SELECT sqlstate, message, hint FROM mmv_try($$SELECT micromegas.mm_grant_audience('team-x', 'read', 'user:bob')$$);
SELECT sqlstate, message FROM mmv_try($$SELECT micromegas.mm_refresh_view('log_entries')$$);
RESET micromegas_views.actor;
