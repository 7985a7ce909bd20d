-- micromegas_views 0.1.8 -> 0.1.9. What changes:
-- * a definitions row keeps sources_hash, the SHA-256 of what its
--   validation read besides the definition (the sources' stored rows, the
--   plan-node limit, the extension's version). A write of the definition a
--   view already stores (the same queries, group and options: a deploy
--   running its DDL again), against sources that still hash the same, takes
--   the row's derived columns instead of planning again (#28). Rows upgraded
--   from 0.1.8 have none until their next write; a failed row has none.
-- * _mm_prepare_definition returns the hash: a new C symbol
--   (prepare_definition_row_wrapper); the old one stays for older scripts.
ALTER TABLE micromegas.lakehouse_view_set_definitions ADD COLUMN sources_hash bytea;
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.sources_hash IS
  'SHA-256 of what the validation read (sources as stored, plan-node limit, code version); the same definition written against the same sources reuses the derived columns. Always derived; NULL when failed';

-- The prepared row carries the hash.
DROP FUNCTION micromegas._mm_prepare_definition(text, text, text, text, text, integer, jsonb, boolean);
--@rust _mm_prepare_definition
COMMENT ON FUNCTION micromegas._mm_prepare_definition(text,text,text,text,text,integer,jsonb,boolean) IS
  'Derives and validates a definition row (statement text, columns or both): every derived column, the findings and the sources'' hash, or the error';

-- The BEFORE trigger stores it.
--@replace CREATE FUNCTION micromegas._mm_definitions_before_write(

-- Privileges, from the matrix (one function created again).
SELECT micromegas._mm_apply_privileges();
