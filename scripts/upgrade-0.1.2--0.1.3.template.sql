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
-- * built-in schemas are read by _mm_schema_forms (a typed row);
-- * the query deny list and the audience grants (sql/access.sql, all new),
--   with mm_sql_hash and the Rust steps that compile and match rules.
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
--@replace CREATE FUNCTION micromegas._mm_refuse_truncate(
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

-- The query deny list and the audience grants: sql/access.sql as a fresh
-- install runs it.
--@rust _mm_check_deny_rule

--@rust _mm_first_denial

--@rust _mm_deny_max_rules

--@rust mm_sql_hash

--@file access.sql
-- pg_dump keeps the rules, and the grants an admin made (CREATE EXTENSION
-- seeds the two public ones).
SELECT pg_catalog.pg_extension_config_dump('micromegas.query_deny_list', '');
SELECT pg_catalog.pg_extension_config_dump('micromegas.audience_grants',
  $$WHERE NOT (audience = 'public' AND selector = '*' AND created_by = 'micromegas_views')$$);

-- Their privileges, as api.sql gives them.
REVOKE EXECUTE ON FUNCTION micromegas._mm_check_deny_rule(text), micromegas._mm_first_denial(text[], text[], text[]),
  micromegas._mm_deny_max_rules(), micromegas.mm_sql_hash(text), micromegas._mm_audience_problem(text, text, text),
  micromegas._mm_deny_list_before_write(), micromegas._mm_deny_list_notify(),
  micromegas._mm_audience_grants_before_write(), micromegas._mm_audience_grants_notify(),
  micromegas._mm_caller_selectors(), micromegas.deny_queries(text, text), micromegas.list_query_denials(),
  micromegas.remove_query_denial(text), micromegas.mm_record_query_denial_hits(uuid[], timestamptz),
  micromegas.mm_match_query_denial(text, text, text, text, text, text, text, text, text, text, text, text),
  micromegas.mm_match_query_denial_context(jsonb), micromegas.mm_grant_audience(text, text, text),
  micromegas.mm_revoke_audience(text, text, text), micromegas.list_audience_grants(),
  micromegas.mm_query_deny_list_snapshot(), micromegas.mm_audience_grants_snapshot(),
  micromegas.mm_access_versions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION micromegas.mm_sql_hash(text), micromegas.deny_queries(text, text),
  micromegas.list_query_denials(), micromegas.remove_query_denial(text),
  micromegas.mm_record_query_denial_hits(uuid[], timestamptz),
  micromegas.mm_match_query_denial(text, text, text, text, text, text, text, text, text, text, text, text),
  micromegas.mm_match_query_denial_context(jsonb), micromegas.mm_grant_audience(text, text, text),
  micromegas.mm_revoke_audience(text, text, text), micromegas.list_audience_grants(),
  micromegas.mm_query_deny_list_snapshot(), micromegas.mm_audience_grants_snapshot(),
  micromegas.mm_access_versions() TO micromegas_admin;
REVOKE ALL ON micromegas.access_state, micromegas.query_deny_list, micromegas.audience_grants FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON micromegas.query_deny_list, micromegas.audience_grants TO micromegas_admin;
GRANT SELECT ON micromegas.query_deny_list TO micromegas_reader;
GRANT EXECUTE ON FUNCTION micromegas.list_audience_grants(), micromegas.mm_sql_hash(text),
  micromegas.mm_match_query_denial(text, text, text, text, text, text, text, text, text, text, text, text),
  micromegas.mm_match_query_denial_context(jsonb), micromegas.mm_record_query_denial_hits(uuid[], timestamptz),
  micromegas.mm_query_deny_list_snapshot(), micromegas.mm_audience_grants_snapshot(), micromegas.mm_access_versions()
  TO micromegas_reader;
