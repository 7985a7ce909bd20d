-- micromegas_views 0.1.2 -> 0.1.3. What changes:
-- * one call into Rust per definition written: the table's BEFORE trigger
--   calls _mm_prepare_definition (parse, look up what the queries mention,
--   plan, check; a typed row back), replacing _mm_parse_statement,
--   _mm_definition_from_row, _mm_check/_mm_validate, _mm_referenced_relations
--   and _mm_normalize_schema (jsonb between SQL and Rust);
-- * mm_create_view(statement) hands the statement to the INSERT without
--   parsing it first; a CREATE OR REPLACE of an existing view becomes an
--   UPDATE of its row in the trigger;
-- * the named-argument mm_create_view writes the columns (the trigger renders
--   the statement), instead of rendering it in Rust first;
-- * mm_drop_view(statement) reads the statement (or a bare name) in Rust, with
--   no regular expression; both forms share _mm_drop;
-- * built-in schemas are read by _mm_schema_forms (a typed row).
-- The Rust symbols the released install scripts name stay in the library
-- (src/pg/legacy.rs): see the rule in micromegas_views--0.1.1--0.1.2.sql.

DROP FUNCTION micromegas._mm_check(jsonb);
DROP FUNCTION micromegas._mm_row_definition(micromegas.lakehouse_view_set_definitions);
DROP FUNCTION micromegas._mm_parse_statement(text);
DROP FUNCTION micromegas._mm_definition_from_row(text, text, text, text, text, integer, jsonb);
DROP FUNCTION micromegas._mm_render_create(text, text, text, text, integer, text, text, text, text, text, text, boolean);
DROP FUNCTION micromegas._mm_referenced_relations(jsonb);
DROP FUNCTION micromegas._mm_validate(jsonb, jsonb);
DROP FUNCTION micromegas._mm_normalize_schema(text);

-- New Rust functions (internal: callable by neither role).
--@rust _mm_prepare_definition

--@rust _mm_statement_target

--@rust _mm_schema_forms

--@new CREATE FUNCTION micromegas._mm_drop(

REVOKE EXECUTE ON FUNCTION micromegas._mm_prepare_definition(text, text, text, text, text, integer, jsonb, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION micromegas._mm_statement_target(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION micromegas._mm_schema_forms(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION micromegas._mm_drop(text, boolean) FROM PUBLIC;

-- Changed functions, as a fresh install creates them.
--@replace CREATE FUNCTION micromegas._mm_notify(
--@replace CREATE FUNCTION micromegas._mm_recheck_dependents(
--@replace CREATE FUNCTION micromegas._mm_definitions_before_write(
--@replace CREATE FUNCTION micromegas._mm_builtins_before_write(
--@replace CREATE FUNCTION micromegas.mm_create_view(statement text)
--@replace CREATE FUNCTION micromegas.mm_create_view(\n  name text,
--@replace CREATE FUNCTION micromegas.mm_drop_view(name micromegas.view_set_name
--@replace CREATE FUNCTION micromegas.mm_drop_view(statement text)
--@replace CREATE FUNCTION micromegas.mm_register_builtin_view_set(
--@replace CREATE FUNCTION micromegas.mm_explain_view(
