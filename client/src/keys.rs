//! The services' API keys: one file format and one loader for the Lance
//! REST server and the FlightSQL service. A key names who calls (its name is
//! recorded as `micromegas_views.actor`), the secret it presents, the
//! Postgres role its requests run as and, optionally, the end user's
//! claims the FlightSQL service matches deny rules and audience grants on.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The end user a key stands for (all optional). `admin` states what the
/// key's role already says (a member of `micromegas_admin` or not); the
/// FlightSQL service refuses to start when the two disagree.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    pub user_id: Option<String>,
    pub email: Option<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    pub admin: Option<bool>,
}

/// One API key.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    pub name: String,
    pub key: String,
    pub role: String,
    #[serde(default)]
    pub claims: Claims,
}

/// `{"keys": [{"name", "key", "role", "claims": {…}}]}`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    pub keys: Vec<ApiKey>,
}

impl KeyFile {
    /// Reads and checks a key file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read key file {}: {e}", path.display()))?;
        Self::parse(&text, &format!("key file {}", path.display()))
    }

    /// Parses and checks the text of a key file; `origin` names it in an
    /// error.
    pub fn parse(text: &str, origin: &str) -> Result<Self, String> {
        let file: KeyFile = serde_json::from_str(text).map_err(|e| format!("{origin} is not valid: {e}"))?;
        file.check().map_err(|e| format!("{origin}: {e}"))?;
        Ok(file)
    }

    /// At least one key; names, roles and secrets (16 characters or more)
    /// present; names and secrets unique; no empty claim. An error never
    /// quotes a secret.
    pub fn check(&self) -> Result<(), String> {
        if self.keys.is_empty() {
            return Err("the file has no key".into());
        }
        let mut names = HashSet::new();
        let mut secrets = HashMap::new();
        for k in &self.keys {
            if k.name.trim().is_empty() || k.key.len() < 16 || k.role.trim().is_empty() {
                return Err(
                    "every key needs a name, a role and a secret of at least 16 characters".into(),
                );
            }
            if !names.insert(k.name.clone()) {
                return Err(format!(
                    "two keys are named \"{}\" (key names must be unique)",
                    k.name
                ));
            }
            if let Some(first) = secrets.insert(k.key.clone(), k.name.clone()) {
                return Err(format!(
                    "keys \"{first}\" and \"{}\" have the same secret (secrets must be unique)",
                    k.name
                ));
            }
            let c = &k.claims;
            let blank = |v: &Option<String>| v.as_deref().is_some_and(|s| s.trim().is_empty());
            if blank(&c.user_id) || blank(&c.email) || c.groups.iter().any(|g| g.trim().is_empty()) {
                return Err(format!(
                    "key \"{}\": a claim (user_id, email, a group) is empty",
                    k.name
                ));
            }
            if c.groups.iter().any(|g| g.contains(',')) {
                return Err(format!("key \"{}\": a group name contains a comma", k.name));
            }
        }
        Ok(())
    }

    /// The key whose secret is `secret`, comparing every key in constant
    /// time each (the time does not tell which key matched, or how much).
    pub fn find(&self, secret: &str) -> Option<&ApiKey> {
        let mut found = None;
        for key in &self.keys {
            if constant_time_eq(key.key.as_bytes(), secret.as_bytes()) {
                found = Some(key);
            }
        }
        found
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<KeyFile, String> {
        let f: KeyFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        f.check()?;
        Ok(f)
    }

    #[test]
    fn claims_are_optional_and_read_when_given() {
        let f = parse(r#"{"keys":[{"name":"a","key":"0123456789abcdef","role":"r"},
            {"name":"b","key":"0123456789abcdeg","role":"r","claims":{"user_id":"u1","email":"u@x","groups":["g1"],"admin":false}}]}"#).unwrap();
        assert_eq!(f.keys[0].claims, Claims::default());
        assert_eq!(f.keys[1].claims.groups, vec!["g1".to_string()]);
        assert_eq!(f.find("0123456789abcdeg").map(|k| k.name.as_str()), Some("b"));
        assert!(f.find("0123456789abcdeX").is_none());
    }

    #[test]
    fn bad_files_name_what_is_wrong_and_never_the_secret() {
        let dup = parse(r#"{"keys":[{"name":"a","key":"0123456789abcdef","role":"r"},{"name":"b","key":"0123456789abcdef","role":"r"}]}"#).unwrap_err();
        assert!(dup.contains("\"a\" and \"b\"") && !dup.contains("0123456789abcdef"), "{dup}");
        let short = parse(r#"{"keys":[{"name":"a","key":"short","role":"r"}]}"#).unwrap_err();
        assert!(short.contains("16 characters"), "{short}");
        let unknown = parse(r#"{"keys":[{"name":"a","key":"0123456789abcdef","role":"r","claims":{"usr":"x"}}]}"#).unwrap_err();
        assert!(unknown.contains("unknown field `usr`"), "{unknown}");
        let empty = parse(r#"{"keys":[{"name":"a","key":"0123456789abcdef","role":"r","claims":{"groups":[" "]}}]}"#).unwrap_err();
        assert!(empty.contains("claim"), "{empty}");
    }
}
