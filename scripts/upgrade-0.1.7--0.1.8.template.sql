-- micromegas_views 0.1.7 -> 0.1.8. What changes:
-- * a query too wide to plan (each SELECT's names and output columns times
--   the columns it reads and returns, summed, over 25 million) is refused
--   before DataFusion plans it (54001, in the library); a re-check that
--   finds a dependent too wide after its source widened treats it like the
--   other limits on what a definition may be: the change is refused, or
--   (a built-in's registration) the dependent is marked failed.

--@replace CREATE FUNCTION micromegas._mm_recheck_dependents(

-- Privileges, from the matrix (no new function).
SELECT micromegas._mm_apply_privileges();
