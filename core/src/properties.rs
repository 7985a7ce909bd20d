//! The properties the fuzz targets (`fuzz/`) check, as plain functions so
//! that `cargo test` runs them over the saved corpus and every regression
//! input too. Each panics when the property does not hold.

use crate::builtins::{builtin_catalog, LOG_STATS_SQL};
use crate::options::OptionValues;
use crate::{ddl, isolate, schema, validate, Definition, ErrorKind, Statement};
use std::sync::OnceLock;

/// Any text given as a deny rule compiles or is refused with a user-facing
/// error; a compiled rule evaluates on any context without error; and the
/// fingerprint of any text is 16 hex digits, the same whatever the layout.
pub fn deny_rule(text: &str) {
    let rule = text.to_string();
    let compiled = isolate::run(move || crate::deny::compile(&rule).map(|_| ()));
    match compiled {
        Ok(()) => {
            let rules = vec![("r".to_string(), text.to_string())];
            let context: [Option<String>; 12] = std::array::from_fn(|i| {
                (i % 3 != 0).then(|| text.chars().rev().collect::<String>())
            });
            let outcome = isolate::run(move || crate::deny::first_match(&rules, &context));
            if let Err(e) = outcome {
                // Only what the data can cause at run time (a bad pattern
                // for another input), never an internal error.
                assert_ne!(e.kind, ErrorKind::Internal, "{e}");
            }
        }
        Err(e) => assert_ne!(e.kind, ErrorKind::Internal, "{e}"),
    }
    let hash = crate::deny::sql_hash(text).expect("within the size limit");
    assert!(hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()));
    // Whitespace and comments between tokens never count. Whether added
    // layout changes the tokens themselves is sqlparser's (and so
    // upstream's) business: `,@` is a comma and an at-sign, but in `,@\n`
    // sqlparser 0.62 reads `@\n` as one word — the fingerprint follows it.
    let spaced = format!("  {text}\n");
    if crate::deny::sql_hash(&spaced).expect("within the size limit") != hash {
        let significant = |t: &str| {
            sqlparser::tokenizer::Tokenizer::new(&sqlparser::dialect::GenericDialect {}, t)
                .tokenize()
                .map(|tokens| {
                    tokens
                        .into_iter()
                        .filter(|t| !matches!(t, sqlparser::tokenizer::Token::Whitespace(_)))
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                })
        };
        // (When one side does not tokenize, it is hashed as raw text.)
        if let (Ok(a), Ok(b)) = (significant(text), significant(&spaced)) {
            assert_ne!(a, b, "layout changed the fingerprint of {text:?}");
        }
    }
}

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

/// For fuzz targets: libFuzzer's panic hook aborts on any panic, even one
/// the code under test catches on purpose (arrow-ipc's converter panics on
/// malformed messages; `schema::from_ipc_base64` turns that into an error).
/// This hook only prints, so a caught panic is no finding, while a broken
/// property (an assertion on the fuzzing thread) still aborts the run.
pub fn fuzzing_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}")));
    });
}

/// Any text read as a schema (JSON or base64 IPC) ends in a schema or a
/// user-facing error; an accepted schema round-trips through both stored
/// forms with the same hash.
pub fn schema_any(text: &str) {
    let text = text.to_string();
    let result = isolate::run(move || {
        let parsed = schema::parse_any(&text)?;
        let ipc = schema::to_ipc_base64(&parsed)?;
        let from_ipc = schema::from_ipc_base64(&ipc)?;
        let from_json = schema::from_json(&schema::to_json(&parsed))?;
        Ok((parsed, from_ipc, from_json))
    });
    match result {
        Ok((parsed, from_ipc, from_json)) => {
            assert_eq!(schema::schema_hash(&parsed), schema::schema_hash(&from_ipc));
            assert_eq!(
                schema::schema_hash(&parsed),
                schema::schema_hash(&from_json)
            );
        }
        Err(e) => assert_ne!(e.kind, ErrorKind::Internal, "{e}"),
    }
}

/// Any bytes as an Arrow IPC message (base64-encoded as a caller would
/// send them): a schema within the limits, or a user-facing error.
pub fn schema_ipc_bytes(bytes: &[u8]) {
    use base64::Engine;
    schema_any(&base64::engine::general_purpose::STANDARD.encode(bytes));
}

/// Any option values (fields separated by NUL: name, then the options in
/// canonical order, update_group as text) end in a definition or an
/// option error; an accepted one renders to a statement that parses back
/// to the same definition.
pub fn option_values(text: &str) {
    let mut parts = text.split('\0');
    let name = parts.next().unwrap_or_default().to_string();
    let values = OptionValues::from_positional(parts.map(|p| Some(p.to_string())));
    let result = isolate::run(move || {
        let definition = values.into_definition(&name)?;
        let rendered = definition.render(false);
        Ok((definition, rendered))
    });
    match result {
        Ok((definition, rendered)) => match ddl::parse(&rendered) {
            Ok(Statement::Create(again)) => {
                assert_eq!(Definition::from_statement(&again).as_ref(), Ok(&definition));
            }
            other => panic!("rendered statement does not parse back: {other:?}\n{rendered}"),
        },
        Err(e) => assert_ne!(e.kind, ErrorKind::Internal, "{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every saved input of a fuzz target: its seed corpus and regressions.
    fn inputs(target: &str) -> Vec<Vec<u8>> {
        // Read at run time: a test binary reused from another checkout of
        // the same target directory must still read this checkout's files.
        let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test");
        let root = Path::new(&manifest).join("../fuzz");
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

    #[test]
    fn schema_corpus() {
        let inputs = inputs("schema");
        assert!(!inputs.is_empty());
        for input in inputs {
            if let Ok(text) = std::str::from_utf8(&input) {
                schema_any(text);
            }
        }
    }

    #[test]
    fn schema_ipc_corpus() {
        let inputs = inputs("schema_ipc");
        assert!(!inputs.is_empty());
        for input in inputs {
            schema_ipc_bytes(&input);
        }
    }

    #[test]
    fn deny_corpus() {
        let inputs = inputs("deny");
        assert!(!inputs.is_empty());
        for input in inputs {
            if let Ok(text) = std::str::from_utf8(&input) {
                deny_rule(text);
            }
        }
    }

    #[test]
    fn options_corpus() {
        let inputs = inputs("options");
        assert!(!inputs.is_empty());
        for input in inputs {
            if let Ok(text) = std::str::from_utf8(&input) {
                option_values(text);
            }
        }
    }
}
