-- What CREATE EXTENSION ships: the built-in view sets and the log_stats row.
SELECT view_set_name, update_group, kind, has_view_maker, global_instance_available,
       length(schema_hash) AS hash_bytes
  FROM micromegas.builtin_view_sets ORDER BY update_group NULLS LAST, view_set_name;

SELECT view_set_name, update_group, view_options, reads, encode(schema_hash, 'hex') AS schema_hash
  FROM micromegas.lakehouse_view_set_definitions;
SELECT jsonb_pretty(schema_json) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats';
SELECT definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats';
SELECT view_set_name, definition_sql IS NOT NULL AS has_sql, update_group, updated_by
  FROM micromegas.list_view_set_definitions();
-- The shipped log_stats infers exactly micromegas' fields and nullability
-- from the shipped built-in schemas.
SELECT micromegas._mm_format_schema(schema_ipc) AS log_stats_schema
  FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats';
