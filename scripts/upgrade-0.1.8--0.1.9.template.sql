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
-- * a re-check of a dependent tells why it no longer validates from the
--   error's kind, no longer from its English message text: the new
--   _mm_recheck_definition returns a problem with the definition itself
--   (its checks and own limits) as data and raises anything else, so the
--   re-check needs no exception block. A bug (internal error) in a
--   re-check now fails the change instead of marking the dependent. The
--   read-only dry run's re-check likewise (_mm_recheck_definition_with
--   replaces _mm_check_definition_with): it no longer reports a time limit
--   or an internal error as the dependent being broken.
ALTER TABLE micromegas.lakehouse_view_set_definitions ADD COLUMN sources_hash bytea;
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.sources_hash IS
  'SHA-256 of what the validation read (sources as stored, plan-node limit, code version); the same definition written against the same sources reuses the derived columns. Always derived; NULL when failed';

-- The prepared row carries the hash.
DROP FUNCTION micromegas._mm_prepare_definition(text, text, text, text, text, integer, jsonb, boolean);
--@rust _mm_prepare_definition
COMMENT ON FUNCTION micromegas._mm_prepare_definition(text,text,text,text,text,integer,jsonb,boolean) IS
  'Derives and validates a definition row (statement text, columns or both): every derived column, the findings and the sources'' hash, or the error';

--@rust _mm_recheck_definition
COMMENT ON FUNCTION micromegas._mm_recheck_definition(text,text,text,text,integer,jsonb) IS
  'A re-check of a stored dependent: its schema as it validates now, or why it does not (an error about the definition itself); any other error is raised';
--@replace CREATE FUNCTION micromegas._mm_recheck_dependents(

-- The read-only dry run's re-check the same way (its symbol stays for
-- older scripts, src/pg/legacy.rs).
DROP FUNCTION micromegas._mm_check_definition_with(text, text, text, text, integer, jsonb, text[], text[], integer[], text[]);
--@rust _mm_recheck_definition_with
COMMENT ON FUNCTION micromegas._mm_recheck_definition_with(text,text,text,text,integer,jsonb,text[],text[],integer[],text[]) IS
  'The same re-check as if the given DDL views had the given schemas, groups and load errors (the read-only dry run)';
--@replace CREATE FUNCTION micromegas._mm_recheck_read_only(

-- The BEFORE trigger stores it.
--@replace CREATE FUNCTION micromegas._mm_definitions_before_write(

-- Privileges, from the matrix (a function created again, a new internal one).
SELECT micromegas._mm_apply_privileges();
