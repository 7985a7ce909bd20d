//! The properties the fuzz targets (`fuzz/`) check, as plain functions so
//! that `cargo test` runs them over the saved corpus and every regression
//! input too. Each panics when the property does not hold.

use crate::builtins::{builtin_catalog, LOG_STATS_SQL};
use crate::{ddl, isolate, validate, Definition, ErrorKind, Statement};
use std::sync::OnceLock;

/// Any text ends in a statement or an error; an accepted CREATE renders back
/// to a statement that parses to the same definition.
pub fn ddl_round_trip(text: &str) {
    if let Ok(Statement::Create(create)) = ddl::parse(text) {
        if let Ok(definition) = Definition::from_statement(&create) {
            let rendered = definition.render(create.or_replace);
            match ddl::parse(&rendered) {
                Ok(Statement::Create(again)) => {
                    assert_eq!(Definition::from_statement(&again).as_ref(), Ok(&definition));
                }
                other => panic!("rendered statement does not parse back: {other:?}\n{rendered}"),
            }
        }
    }
}

fn base() -> &'static Definition {
    static BASE: OnceLock<Definition> = OnceLock::new();
    BASE.get_or_init(|| match ddl::parse(LOG_STATS_SQL) {
        Ok(Statement::Create(c)) => Definition::from_statement(&c).expect("log_stats"),
        _ => unreachable!("log_stats is a CREATE statement"),
    })
}

/// Any query text, in the option `selector` picks, validates to a result or
/// a user-facing error on the helper thread: never a panic or an internal error.
pub fn validate_any(selector: u8, query: &str) {
    let mut definition = base().clone();
    match selector % 3 {
        0 => definition.extract_query = query.to_string(),
        1 => definition.count_src_query = query.to_string(),
        _ => definition.merge_partitions_query = query.to_string(),
    }
    if let Err(e) = isolate::run(move || validate(&definition, &builtin_catalog())) {
        assert_ne!(e.kind, ErrorKind::Internal, "{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every saved input of a fuzz target: its seed corpus and regressions.
    fn inputs(target: &str) -> Vec<Vec<u8>> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let mut out = Vec::new();
        for dir in [
            root.join("corpus").join(target),
            root.join("regressions").join(target),
        ] {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for entry in entries.flatten() {
                    out.push(std::fs::read(entry.path()).expect("readable input"));
                }
            }
        }
        out
    }

    #[test]
    fn ddl_corpus() {
        let mut inputs = inputs("ddl");
        inputs.push(LOG_STATS_SQL.as_bytes().to_vec());
        for input in inputs {
            if let Ok(text) = std::str::from_utf8(&input) {
                ddl_round_trip(text);
            }
        }
    }

    #[test]
    fn validate_corpus() {
        let inputs = inputs("validate");
        assert!(!inputs.is_empty());
        for input in inputs {
            if let Some((&selector, rest)) = input.split_first() {
                if let Ok(query) = std::str::from_utf8(rest) {
                    validate_any(selector, query);
                }
            }
        }
    }
}
