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
