-- After the run: outcomes, then the invariants. Every stored definition still
-- validates against the catalog as it is, and nothing reads a missing view or
-- breaks group order. The last query's count must be 0.
SELECT outcome, n FROM mmv_stress_outcomes ORDER BY outcome;
SELECT view_set_name, update_group, reads FROM micromegas.lakehouse_view_set_definitions
 WHERE view_set_name LIKE 's\_%' ORDER BY view_set_name;
CREATE FUNCTION pg_temp.still_valid(d micromegas.lakehouse_view_set_definitions) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  -- keep_failed: planned afresh (a stored answer is never reused then),
  -- and a definition that no longer plans comes back with its reason.
  RETURN (SELECT p.load_error IS NULL AND p.schema_hash = d.schema_hash
            FROM micromegas._mm_prepare_definition(d.view_set_name, NULL, d.extract_query, d.count_src_query,
                   d.merge_partitions_query, d.update_group, d.view_options, true) p);
EXCEPTION WHEN OTHERS THEN
  RETURN false;
END
$$;
CREATE TEMP TABLE mmv_stress_invalid AS
SELECT d.view_set_name FROM micromegas.lakehouse_view_set_definitions d
 WHERE NOT pg_temp.still_valid(d);
SELECT (SELECT count(*) FROM micromegas.mm_catalog_violations())
     + (SELECT count(*) FROM mmv_stress_invalid) AS violations;
