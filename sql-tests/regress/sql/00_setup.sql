-- Install the extension and a helper that shows an error's SQLSTATE,
-- message, DETAIL and HINT as a row, so each expected error is asserted.
-- btree_gist (required) in a schema of its own, as the README says.
CREATE SCHEMA btree_gist;
CREATE EXTENSION btree_gist SCHEMA btree_gist;
CREATE EXTENSION micromegas_views;

CREATE FUNCTION mmv_try(statement text)
RETURNS TABLE (sqlstate text, message text, detail text, hint text)
LANGUAGE plpgsql AS $$
DECLARE
  s text; m text; d text; h text;
BEGIN
  EXECUTE statement;
  RETURN QUERY SELECT 'ok'::text, NULL::text, NULL::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT,
                          d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
  RETURN QUERY SELECT s, m, nullif(d, ''), nullif(h, '');
END
$$;

SELECT extname, extrelocatable FROM pg_extension WHERE extname = 'micromegas_views';
SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = 'micromegas_admin';
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'micromegas' AND c.relkind = 'r' ORDER BY 1;
