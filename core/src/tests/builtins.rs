//! The shipped rows and built-in view sets: their schemas as micromegas has
//! them, and reading a view that failed to load.

use super::*;

#[test]
fn reading_a_failed_view_is_refused() {
    let mut catalog = catalog_with_log_stats();
    let mut entry = catalog.get("log_stats").unwrap().clone();
    entry.load_error = Some("no longer valid after \"log_entries\" changed".into());
    catalog.insert(entry);
    let e = validate(&definition(&over_log_stats("4000")), &catalog).unwrap_err();
    assert_eq!(
        e.message,
        "extract_query reads materialized view \"log_stats\", which failed to load"
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("\"log_stats\": no longer valid after \"log_entries\" changed")
    );
}

#[test]
fn shipped_log_stats_infers_micromegas_fields_and_nullability() {
    let v = validate(&definition(LOG_STATS_SQL), &builtin_catalog()).unwrap();
    let fields: Vec<String> = v
        .schema
        .fields()
        .iter()
        .map(|f| {
            format!(
                "{} {}{}",
                f.name(),
                f.data_type(),
                if f.is_nullable() { "" } else { " not null" }
            )
        })
        .collect();
    assert_eq!(
        fields,
        [
            // nullable, as micromegas infers it (its test
            // seeded_log_stats_definition_passes_validation)
            "time_bin Timestamp(ns, \"+00:00\")",
            "process_id Dictionary(Int32, Utf8) not null",
            "level Int32 not null",
            "target Dictionary(Int32, Utf8) not null",
            "count Int64 not null",
            "audience Dictionary(Int32, Utf8)",
        ]
    );
}

#[test]
fn builtin_nullability_matches_micromegas() {
    let catalog = builtin_catalog();
    let nullable = |set: &str| -> Vec<String> {
        let entry = catalog.get(set).unwrap();
        entry
            .schema
            .fields()
            .iter()
            .filter(|f| f.is_nullable())
            .map(|f| f.name().clone())
            .collect()
    };
    assert_eq!(nullable("blocks"), ["streams.tags"]);
    assert!(nullable("log_entries").is_empty());
    assert!(nullable("measures").is_empty());
    let streams = catalog.get("streams").unwrap();
    assert_eq!(
        streams
            .schema
            .field_with_name("format")
            .unwrap()
            .data_type(),
        &arrow_schema::DataType::Utf8
    );
}

#[test]
fn shipped_schema_hashes_are_pinned() {
    // The hashes services compare partitions with; a change here retires
    // every partition of these view sets. Never update them silently.
    let catalog = builtin_catalog();
    let hash = |name: &str| {
        format!(
            "{:016x}",
            schema::schema_hash(&catalog.get(name).unwrap().schema)
        )
    };
    let mut got: Vec<(String, String)> =
        ["blocks", "log_entries", "measures", "processes", "streams"]
            .iter()
            .map(|n| (n.to_string(), hash(n)))
            .collect();
    let log_stats = validate(&definition(LOG_STATS_SQL), &catalog).unwrap();
    got.push((
        "log_stats".into(),
        format!("{:016x}", log_stats.schema_hash),
    ));
    assert_eq!(
        got,
        PINNED_SHIPPED
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>()
    );
}

pub(super) const PINNED_SHIPPED: &[(&str, &str)] = &[
    ("blocks", "c9edb7274850300f"),
    ("log_entries", "b6ed80fad0a7b270"),
    ("measures", "723d34a86dbb79cf"),
    ("processes", "213fb76e3e70d75d"),
    ("streams", "979ba96a330379ef"), // 0.1.2 added its format column
    ("log_stats", "8ab9272d00433e0a"),
];
