//! The Rust steps of the query deny list and the query fingerprint
//! (`sql/access.sql` calls them). Rule text and queries are caller text:
//! read in the helper process only.

use super::errors::OrRaise;
use super::helper::run_isolated;
use micromegas_views_core::deny;
use pgrx::prelude::*;

mod micromegas {
    use super::*;

    /// Compiles a deny rule's expression with every check of deny_queries;
    /// raises the first problem.
    #[pg_extern(immutable, parallel_safe, name = "_mm_check_deny_rule")]
    fn check_deny_rule(match_expr: &str) -> bool {
        run_isolated(match_expr.to_owned(), |text| {
            deny::compile(&text).map(|_| true)
        })
        .or_raise()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_check_deny_rule(text) IS
  'Checks a deny rule''s expression (columns, operators, size) and raises its problem';"#,
        name = "comment_mm_check_deny_rule",
        requires = [check_deny_rule],
    );

    /// The 1-based position of the first rule whose expression is TRUE for
    /// the context (`MATCH_COLUMNS` order; a NULL `sql_hash` is the
    /// fingerprint of `sql`), or NULL.
    #[pg_extern(immutable, parallel_safe, name = "_mm_first_denial")]
    fn first_denial(
        rule_ids: Vec<String>,
        match_exprs: Vec<String>,
        context: Vec<Option<String>>,
    ) -> Option<i32> {
        if rule_ids.len() != match_exprs.len() || context.len() != deny::MATCH_COLUMNS.len() {
            pgrx::error!("_mm_first_denial: mismatched arguments");
        }
        let rules: Vec<(String, String)> = rule_ids.into_iter().zip(match_exprs).collect();
        let context: [Option<String>; 12] = context.try_into().expect("length checked above");
        run_isolated((rules, context), |(rules, context)| {
            deny::first_match(&rules, &context)
        })
            .or_raise()
            .map(|i| i as i32 + 1)
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_first_denial(text[],text[],text[]) IS
  'The first deny rule (by rule_id) whose expression a query''s attributes satisfy, or NULL';"#,
        name = "comment_mm_first_denial",
        requires = [first_denial],
    );

    /// `micromegas_views.query_deny_max_rules` (loading the library first,
    /// so the setting is always defined when read).
    #[pg_extern(stable, name = "_mm_deny_max_rules")]
    fn deny_max_rules() -> i32 {
        super::super::settings::query_deny_max_rules()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_deny_max_rules() IS
  'micromegas_views.query_deny_max_rules';"#,
        name = "comment_mm_deny_max_rules",
        requires = [deny_max_rules],
    );

    /// The fingerprint micromegas' query audit log records for a query text
    /// (16 hex digits): what a deny rule matches as `sql_hash`.
    #[pg_extern(immutable, parallel_safe, strict, name = "mm_sql_hash")]
    fn sql_hash(sql: &str) -> String {
        run_isolated(sql.to_owned(), |text| deny::sql_hash(&text)).or_raise()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas.mm_sql_hash(text) IS
  'The hash of a query text the deny list''s sql_hash attribute compares with';"#,
        name = "commentmm_sql_hash",
        requires = [sql_hash],
    );
}
