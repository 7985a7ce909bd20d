//! Any query text, in any of the three options of an otherwise valid
//! definition, is validated against the shipped catalog to a result or an
//! error, on the same big-stack helper thread the extension uses: never a
//! panic, an abort or a stack overflow.
#![no_main]
use libfuzzer_sys::fuzz_target;
use micromegas_views_core::builtins::{builtin_catalog, LOG_STATS_SQL};
use micromegas_views_core::{ddl, isolate, validate, Definition, ErrorKind, Statement};
use std::sync::OnceLock;

fn base() -> &'static Definition {
    static BASE: OnceLock<Definition> = OnceLock::new();
    BASE.get_or_init(|| match ddl::parse(LOG_STATS_SQL).unwrap() {
        Statement::Create(c) => Definition::from_statement(&c).unwrap(),
        _ => unreachable!(),
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let Ok(query) = std::str::from_utf8(rest) else { return };
    let mut definition = base().clone();
    match selector % 3 {
        0 => definition.extract_query = query.to_string(),
        1 => definition.count_src_query = query.to_string(),
        _ => definition.merge_partitions_query = query.to_string(),
    }
    let result = isolate::run(move || validate(&definition, &builtin_catalog()));
    if let Err(e) = result {
        assert_ne!(e.kind, ErrorKind::Internal, "{e}");
    }
});
