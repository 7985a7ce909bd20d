-- micromegas_views 0.1.0 -> 0.1.1: describe the public functions; the catalog
-- snapshot of a validation is found from the words of the queries (primary
-- key lookups) instead of a second parse of the queries.
--
-- The rule for every upgrade script: the objects an upgraded database ends
-- up with must be exactly those of a fresh CREATE EXTENSION of the new
-- version (scripts/upgrade_test.sh compares the two catalogs), and every row
-- of every table is kept. Never drop or rename a Rust function a released
-- install script names (AS 'MODULE_PATHNAME', '..._wrapper'): the old
-- version's script must still install against the new library.

COMMENT ON FUNCTION micromegas.mm_create_view(text) IS
  'CREATE [OR REPLACE] MATERIALIZED VIEW name WITH (...): validate and store a view set definition';
COMMENT ON FUNCTION micromegas.mm_create_view(text, text, text, text, integer, text, text, text, text, text, text, boolean) IS
  'Create or replace a view set definition from named arguments; stores a canonical statement';
COMMENT ON FUNCTION micromegas.mm_drop_view(text) IS
  'DROP MATERIALIZED VIEW [IF EXISTS] name, or a bare name';
COMMENT ON FUNCTION micromegas.mm_drop_view(name, boolean) IS
  'Drop a view set definition by name';
COMMENT ON FUNCTION micromegas.mm_explain_view(text) IS
  'Dry run of mm_create_view: every check, nothing written';
COMMENT ON FUNCTION micromegas.list_view_set_definitions() IS
  'Every stored definition, including those that failed to load';
COMMENT ON FUNCTION micromegas.list_view_sets() IS
  'Every view set the services should load, with its current schema and hash';
COMMENT ON FUNCTION micromegas.mm_view_set_snapshot() IS
  'The catalog version and every loadable definition, in materialization order';
COMMENT ON FUNCTION micromegas.list_view_dependencies() IS
  'Which view sets each definition reads, with both update groups';
COMMENT ON FUNCTION micromegas.mm_materialization_order() IS
  'The order the maintenance daemon materializes in';
COMMENT ON FUNCTION micromegas.mm_catalog_violations() IS
  'Definitions reading a missing view set or out of update_group order (always empty)';
COMMENT ON FUNCTION micromegas.mm_register_builtin_view_set(text, text, integer, text, boolean, boolean) IS
  'A service registers the current schema of a code-defined view set (base64 Arrow IPC or JSON)';

-- Plans and checks a definition (jsonb, as _mm_definition_from_row returns
-- it) against a snapshot of the built-in and DDL view sets whose names occur
-- as words in its queries (a superset of what they read, found with the
-- primary keys), as they are in the table now. Writes nothing.
CREATE OR REPLACE FUNCTION micromegas._mm_check(definition jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  words text[] := ARRAY(
    SELECT DISTINCT w FROM regexp_split_to_table(lower(concat_ws(' ', definition->>'extract_query',
             definition->>'count_src_query', definition->>'merge_partitions_query')), '[^a-z0-9_]+') AS w
     WHERE w <> '');
  snapshot jsonb;
BEGIN
  SELECT coalesce(jsonb_agg(e), '[]'::jsonb) INTO snapshot FROM (
    SELECT b.view_set_name AS name, b.schema_ipc, b.update_group, b.kind
      FROM micromegas.builtin_view_sets b
     WHERE b.view_set_name = ANY (words)
    UNION ALL
    SELECT d.view_set_name, d.schema_ipc, d.update_group, 'materialized'
      FROM micromegas.lakehouse_view_set_definitions d
     WHERE d.view_set_name = ANY (words) AND d.view_set_name <> (definition->>'name')
  ) e;
  RETURN micromegas._mm_validate(definition, snapshot);
END
$$;

