//! Who is calling and what they may see: the bearer token looked up in the
//! key file, the caller's query attributes (for the deny list) and the
//! audiences the grants give it (for the row filter).

use micromegas_views_client::keys::{ApiKey, KeyFile};
use micromegas_views_client::{AudienceGrantsSnapshot, QueryAttributes};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use tonic::metadata::MetadataMap;
use tonic::Status;

/// The request headers micromegas' clients send, and the deny-rule context
/// field each fills.
pub const CONTEXT_HEADERS: [(&str, &str); 6] = [
    ("x-client-type", "client"),
    ("x-client-agent", "agent"),
    ("x-client-entrypoint", "entrypoint"),
    ("x-client-session", "session"),
    ("x-client-notebook", "notebook"),
    ("x-client-cell", "cell"),
];

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key: ApiKey,
    /// The key's role is a member of `micromegas_admin`: every row, the
    /// admin table functions, and the deny list's recovery statements.
    pub admin: bool,
    /// The deny-rule context, without `sql` and `sql_hash`.
    pub attributes: QueryAttributes,
}

impl Caller {
    /// The selectors a grant may name to reach this caller: `*`,
    /// `user:<user_id>`, `user:<email>` and `group:<g>` for each group.
    pub fn selectors(&self) -> BTreeSet<String> {
        let c = &self.key.claims;
        let mut out = BTreeSet::from(["*".to_string()]);
        out.extend(c.user_id.iter().map(|u| format!("user:{u}")));
        out.extend(c.email.iter().map(|e| format!("user:{e}")));
        out.extend(c.groups.iter().map(|g| format!("group:{g}")));
        out
    }

    /// The audiences whose rows this caller may read (`None`: every row,
    /// for an admin).
    pub fn readable_audiences(&self, grants: &AudienceGrantsSnapshot) -> Option<BTreeSet<String>> {
        if self.admin {
            return None;
        }
        let selectors = self.selectors();
        Some(
            grants
                .grants
                .iter()
                .filter(|g| g.axis == "read" && selectors.contains(&g.selector))
                .map(|g| g.audience.clone())
                .collect(),
        )
    }
}

/// The caller of a request: `authorization: Bearer <key>` looked up in
/// the key file. No header, another scheme or an unknown key:
/// UNAUTHENTICATED, never naming the key presented.
pub fn identify(
    keys: &KeyFile,
    admins: &HashMap<String, bool>,
    metadata: &MetadataMap,
    remote: Option<SocketAddr>,
) -> Result<Caller, Status> {
    let header = metadata
        .get("authorization")
        .ok_or_else(|| Status::unauthenticated("missing credentials: send authorization: Bearer <key>"))?;
    let value = header
        .to_str()
        .map_err(|_| Status::unauthenticated("the authorization header is not text"))?;
    let token = value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .ok_or_else(|| Status::unauthenticated("the authorization header must be Bearer <key>"))?;
    let key = keys
        .find(token)
        .ok_or_else(|| Status::unauthenticated("invalid API key"))?
        .clone();
    let admin = admins.get(&key.role).copied().unwrap_or(false);
    let header = |name: &str| {
        metadata
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut attributes = QueryAttributes {
        user_id: key.claims.user_id.clone(),
        email: key.claims.email.clone(),
        service_account: Some(key.name.clone()),
        client_ip: remote.map(|a| a.ip().to_string()),
        ..Default::default()
    };
    for (name, field) in CONTEXT_HEADERS {
        let value = header(name);
        match field {
            "client" => attributes.client = value,
            "agent" => attributes.agent = value,
            "entrypoint" => attributes.entrypoint = value,
            "session" => attributes.session = value,
            "notebook" => attributes.notebook = value,
            _ => attributes.cell = value,
        }
    }
    Ok(Caller {
        key,
        admin,
        attributes,
    })
}

/// The statements an admin uses to recover from a bad rule, which the
/// deny list never refuses to an admin (as micromegas' service does).
pub fn is_admin_recovery(caller: &Caller, sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    caller.admin
        && ["deny_queries", "remove_query_denial", "list_query_denials"]
            .iter()
            .any(|f| lower.contains(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use micromegas_views_client::keys::Claims;
    use micromegas_views_client::AudienceGrant;

    fn keys() -> KeyFile {
        KeyFile {
            keys: vec![ApiKey {
                name: "alice-key".into(),
                key: "alice-0123456789abcdef".into(),
                role: "reader_role".into(),
                claims: Claims {
                    user_id: Some("alice".into()),
                    email: Some("alice@example.com".into()),
                    groups: vec!["team-a".into()],
                    admin: None,
                },
            }],
        }
    }

    fn metadata(pairs: &[(&'static str, &str)]) -> MetadataMap {
        let mut m = MetadataMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn a_bearer_key_names_the_caller_and_its_headers_fill_the_context() {
        let c = identify(
            &keys(),
            &HashMap::new(),
            &metadata(&[
                ("authorization", "Bearer alice-0123456789abcdef"),
                ("x-client-type", "grafana"),
                ("x-client-cell", "3"),
            ]),
            Some("10.1.2.3:5000".parse().unwrap()),
        )
        .unwrap();
        assert_eq!(c.key.name, "alice-key");
        assert!(!c.admin);
        assert_eq!(c.attributes.client.as_deref(), Some("grafana"));
        assert_eq!(c.attributes.cell.as_deref(), Some("3"));
        assert_eq!(c.attributes.client_ip.as_deref(), Some("10.1.2.3"));
        assert_eq!(c.attributes.user_id.as_deref(), Some("alice"));
    }

    #[test]
    fn no_or_unknown_or_other_scheme_is_unauthenticated() {
        for pairs in [
            vec![],
            vec![("authorization", "Bearer nope-0123456789abcdef")],
            vec![("authorization", "Basic alice-0123456789abcdef")],
        ] {
            let e = identify(&keys(), &HashMap::new(), &metadata(&pairs), None).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated);
            assert!(!e.message().contains("0123456789abcdef"), "{}", e.message());
        }
    }

    #[test]
    fn readable_audiences_come_from_read_grants_on_the_callers_selectors() {
        let c = identify(
            &keys(),
            &HashMap::new(),
            &metadata(&[("authorization", "Bearer alice-0123456789abcdef")]),
            None,
        )
        .unwrap();
        let g = |a: &str, axis: &str, s: &str| AudienceGrant {
            audience: a.into(),
            axis: axis.into(),
            selector: s.into(),
        };
        let grants = AudienceGrantsSnapshot {
            version: 3,
            grants: vec![
                g("public", "read", "*"),
                g("team-a", "read", "group:team-a"),
                g("team-b", "read", "group:team-b"),
                g("mine", "read", "user:alice@example.com"),
                g("minted", "mint", "user:alice"),
            ],
        };
        let seen: Vec<String> = c.readable_audiences(&grants).unwrap().into_iter().collect();
        assert_eq!(seen, ["mine", "public", "team-a"]);
        let admin = Caller { admin: true, ..c };
        assert!(admin.readable_audiences(&grants).is_none());
    }
}
