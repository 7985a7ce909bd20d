//! The query deny list checked where queries are served: the rules of a
//! [`DenyListSnapshot`] compiled once (with the same core code as the SQL
//! function `mm_match_query_denial`), then every query's attributes
//! matched in memory. Rebuild the matcher when the deny list's watcher
//! delivers a new snapshot (`NOTIFY micromegas_query_deny_list`, or its poll).

use crate::{DenyListSnapshot, DenyRule};
use micromegas_views_core::deny;

/// What a served query is matched on (every field optional; `sql_hash`,
/// when not given, is the fingerprint of `sql`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryAttributes {
    pub user_id: Option<String>,
    pub email: Option<String>,
    pub service_account: Option<String>,
    pub client: Option<String>,
    pub agent: Option<String>,
    pub entrypoint: Option<String>,
    pub session: Option<String>,
    pub notebook: Option<String>,
    pub cell: Option<String>,
    pub client_ip: Option<String>,
    pub sql: Option<String>,
    pub sql_hash: Option<String>,
}

impl QueryAttributes {
    fn context(&self) -> [Option<&str>; 12] {
        // In deny::MATCH_COLUMNS order.
        [
            self.user_id.as_deref(),
            self.email.as_deref(),
            self.service_account.as_deref(),
            self.client.as_deref(),
            self.agent.as_deref(),
            self.entrypoint.as_deref(),
            self.session.as_deref(),
            self.notebook.as_deref(),
            self.cell.as_deref(),
            self.client_ip.as_deref(),
            self.sql.as_deref(),
            self.sql_hash.as_deref(),
        ]
    }
}

/// The rules of one deny list snapshot, compiled.
pub struct DenyMatcher {
    version: i64,
    rules: Vec<DenyRule>,
    matcher: deny::Matcher,
}

impl DenyMatcher {
    /// Compiles every rule of `snapshot`; a rule that does not compile (it
    /// was accepted by a newer extension, say) is an error naming it.
    pub fn new(snapshot: &DenyListSnapshot) -> Result<DenyMatcher, String> {
        let pairs: Vec<(String, String)> = snapshot
            .rules
            .iter()
            .map(|r| (r.rule_id.clone(), r.match_expr.clone()))
            .collect();
        let matcher = deny::Matcher::new(&pairs).map_err(|e| e.to_string())?;
        Ok(DenyMatcher {
            version: snapshot.version,
            rules: snapshot.rules.clone(),
            matcher,
        })
    }

    /// The deny list version the rules come from.
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The first rule (oldest first, as the SQL function tries them) that
    /// denies a query with these attributes, if any.
    pub fn first_denial(&self, query: &QueryAttributes) -> Result<Option<&DenyRule>, String> {
        let found = self
            .matcher
            .first_of(&query.context())
            .map_err(|e| e.to_string())?;
        Ok(found.map(|i| &self.rules[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::QueryAttributes;
    use micromegas_views_core::deny::MATCH_COLUMNS;

    /// The match context's columns are defined once, in core
    /// (`deny::MATCH_COLUMNS`); every other list of them must be that list,
    /// in that order: this struct's fields as `context()` hands them to the
    /// matcher, and each list in the SQL of `mm_match_query_denial` and
    /// `mm_match_query_denial_context`. A column added in one place only
    /// fails here.
    #[test]
    fn every_list_of_the_match_columns_is_core_s() {
        let a = QueryAttributes {
            user_id: Some("user_id".into()),
            email: Some("email".into()),
            service_account: Some("service_account".into()),
            client: Some("client".into()),
            agent: Some("agent".into()),
            entrypoint: Some("entrypoint".into()),
            session: Some("session".into()),
            notebook: Some("notebook".into()),
            cell: Some("cell".into()),
            client_ip: Some("client_ip".into()),
            sql: Some("sql".into()),
            sql_hash: Some("sql_hash".into()),
        };
        let context: Vec<&str> = a.context().iter().map(|c| c.unwrap()).collect();
        assert_eq!(context, MATCH_COLUMNS);

        let sql = include_str!("../../sql/access.sql");
        let between = |start: &str, end: &str| -> String {
            let from = sql.find(start).unwrap_or_else(|| panic!("{start} not in sql/access.sql")) + start.len();
            let to = from + sql[from..].find(end).unwrap_or_else(|| panic!("{end} after {start}"));
            sql[from..to].to_string()
        };
        let words = |text: &str, re: &str| -> Vec<String> {
            regex::Regex::new(re)
                .unwrap()
                .captures_iter(text)
                .map(|c| c[1].to_string())
                .collect()
        };
        let lists = [
            (
                "mm_match_query_denial's parameters",
                words(
                    &between("CREATE FUNCTION micromegas.mm_match_query_denial(", "RETURNS"),
                    r"(\w+) text DEFAULT NULL",
                ),
            ),
            (
                "the context array it passes to the matcher",
                words(&between("ARRAY[", "]"), r"mm_match_query_denial\.(\w+)"),
            ),
            (
                "the keys mm_match_query_denial_context accepts",
                words(&between("WHERE k NOT IN (", ")"), r"'(\w+)'"),
            ),
            (
                "the keys its HINT names",
                words(&between("HINT = 'The keys are ", ".'"), r"(\w+)")
                    .into_iter()
                    .filter(|w| w != "and")
                    .collect(),
            ),
            (
                "the keys it passes on",
                words(
                    &between("RETURN QUERY SELECT * FROM micromegas.mm_match_query_denial(", ");"),
                    r"(\w+) =>",
                ),
            ),
        ];
        for (what, list) in lists {
            assert_eq!(list, MATCH_COLUMNS, "{what} in sql/access.sql");
        }
    }
}
