//! The core's modules in layers, without an import cycle.

/// The core's modules in layers: each imports only modules listed before
/// it (so they read top to bottom, and no import cycle can come back).
pub(super) const LAYERS: &[&str] = &[
    "error",
    "meter",
    "bounded",
    "isolate",
    "schema",
    "catalog",
    "functions",
    "width",
    "planner",
    "author",
    "ddl",
    "options",
    "checks",
    "builtins",
    "prepare",
    "deny",
    "properties",
    "jobs",
    "sandbox",
];

#[test]
fn modules_import_only_from_layers_below() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_str().unwrap().to_string();
        if path.extension().and_then(|e| e.to_str()) != Some("rs")
            || module == "lib"
            || module == "tests"
        {
            continue;
        }
        let position = LAYERS
            .iter()
            .position(|m| *m == module)
            .unwrap_or_else(|| panic!("core/src/{module}.rs is not in LAYERS"));
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if name == module || name.is_empty() {
                continue;
            }
            let used = LAYERS
                .iter()
                .position(|m| *m == name)
                .unwrap_or_else(|| panic!("{module} uses crate::{name}, not in LAYERS"));
            assert!(
                used < position,
                "{module} (layer {position}) imports {name} (layer {used}): only layers below may be imported"
            );
        }
        seen.insert(module);
    }
    assert_eq!(
        seen.len(),
        LAYERS.len(),
        "LAYERS names a module that does not exist"
    );
}
