//! Any text given to the DDL parser ends in a statement or an error, never a
//! panic; an accepted CREATE renders back to a statement that parses to the
//! same definition.
#![no_main]
use libfuzzer_sys::fuzz_target;
use micromegas_views_core::{ddl, Definition, Statement};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
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
});
