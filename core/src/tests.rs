//! Table-driven tests of every CREATE-time check: one accepted and at least
//! one rejected case each, asserting the message.

use crate::builtins::{builtin_catalog, LOG_STATS_SQL};
use crate::catalog::{Catalog, CatalogEntry, SourceKind};
use crate::checks::{referenced_relations, validate, Validated};
use crate::ddl::{parse, Statement};
use crate::error::{ErrorKind, Result};
use crate::options::Definition;
use crate::schema;

fn definition(text: &str) -> Definition {
    match parse(text).unwrap() {
        Statement::Create(c) => Definition::from_statement(&c).unwrap(),
        _ => panic!("not a CREATE"),
    }
}

const EXTRACT: &str = "SELECT date_bin('1 minute', time) AS time_bin, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY time_bin, target, audience";
const COUNT: &str = "SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'";
const MERGE: &str = "SELECT time_bin, target, sum(count) AS count, audience FROM {source} GROUP BY time_bin, target, audience";

/// A statement from the seed's example, with any option replaced.
fn statement(name: &str, overrides: &[(&str, &str)]) -> String {
    let mut options: Vec<(String, String)> = vec![
        ("extract_query".into(), format!("$q${EXTRACT}$q$")),
        ("count_src_query".into(), format!("$q${COUNT}$q$")),
        ("merge_partitions_query".into(), format!("$q${MERGE}$q$")),
        ("update_group".into(), "4000".into()),
        ("time_column".into(), "'time_bin'".into()),
        ("merge_sort_order".into(), "'time_bin, target'".into()),
    ];
    for (key, value) in overrides {
        let literal = match *key {
            "update_group" => value.to_string(),
            k if k.ends_with("_query") => format!("$q${value}$q$"),
            _ => format!("'{value}'"),
        };
        match options.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = literal,
            None => options.push((key.to_string(), literal)),
        }
    }
    let body: Vec<String> = options.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    format!(
        "CREATE MATERIALIZED VIEW {name} WITH ({})",
        body.join(",\n")
    )
}

fn check(overrides: &[(&str, &str)]) -> Result<Validated> {
    validate(&definition(&statement("v", overrides)), &builtin_catalog())
}

fn rejected(overrides: &[(&str, &str)]) -> String {
    let e = check(overrides).expect_err("should be rejected");
    assert_eq!(e.kind, ErrorKind::InvalidDefinition, "{e}");
    e.message
}

#[test]
fn seed_example_validates() {
    let v = check(&[]).unwrap();
    let names: Vec<&str> = v
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["time_bin", "target", "count", "audience"]);
    assert_eq!(v.reads, ["blocks", "log_entries"]);
}

#[test]
fn shipped_log_stats_validates() {
    let d = definition(LOG_STATS_SQL);
    assert_eq!(d.name, "log_stats");
    let v = validate(&d, &builtin_catalog()).unwrap();
    assert_eq!(
        schema::canonical_encoding(&v.schema),
        "micromegas-schema-v1\n\"time_bin\":timestamp(ns,\"+00:00\")\n\"process_id\":dictionary(int32,utf8)\n\"level\":int32\n\"target\":dictionary(int32,utf8)\n\"count\":int64\n\"audience\":dictionary(int32,utf8)\n"
    );
    assert_eq!(v.schema_hash, schema::schema_hash(&v.schema));
    assert_eq!(v.reads, ["blocks", "log_entries"]);
}

fn catalog_with_log_stats() -> Catalog {
    let mut catalog = builtin_catalog();
    let v = validate(&definition(LOG_STATS_SQL), &catalog).unwrap();
    catalog.insert(CatalogEntry {
        name: "log_stats".into(),
        schema: v.schema,
        update_group: Some(3000),
        kind: SourceKind::Defined,
        load_error: None,
    });
    catalog
}

fn over_log_stats(group: &str) -> String {
    statement(
        "daily",
        &[
            ("extract_query", "SELECT date_bin('1 day', time_bin) AS day, process_id, sum(count) AS count FROM log_stats WHERE time_bin >= '{begin}' AND time_bin < '{end}' GROUP BY day, process_id"),
            ("merge_partitions_query", "SELECT day, process_id, sum(count) AS count FROM {source} GROUP BY day, process_id"),
            ("time_column", "day"),
            ("merge_sort_order", "day"),
            ("update_group", group),
        ],
    )
}

#[test]
fn view_over_log_stats_respects_group_order() {
    let catalog = catalog_with_log_stats();
    let v = validate(&definition(&over_log_stats("4000")), &catalog).unwrap();
    assert_eq!(v.reads, ["blocks", "log_stats"]);
    let e = validate(&definition(&over_log_stats("3000")), &catalog).unwrap_err();
    assert_eq!(
        e.message,
        "update_group 3000 must be greater than 3000, the update_group of \"log_stats\", which extract_query reads"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some("Use an update_group of at least 3001.")
    );
}

#[test]
fn extract_query_must_plan() {
    assert_eq!(
        rejected(&[("extract_query", "SELECT nope FROM log_entries")]),
        "extract_query does not plan: No field named nope."
    );
    // The DETAIL goes on from the message, not repeating it.
    let e = check(&[("extract_query", "SELECT nope FROM log_entries")]).unwrap_err();
    let detail = e.detail.unwrap_or_default();
    assert!(detail.starts_with("Valid fields are log_entries.process_id"), "{detail}");
    assert!(!detail.contains("No field named"), "{detail}");
    assert_eq!(
        rejected(&[("extract_query", "SELECT * FROM log_entriez")]),
        "extract_query reads \"log_entriez\", which is not a known view set"
    );
    assert_eq!(
        rejected(&[(
            "extract_query",
            "SELECT no_such_function(msg) FROM log_entries"
        )]),
        "extract_query does not plan: Invalid function 'no_such_function'."
    );
    assert!(rejected(&[("extract_query", "SELEC 1")]).starts_with("extract_query does not parse: "));
}

#[test]
fn audience_or_process_id_of_string_type() {
    // process_id alone is enough.
    assert!(check(&[
        ("extract_query", "SELECT time, process_id FROM log_entries"),
        (
            "merge_partitions_query",
            "SELECT time, process_id FROM {source}"
        ),
        ("time_column", "time"),
        ("merge_sort_order", "time"),
    ])
    .is_ok());
    assert_eq!(
        rejected(&[
            ("extract_query", "SELECT time, msg FROM log_entries"),
            ("merge_partitions_query", "SELECT time, msg FROM {source}"),
            ("time_column", "time"),
            ("merge_sort_order", "time"),
        ]),
        "extract_query output has no \"audience\" or \"process_id\" column"
    );
    let e = check(&[
        (
            "extract_query",
            "SELECT time, level AS audience FROM log_entries",
        ),
        (
            "merge_partitions_query",
            "SELECT time, audience FROM {source}",
        ),
        ("time_column", "time"),
        ("merge_sort_order", "time"),
    ])
    .unwrap_err();
    assert_eq!(
        e.message,
        "extract_query column \"audience\" must be Utf8 or Dictionary(_, Utf8), not Int32"
    );
    // When audience is present it decides, even if process_id is a string.
    let e = check(&[
        (
            "extract_query",
            "SELECT time, process_id, 1 AS audience FROM log_entries",
        ),
        (
            "merge_partitions_query",
            "SELECT time, process_id, audience FROM {source}",
        ),
        ("time_column", "time"),
        ("merge_sort_order", "time"),
    ])
    .unwrap_err();
    assert_eq!(
        e.message,
        "extract_query column \"audience\" must be Utf8 or Dictionary(_, Utf8), not Int64"
    );
    assert!(e
        .detail
        .unwrap()
        .starts_with("\"audience\" is present, so it decides"));
    // LargeUtf8 is refused; Utf8 and dictionaries of Utf8 with any key are accepted.
    for (cast, ok) in [
        ("LargeUtf8", false),
        ("Utf8View", false),
        ("Dictionary(Int32, LargeUtf8)", false),
        ("Utf8", true),
        ("Dictionary(Int16, Utf8)", true),
        ("Dictionary(UInt64, Utf8)", true),
    ] {
        let extract =
            format!("SELECT time, arrow_cast(process_id, '{cast}') AS audience FROM log_entries");
        let result = check(&[
            ("extract_query", &extract),
            (
                "merge_partitions_query",
                "SELECT time, audience FROM {source}",
            ),
            ("time_column", "time"),
            ("merge_sort_order", "time"),
        ]);
        assert_eq!(result.is_ok(), ok, "{cast}: {result:?}");
    }
    // process_id decides only without audience, by the same rule.
    let e = check(&[
        (
            "extract_query",
            "SELECT time, arrow_cast(process_id, 'LargeUtf8') AS process_id FROM log_entries",
        ),
        (
            "merge_partitions_query",
            "SELECT time, process_id FROM {source}",
        ),
        ("time_column", "time"),
        ("merge_sort_order", "time"),
    ])
    .unwrap_err();
    assert_eq!(
        e.message,
        "extract_query column \"process_id\" must be Utf8 or Dictionary(_, Utf8), not LargeUtf8"
    );
}

#[test]
fn merge_output_matches_extract_schema() {
    // Nullability may differ: coalesce makes count non-null.
    assert!(check(&[("merge_partitions_query", "SELECT time_bin, target, coalesce(sum(count), 0) AS count, audience FROM {source} GROUP BY time_bin, target, audience")]).is_ok());
    let e = check(&[("merge_partitions_query", "SELECT time_bin, target, audience, sum(count) AS count FROM {source} GROUP BY time_bin, target, audience")]).unwrap_err();
    assert_eq!(
        e.message,
        "merge_partitions_query output does not match the extract_query schema"
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("column 3: extract_query has \"count\" Int64, merge_partitions_query has \"audience\" Dictionary(Int32, Utf8)")
    );
    let e = check(&[(
        "merge_partitions_query",
        "SELECT time_bin, target, sum(count) AS count FROM {source} GROUP BY time_bin, target",
    )])
    .unwrap_err();
    assert_eq!(
        e.detail.as_deref(),
        Some("column 4: only extract_query has a column there (\"audience\" Dictionary(Int32, Utf8)); extract_query has 4 columns, merge_partitions_query has 3")
    );
    let e = check(&[("merge_partitions_query", "SELECT time_bin, target, sum(count) AS total, audience FROM {source} GROUP BY time_bin, target, audience")]).unwrap_err();
    assert_eq!(
        e.detail.as_deref(),
        Some("column 3: extract_query has \"count\" Int64, merge_partitions_query has \"total\" Int64")
    );
    assert_eq!(
        rejected(&[("merge_partitions_query", "SELECT nope FROM {source}")]),
        "merge_partitions_query does not plan: No field named nope."
    );
}

#[test]
fn count_query_yields_one_integer_count() {
    assert!(check(&[("count_src_query", "SELECT count(*) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'")]).is_ok());
    assert_eq!(
        rejected(&[("count_src_query", "SELECT sum(nb_objects) AS n FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'")]),
        "count_src_query must produce exactly one column named \"count\", not (n Int64)"
    );
    assert_eq!(
        rejected(&[("count_src_query", "SELECT sum(nb_objects) AS count, 1 AS x FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'")]),
        "count_src_query must produce exactly one column named \"count\", not (count Int64, x Int64)"
    );
    assert_eq!(
        rejected(&[("count_src_query", "SELECT avg(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'")]),
        "count_src_query column \"count\" must be Int64, not Float64"
    );
    assert_eq!(
        rejected(&[("count_src_query", "SELECT CAST(count(*) AS INT) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'")]),
        "count_src_query column \"count\" must be Int64, not Int32"
    );
}

#[test]
fn placeholders_are_required() {
    assert_eq!(
        rejected(&[(
            "count_src_query",
            "SELECT count(*) AS count FROM blocks WHERE insert_time < '{end}'"
        )]),
        "count_src_query must use {begin}"
    );
    assert_eq!(
        rejected(&[(
            "count_src_query",
            "SELECT count(*) AS count FROM blocks WHERE insert_time >= '{begin}'"
        )]),
        "count_src_query must use {end}"
    );
    assert_eq!(
        rejected(&[(
            "merge_partitions_query",
            "SELECT time, target FROM log_entries"
        )]),
        "merge_partitions_query must read {source}"
    );
    // Placeholders count only where the planned query uses them: not in a
    // comment, not inside an unrelated string.
    assert_eq!(
        rejected(&[(
            "merge_partitions_query",
            "SELECT time, target FROM log_entries -- {source}"
        )]),
        "merge_partitions_query must read {source}"
    );
    assert_eq!(
        rejected(&[(
            "merge_partitions_query",
            "SELECT time, target FROM log_entries WHERE target <> '{source}'"
        )]),
        "merge_partitions_query must read {source}"
    );
    assert_eq!(
        rejected(&[(
            "count_src_query",
            "SELECT count(*) AS count FROM blocks /* {begin} {end} */"
        )]),
        "count_src_query must use {begin}"
    );
    assert_eq!(
        rejected(&[(
            "count_src_query",
            "SELECT count(*) AS count FROM blocks WHERE insert_time >= '{begin}' AND stream_id <> 'x{end}'"
        )]),
        "count_src_query must use {end}"
    );
    // A typed literal or a function argument is a use.
    assert!(check(&[(
        "count_src_query",
        "SELECT count(*) AS count FROM blocks WHERE insert_time BETWEEN TIMESTAMP '{begin}' AND to_timestamp('{end}')"
    )])
    .is_ok());
}

#[test]
fn only_immutable_functions() {
    // date_bin, arrow_cast and array_has are immutable (accepted above and in log_stats).
    assert_eq!(
        rejected(&[("extract_query", "SELECT now() AS time_bin, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries GROUP BY target")]),
        "extract_query calls now(), which is not immutable"
    );
    assert_eq!(
        rejected(&[("count_src_query", "SELECT sum(nb_objects) AS count FROM blocks WHERE random() < 0.5 AND insert_time >= '{begin}' AND insert_time < '{end}'")]),
        "count_src_query calls random(), which is not immutable"
    );
    assert_eq!(
        rejected(&[("merge_partitions_query", "SELECT time_bin, target, sum(count) AS count, audience FROM {source} WHERE time_bin < now() GROUP BY time_bin, target, audience")]),
        "merge_partitions_query calls now(), which is not immutable"
    );
    // Inside a subquery too.
    assert_eq!(
        rejected(&[("count_src_query", "SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}' AND nb_objects > (SELECT random())")]),
        "count_src_query calls random(), which is not immutable"
    );
}

#[test]
fn denied_functions() {
    assert!(check(&[("extract_query", "SELECT date_bin('1 minute', time) AS time_bin, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries WHERE property_get(properties, 'x') IS NOT NULL GROUP BY time_bin, target")]).is_ok());
    for (query, name) in [
        ("SELECT * FROM view_instance('thread_spans', 'abc')", "view_instance"),
        ("SELECT * FROM retire_partitions('a', 'b', '{begin}', '{end}')", "retire_partitions"),
        ("SELECT * FROM log_entries WHERE process_id IN (SELECT process_id FROM process_spans('x'))", "process_spans"),
        ("SELECT deny_queries('x', 'y') AS x", "deny_queries"),
        ("SELECT * FROM materialize_partitions('a', '{begin}', '{end}', 60)", "materialize_partitions"),
        ("SELECT * FROM regenerate_partitions('a', '{begin}', '{end}', 60)", "regenerate_partitions"),
        ("SELECT * FROM perfetto_trace_chunks('p', 'both', '{begin}', '{end}')", "perfetto_trace_chunks"),
        ("SELECT * FROM retire_partition_by_metadata('a', 'b', '{begin}', '{end}')", "retire_partition_by_metadata"),
        ("SELECT retire_partition_by_file('f') AS x", "retire_partition_by_file"),
        ("SELECT remove_query_denial('r') AS x", "remove_query_denial"),
    ] {
        assert_eq!(
            rejected(&[("extract_query", query)]),
            format!("extract_query calls {name}(), which a definition may not call")
        );
    }
}

#[test]
fn group_order() {
    assert!(check(&[("update_group", "2001")]).is_ok());
    assert_eq!(
        rejected(&[("update_group", "2000")]),
        "update_group 2000 must be greater than 2000, the update_group of \"log_entries\", which extract_query reads"
    );
    assert_eq!(
        rejected(&[("update_group", "-5")]),
        "update_group -5 must be greater than 2000, the update_group of \"log_entries\", which extract_query reads"
    );
}

#[test]
fn merge_sort_order_columns_exist() {
    assert!(check(&[("merge_sort_order", "audience, count")]).is_ok());
    assert_eq!(
        rejected(&[("merge_sort_order", "time_bin, process_id")]),
        "merge_sort_order column \"process_id\" is not in the extract_query output"
    );
}

#[test]
fn time_columns_exist_and_are_nanosecond_timestamps() {
    assert!(check(&[
        ("min_time_column", "time_bin"),
        ("max_time_column", "time_bin")
    ])
    .is_ok());
    assert_eq!(
        rejected(&[("time_column", "time")]),
        "time column \"time\" (time_column) is not in the extract_query output"
    );
    assert_eq!(
        rejected(&[("max_time_column", "missing")]),
        "time column \"missing\" (max_time_column) is not in the extract_query output"
    );
    assert_eq!(
        rejected(&[("time_column", "count")]),
        "time column \"count\" (time_column) must be a nanosecond timestamp, not Int64"
    );
    assert_eq!(
        rejected(&[
            ("extract_query", "SELECT arrow_cast(time, 'Timestamp(Millisecond, Some(\"+00:00\"))') AS time_bin, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries GROUP BY 1, target"),
            ("merge_partitions_query", "SELECT time_bin, target, sum(count) AS count, audience FROM {source} GROUP BY time_bin, target, audience"),
        ]),
        "time column \"time_bin\" (time_column) must be a nanosecond timestamp, not Timestamp(ms, \"+00:00\")"
    );
}

#[test]
fn only_read_only_queries() {
    for (query, kind) in [
        (
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/tmp/x'",
            "CREATE EXTERNAL TABLE",
        ),
        ("COPY (SELECT 1) TO '/tmp/x'", "COPY … TO"),
        ("INSERT INTO log_entries VALUES (1)", "INSERT"),
        ("SET datafusion.execution.batch_size = 1", "SET"),
        ("DELETE FROM log_entries", "DELETE"),
        ("DROP TABLE log_entries", "DROP TABLE"),
    ] {
        assert_eq!(
            rejected(&[("extract_query", query)]),
            format!("extract_query must be a read-only query, not {kind}"),
            "{query}"
        );
    }
    assert_eq!(
        rejected(&[("extract_query", "SELECT 1; SELECT 2")]),
        "extract_query must hold exactly one query, found 2 statements"
    );
    // A trailing semicolon is still one query.
    assert!(check(&[("extract_query", &format!("{EXTRACT};"))]).is_ok());
}

#[test]
fn count_reads_only_raw_tables() {
    // An extract reading blocks directly may count blocks (seed example above).
    assert_eq!(
        rejected(&[("count_src_query", "SELECT count(*) AS count FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}'")]),
        "count_src_query reads \"log_entries\", which is not raw block metadata"
    );
    let e = validate(
        &definition(&statement("v", &[("count_src_query", "SELECT sum(count) AS count FROM log_stats WHERE time_bin >= '{begin}' AND time_bin < '{end}'")])),
        &catalog_with_log_stats(),
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        "count_src_query reads \"log_stats\", which is not raw block metadata"
    );
    assert_eq!(
        rejected(&[(
            "count_src_query",
            "SELECT 1 AS count WHERE '{begin}' < '{end}'"
        )]),
        "count_src_query reads no raw block metadata"
    );
}

#[test]
fn instance_only_sets_are_not_readable() {
    assert_eq!(
        rejected(&[("extract_query", "SELECT * FROM thread_spans")]),
        "extract_query reads view set \"thread_spans\", which has no global instance"
    );
}

#[test]
fn real_micromegas_functions_plan() {
    let v = check(&[
        ("extract_query", "SELECT date_bin('1 minute', time) AS time_bin, process_id, make_histogram(0.0, 100.0, 100, value) AS h, property_get(process_properties, 'exe') AS process_exe, jsonb_as_string(jsonb_get(properties_to_jsonb(properties), 'k')) AS k FROM measures WHERE name = 'cpu' GROUP BY 1, 2, 4, 5"),
        ("merge_partitions_query", "SELECT time_bin, process_id, sum_histograms(h) AS h, process_exe, k FROM {source} GROUP BY time_bin, process_id, process_exe, k"),
        ("merge_sort_order", "time_bin"),
    ])
    .unwrap();
    assert_eq!(
        v.schema.field(2).data_type(),
        &crate::functions::histogram_type()
    );
}

#[test]
fn micromegas_functions_refuse_wrong_argument_kinds() {
    let refused = |select: &str| -> String {
        let extract = format!("SELECT time, process_id, {select} AS x FROM log_entries");
        rejected(&[
            ("extract_query", extract.as_str()),
            (
                "merge_partitions_query",
                "SELECT time, process_id, x FROM {source}",
            ),
            ("time_column", "time"),
            ("merge_sort_order", "time"),
        ])
    };
    assert_eq!(
        refused("property_get(properties, 42)"),
        "extract_query does not plan: property_get() argument 2 must be a string, not Int64"
    );
    assert_eq!(
        refused("property_get(level, 'exe')"),
        "extract_query does not plan: property_get() argument 1 must be a property set (a list of key/value pairs, or jsonb), not Int32"
    );
    assert_eq!(
        refused("jsonb_as_string(msg)"),
        "extract_query does not plan: jsonb_as_string() argument 1 must be a jsonb value (binary), not Utf8"
    );
    assert_eq!(
        refused("jsonb_parse(msg, msg)"),
        "extract_query does not plan: jsonb_parse() takes 1 argument, not 2"
    );
    assert_eq!(
        refused("quantile_from_histogram(level, 0.5)"),
        "extract_query does not plan: quantile_from_histogram() argument 1 must be a histogram (as make_histogram produces), not Int32"
    );
    // Dictionaries, other string widths and NULL are accepted.
    assert!(check(&[
        ("extract_query", "SELECT time, process_id, property_get(properties, arrow_cast(msg, 'LargeUtf8')) AS a, jsonb_as_string(jsonb_parse(target)) AS b, jsonb_as_string(NULL) AS c FROM log_entries"),
        ("merge_partitions_query", "SELECT time, process_id, a, b, c FROM {source}"),
        ("time_column", "time"),
        ("merge_sort_order", "time"),
    ])
    .is_ok());
}

#[test]
fn relations_are_collected_for_the_catalog_snapshot() {
    let d = definition(&over_log_stats("4000"));
    assert_eq!(referenced_relations(&d).unwrap(), ["blocks", "log_stats"]);
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = format!("SELECT {}1{} AS x", "(".repeat(10_000), ")".repeat(10_000));
    let e = crate::isolate::run(move || check(&[("extract_query", &deep)])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooComplex);
    assert_eq!(e.message, "extract_query is nested too deeply");
    let long_chain = format!("SELECT 1{} AS x", " + 1".repeat(100_000));
    let e = crate::isolate::run(move || check(&[("extract_query", &long_chain)])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooComplex, "{e}");
    assert_eq!(e.message, "extract_query is nested too deeply");
    // Just under the limit still plans.
    let chain = format!("SELECT 1{} AS x", " + 1".repeat(400));
    let e = crate::isolate::run(move || check(&[("extract_query", &chain)])).unwrap_err();
    assert_eq!(
        e.message,
        "extract_query output has no \"audience\" or \"process_id\" column"
    );
}

/// A type nests like an expression: Arrow recurses once per level of it
/// when it casts, so a CAST to INT followed by 20,000 `[]` overflowed even
/// the planning thread's 256 MB stack (a crash of the backend). Refused
/// with the nesting limit, in a definition, in arrow_cast's type string and
/// in a deny rule; a type nested a little is fine.
#[test]
fn deep_types_are_an_error_not_a_crash() {
    let deep_cast = format!(
        "SELECT time, process_id, CAST(NULL AS INT{}) AS x FROM log_entries",
        "[]".repeat(20_000)
    );
    let deep_arrow = format!(
        "SELECT time, process_id, arrow_cast(NULL, '{}Int32{}') AS x FROM log_entries",
        "List(".repeat(30_000),
        ")".repeat(30_000)
    );
    // The parser itself recursed per level of an angle-bracket type
    // (15,000 levels overflowed the planning thread before any check ran),
    // DataFusion per `[]` of a typed string, and arrow_cast's type string
    // was counted only when single-quoted.
    let deep_angle = format!(
        "SELECT time, process_id, CAST(1 AS {}INT{}) AS x FROM log_entries",
        "ARRAY<".repeat(15_000),
        ">".repeat(15_000)
    );
    let deep_typed_string = format!(
        "SELECT time, process_id, INT{} '{{}}' AS x FROM log_entries",
        "[]".repeat(240_000)
    );
    let typed_string = format!(
        "SELECT time, process_id, INT{} '{{}}' AS x FROM log_entries",
        "[]".repeat(600)
    );
    let dollar_arrow = format!(
        "SELECT time, process_id, arrow_cast(NULL, $t${}Int32{}$t$) AS x FROM log_entries",
        "List(".repeat(600),
        ")".repeat(600)
    );
    for query in [
        deep_cast,
        deep_arrow,
        deep_angle,
        deep_typed_string,
        typed_string,
        dollar_arrow,
    ] {
        let e = crate::isolate::run(move || check(&[("extract_query", &query)])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooComplex, "{e}");
        assert_eq!(e.message, "extract_query is nested too deeply");
    }
    let e = crate::isolate::run(move || {
        crate::deny::compile(&format!(
            "CAST(client AS INT{}) IS NULL",
            "[]".repeat(20_000)
        ))
        .map(|_| ())
    })
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooComplex, "{e}");
    let e = crate::isolate::run(move || {
        crate::deny::compile(&format!(
            "CAST(client AS {}INT{}) IS NULL",
            "ARRAY<".repeat(9_300),
            ">".repeat(9_300)
        ))
        .map(|_| ())
    })
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooComplex, "{e}");
    // Long flat shapes are not nesting: 2,000 comparisons side by side
    // (a `<` after a column is no type), a 2,000-value IN list.
    let flat = format!(
        "SELECT time, process_id, {} FROM log_entries WHERE level IN ({})",
        (0..2_000)
            .map(|i| format!("level < {i} AS c{i}"))
            .collect::<Vec<_>>()
            .join(", "),
        (0..2_000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let e = crate::isolate::run(move || check(&[("extract_query", &flat)])).unwrap_err();
    assert_ne!(e.kind, ErrorKind::TooComplex, "{e}");
    // A few levels plan: the error is the next check's (no audience column).
    let shallow = format!(
        "SELECT time, process_id, CAST(NULL AS INT{}) AS x, arrow_cast(NULL, 'List(List(Int32))') AS y FROM log_entries",
        "[]".repeat(3)
    );
    let e = crate::isolate::run(move || check(&[("extract_query", &shallow)])).unwrap_err();
    assert_ne!(e.kind, ErrorKind::TooComplex, "{e}");
}

#[test]
fn panics_become_errors() {
    let e = crate::isolate::run::<(), _>(|| panic!("boom")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert_eq!(e.detail.as_deref(), Some("boom"));
}

/// A chain of common table expressions each reading the previous one twice:
/// a few hundred bytes of text that plan to about 7 × 2^depth nodes.
fn cte_chain(depth: usize) -> String {
    let mut q = String::from(
        "WITH c0 AS (SELECT date_bin('1 minute', time) AS time_bin, process_id FROM log_entries)",
    );
    for i in 1..=depth {
        q.push_str(&format!(
            ", c{i} AS (SELECT * FROM c{p} UNION ALL SELECT * FROM c{p})",
            p = i - 1
        ));
    }
    q.push_str(&format!(" SELECT * FROM c{depth}"));
    q
}

fn cte_overrides(query: &str) -> Vec<(&'static str, String)> {
    vec![
        ("extract_query", query.to_string()),
        (
            "merge_partitions_query",
            "SELECT time_bin, process_id FROM {source}".to_string(),
        ),
        ("merge_sort_order", "time_bin".to_string()),
    ]
}

fn check_owned(overrides: Vec<(&'static str, String)>) -> Result<Validated> {
    let borrowed: Vec<(&str, &str)> = overrides.iter().map(|(k, v)| (*k, v.as_str())).collect();
    check(&borrowed)
}

#[test]
fn exponential_cte_chain_hits_the_plan_node_limit() {
    // Under the limit the same shape plans and validates.
    let small = cte_overrides(&cte_chain(6));
    assert!(crate::isolate::run(move || check_owned(small)).is_ok());
    let big = cte_overrides(&cte_chain(30));
    let e = crate::isolate::run(move || check_owned(big)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooComplex, "{e}");
    assert_eq!(
        e.message,
        "extract_query plans to more than 10000 plan nodes"
    );
    assert!(e.hint.is_some());
}

#[test]
fn validation_stops_at_its_time_limit() {
    use crate::isolate::{run_with, Budget};
    use std::time::Duration;
    // 12 levels is under a raised node limit but takes far longer than
    // 50 ms (seconds).
    let overrides = cte_overrides(&cte_chain(12));
    let e = run_with(
        Budget::with_timeout(Duration::from_millis(50)).with_max_plan_nodes(250_000),
        move || check_owned(overrides),
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::TimeLimit, "{e}");
    assert!(
        e.message
            .ends_with("exceeded the validation time limit of 50 ms"),
        "{e}"
    );
    assert!(e
        .hint
        .unwrap()
        .contains("micromegas_views.validation_timeout"));
}

#[test]
fn a_lease_hash_is_the_sha256_of_the_token_bytes() {
    // sha256(uuid_send('00000000-0000-0000-0000-000000000000'::uuid)) in SQL.
    assert_eq!(
        hex_of(&crate::jobs::lease_hash(&[0u8; 16])),
        "374708fff7719dd5979ec875d56cd2286f6d3cf7ec317a3b25632aab28ec37bb"
    );
    // ... of 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' (bytes in text order).
    let token = [
        0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a,
        0x11,
    ];
    assert_eq!(
        hex_of(&crate::jobs::lease_hash(&token)),
        "ad1314c8cb19ce26ca153da85a11b617a875533f79bc7ab93afeac8937c88a26"
    );
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_caller_gets_the_time_limit_even_without_a_checkpoint() {
    use crate::isolate::{run_with, set_phase, Budget};
    use std::time::{Duration, Instant};
    // A job busy where no checkpoint reaches it (one long DataFusion pass
    // over a very wide query): the caller is answered at the deadline, not
    // when the job next looks at its budget.
    let (release, stuck) = std::sync::mpsc::channel::<()>();
    let started = Instant::now();
    let e = run_with(Budget::with_timeout(Duration::from_millis(50)), move || {
        set_phase("merge_partitions_query");
        let _ = stuck.recv_timeout(Duration::from_secs(30));
        Ok(())
    })
    .unwrap_err();
    let waited = started.elapsed();
    release.send(()).ok();
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    assert_eq!(e.kind, ErrorKind::TimeLimit, "{e}");
    assert_eq!(
        e.message,
        "merge_partitions_query exceeded the validation time limit of 50 ms"
    );
}

#[test]
fn a_dropped_job_is_cancelled_at_its_next_checkpoint() {
    use crate::isolate::{checkpoint, submit, Budget};
    let (ended, ended_rx) = std::sync::mpsc::channel();
    let pending = submit(Budget::unlimited(), move || loop {
        if let Err(e) = checkpoint() {
            ended.send(e.kind).unwrap();
            return Err::<(), _>(e);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    })
    .unwrap();
    drop(pending);
    assert_eq!(
        ended_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap(),
        ErrorKind::Cancelled
    );
}

#[test]
fn a_new_job_does_not_wait_for_an_abandoned_one() {
    use crate::isolate::{run, submit, Budget};
    // A job stuck where no checkpoint reaches it (like one long analyzer rule).
    let (release, stuck) = std::sync::mpsc::channel::<()>();
    let abandoned = submit(Budget::unlimited(), move || {
        let _ = stuck.recv();
        Ok(())
    })
    .unwrap();
    drop(abandoned);
    // The next job runs on a thread of its own while the first is still stuck.
    assert_eq!(run(|| Ok(42)).unwrap(), 42);
    release.send(()).unwrap();
}

#[test]
fn table_function_arguments_are_checked_like_the_rest() {
    let e = check(&[(
        "extract_query",
        "SELECT time, process_id, key FROM log_entries CROSS JOIN jsonb_each(jsonb_parse(CAST(now() AS VARCHAR)))",
    ), ("merge_partitions_query", "SELECT time, process_id, key FROM {source}"),
    ("time_column", "time"), ("merge_sort_order", "time")])
    .unwrap_err();
    assert_eq!(
        e.message, "extract_query calls now(), which is not immutable",
        "{e}"
    );
}

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

const PINNED_SHIPPED: &[(&str, &str)] = &[
    ("blocks", "c9edb7274850300f"),
    ("log_entries", "b6ed80fad0a7b270"),
    ("measures", "723d34a86dbb79cf"),
    ("processes", "213fb76e3e70d75d"),
    ("streams", "979ba96a330379ef"), // 0.1.2 added its format column
    ("log_stats", "8ab9272d00433e0a"),
];

// ---- author checks (core/src/author.rs): true positives and near misses.

fn findings_of(text: &str, catalog: &Catalog) -> Vec<(&'static str, String)> {
    validate(&definition(text), catalog)
        .unwrap()
        .findings
        .into_iter()
        .map(|f| (f.check, f.message))
        .collect()
}

fn findings(overrides: &[(&str, &str)]) -> Vec<(&'static str, String)> {
    findings_of(&statement("v", overrides), &builtin_catalog())
}

#[test]
fn shipped_log_stats_and_the_seed_example_meet_every_obligation() {
    assert_eq!(findings_of(LOG_STATS_SQL, &builtin_catalog()), []);
    assert_eq!(findings(&[]), []);
    assert_eq!(
        findings_of(&over_log_stats("4000"), &catalog_with_log_stats()),
        []
    );
}

const MERGE_COUNT: &str = "SELECT time_bin, target, count(*) AS count, audience FROM {source} GROUP BY time_bin, target, audience";

#[test]
fn non_composable_merge_fires_on_count_and_not_on_sum_of_counts() {
    let found = findings(&[("merge_partitions_query", MERGE_COUNT)]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "non_composable_merge");
    assert_eq!(
        found[0].1,
        "merge_partitions_query computes count(*) (column \"count\") over partitions that are already aggregated: it counts partition rows, not the rows they summarize"
    );
    // near misses: sum of the counts, max, min
    for merge in [
        MERGE,
        "SELECT time_bin, target, max(count) AS count, audience FROM {source} GROUP BY time_bin, target, audience",
        "SELECT time_bin, target, min(count) AS count, audience FROM {source} GROUP BY time_bin, target, audience",
        "SELECT time_bin, target, count, audience FROM {source}",
    ] {
        assert_eq!(findings(&[("merge_partitions_query", merge)]), [], "{merge}");
    }
}

const EXTRACT_MEAN: &str = "SELECT date_bin('1 minute', time) AS time_bin, target, avg(level) AS mean_level, count(DISTINCT level) AS levels, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY time_bin, target";

#[test]
fn non_composable_merge_fires_on_averages_distinct_counts_and_medians() {
    let with_merge = |merge: &str| {
        findings(&[
            ("extract_query", EXTRACT_MEAN),
            ("merge_partitions_query", merge),
        ])
    };
    let found = with_merge("SELECT time_bin, target, avg(mean_level) AS mean_level, sum(levels) AS levels, audience FROM {source} GROUP BY time_bin, target, audience");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .1
            .contains("avg(mean_level) (column \"mean_level\")"),
        "{found:?}"
    );
    assert!(found[0].1.contains("an average of averages"), "{found:?}");
    let found = with_merge("SELECT time_bin, target, median(mean_level) AS mean_level, count(DISTINCT levels) AS levels, audience FROM {source} GROUP BY time_bin, target, audience");
    let checks: Vec<&str> = found.iter().map(|f| f.0).collect();
    assert_eq!(
        checks,
        ["non_composable_merge", "non_composable_merge"],
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.1.contains("median does not compose")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.1.contains("count does not compose: the distinct values")),
        "{found:?}"
    );
    // the extract itself (filtered on insert_time) is not a merge
    assert_eq!(with_merge("SELECT time_bin, target, max(mean_level) AS mean_level, sum(levels) AS levels, audience FROM {source} GROUP BY time_bin, target, audience"), []);
}

const EXTRACT_UNFILTERED: &str = "SELECT date_bin('1 minute', time) AS time_bin, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries GROUP BY time_bin, target";

#[test]
fn double_count_without_range_fires_on_unfiltered_counts_only() {
    let found = findings(&[("extract_query", EXTRACT_UNFILTERED)]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "double_count_without_range");
    assert_eq!(
        found[0].1,
        "extract_query computes count(*) (column \"count\") without a range filter on {begin}/{end}: a partition built over a wider range counts rows another partition already counted"
    );
    // near misses: the same count filtered on insert_time; a sum over a
    // view materialized here (its rows are already aggregated: not judged);
    // max unfiltered
    assert_eq!(findings(&[]), []);
    let over_view =
        over_log_stats("4000").replace(" WHERE time_bin >= '{begin}' AND time_bin < '{end}'", "");
    assert!(over_view.contains("FROM log_stats GROUP BY"), "{over_view}");
    assert_eq!(findings_of(&over_view, &catalog_with_log_stats()), []);
    let max_only = "SELECT date_bin('1 minute', time) AS time_bin, target, max(level) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries GROUP BY time_bin, target";
    assert_eq!(
        findings(&[
            ("extract_query", max_only),
            ("merge_partitions_query", "SELECT time_bin, target, max(count) AS count, audience FROM {source} GROUP BY time_bin, target, audience"),
        ]),
        []
    );
}

#[test]
fn range_filter_column_fires_on_event_time_of_ingested_data() {
    let on_time = "SELECT date_bin('1 minute', time) AS time_bin, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries WHERE time >= '{begin}' AND time < '{end}' GROUP BY time_bin, target";
    let found = findings(&[("extract_query", on_time)]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "range_filter_column");
    assert_eq!(
        found[0].1,
        "extract_query bounds log_entries.time by {begin}/{end}, but log_entries is ingested data: its range is insert_time, when a row arrived"
    );
    // the same through an alias
    let aliased = on_time
        .replace(
            "FROM log_entries WHERE time",
            "FROM log_entries l WHERE l.time",
        )
        .replace("AND time <", "AND l.time <");
    let found = findings(&[("extract_query", &aliased)]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .1
            .starts_with("extract_query bounds log_entries.time"),
        "{found:?}"
    );
    // near misses: insert_time (the seed's example); a view over log_stats
    // bounding its time_bin (tested above); insert_time and time together
    let both = on_time.replace(
        "WHERE time >= '{begin}' AND time < '{end}'",
        "WHERE insert_time >= '{begin}' AND insert_time < '{end}' AND time >= '{begin}'",
    );
    assert_eq!(findings(&[("extract_query", &both)]), []);
}

#[test]
fn range_filter_column_is_silent_on_views_defined_here_and_joined_dimensions() {
    // A view defined here whose time column happens to be named insert_time:
    // whether a column is its time column is not known, so nothing is said.
    let mut catalog = builtin_catalog();
    let with_insert_time = statement(
        "arrivals",
        &[
            ("extract_query", "SELECT date_bin('1 minute', time) AS time_bin, date_bin('1 minute', insert_time) AS insert_time, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY 1, 2, target"),
            ("merge_partitions_query", "SELECT time_bin, insert_time, target, sum(count) AS count, audience FROM {source} GROUP BY time_bin, insert_time, target, audience"),
        ],
    );
    let v = validate(&definition(&with_insert_time), &catalog).unwrap();
    assert_eq!(v.findings, []);
    catalog.insert(CatalogEntry {
        name: "arrivals".into(),
        schema: v.schema,
        update_group: Some(4000),
        kind: SourceKind::Defined,
        load_error: None,
    });
    let over = statement(
        "over_arrivals",
        &[
            ("extract_query", "SELECT time_bin, target, sum(count) AS count, audience FROM arrivals WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY time_bin, target, audience"),
            ("update_group", "5000"),
        ],
    );
    assert_eq!(findings_of(&over, &catalog), []);
    // The fact table bounded on insert_time, a dimension joined in bounded
    // on its own time: the range is right.
    let joined = "SELECT date_bin('1 minute', l.time) AS time_bin, l.target, count(*) AS count, arrow_cast(max(l.audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries l JOIN processes p ON p.process_id = l.process_id WHERE l.insert_time >= '{begin}' AND l.insert_time < '{end}' AND p.start_time < '{end}' GROUP BY 1, 2";
    assert_eq!(findings(&[("extract_query", joined)]), []);
}

#[test]
fn non_composable_merge_is_silent_on_order_aggregates_and_filters() {
    // max(DISTINCT …) composes; an aggregate used only in HAVING does not
    // reach the output.
    for merge in [
        "SELECT time_bin, target, max(DISTINCT count) AS count, audience FROM {source} GROUP BY time_bin, target, audience",
        "SELECT time_bin, target, sum(count) AS count, audience FROM {source} GROUP BY time_bin, target, audience HAVING count(*) >= 1",
    ] {
        assert_eq!(findings(&[("merge_partitions_query", merge)]), [], "{merge}");
    }
    // inside an expression, still reported (without its column)
    let found = findings(&[
        ("extract_query", EXTRACT_MEAN),
        ("merge_partitions_query", "SELECT time_bin, target, sum(mean_level) / count(*) AS mean_level, sum(levels) AS levels, audience FROM {source} GROUP BY time_bin, target, audience"),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .1
            .starts_with("merge_partitions_query computes count(*) over partitions"),
        "{found:?}"
    );
}

/// The core's modules in layers: each imports only modules listed before
/// it (so they read top to bottom, and no import cycle can come back).
const LAYERS: &[&str] = &[
    "error",
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

/// `SELECT *` nested `depth` times over a select list of `width` literals.
fn nested_wide(width: usize, depth: usize) -> String {
    let list: Vec<String> = (0..width).map(|i| format!("1 AS c{i}")).collect();
    let mut q = format!("SELECT {}", list.join(", "));
    for _ in 0..depth {
        q = format!("SELECT * FROM ({q}) t");
    }
    q
}

fn column_work_of(query: &str, source_width: Option<usize>) -> u64 {
    let parsed = crate::planner::parse_query("extract_query", query).unwrap();
    crate::width::column_work(
        &parsed,
        &builtin_catalog(),
        crate::planner::SOURCE_TABLE,
        source_width,
    )
}

#[test]
fn column_work_counts_what_the_planner_resolves() {
    // (names + output) x (in scope + output), per SELECT.
    assert_eq!(column_work_of("SELECT 1 AS a, 2 AS b", None), 4);
    // 4, then * over 2 columns: (0 + 2) x (2 + 2).
    assert_eq!(
        column_work_of("SELECT * FROM (SELECT 1 AS a, 2 AS b) t", None),
        12
    );
    // A view set is as wide as its schema; each name counts.
    let log_entries = builtin_catalog()
        .get("log_entries")
        .unwrap()
        .schema
        .fields()
        .len() as u64;
    assert_eq!(
        column_work_of("SELECT process_id, time FROM log_entries", None),
        (2 + 2) * (log_entries + 2)
    );
    // {source} is as wide as the extract query's output.
    assert_eq!(column_work_of("SELECT * FROM {source}", Some(10)), 10 * 20);
    // A common table expression is planned once however often it is read,
    // and each read brings all its columns into scope.
    let once = column_work_of("WITH w AS (SELECT 1 AS a, 2 AS b) SELECT a FROM w", None);
    assert_eq!(once, 4 + 2 * 3);
    assert_eq!(
        column_work_of(
            "WITH w AS (SELECT 1 AS a, 2 AS b) SELECT * FROM w x, w y",
            None
        ),
        4 + 4 * 8
    );
    // ORDER BY resolves against the output; a set operation matches its
    // sides column by column; a subquery in an expression is counted.
    // (ORDER BY also matches each of its 2 items with the select list's
    // expression nodes: 2 x 2 x 4.)
    assert_eq!(
        column_work_of("SELECT 1 AS a, 2 AS b ORDER BY a, b", None),
        4 + 2 * 2 + 2 * 2 * 4
    );
    assert_eq!(
        column_work_of("SELECT 1 AS a UNION ALL SELECT 2 AS a", None),
        1 + 1 + 1
    );
    assert_eq!(column_work_of("SELECT (SELECT 1 AS x) AS a", None), 1 + 1);
    // Quadratic in the width, linear in the depth.
    assert_eq!(column_work_of(&nested_wide(1000, 0), None), 1_000_000);
    assert_eq!(column_work_of(&nested_wide(1000, 10), None), 21_000_000);
    assert_eq!(column_work_of(&nested_wide(2000, 10), None), 84_000_000);
}

#[test]
fn column_work_charges_what_else_grows_faster_than_the_text() {
    let w = |n: usize| -> String {
        let list: Vec<String> = (0..n).map(|i| format!("1 AS c{i}")).collect();
        format!("SELECT {}", list.join(", "))
    };
    // A name folds to lower case as DataFusion folds it (ASCII only): an
    // unquoted non-ASCII CTE name is found, and counted as wide as it is.
    assert_eq!(
        column_work_of("WITH É AS (SELECT 1 AS a, 2 AS b) SELECT * FROM É", None),
        column_work_of("WITH e AS (SELECT 1 AS a, 2 AS b) SELECT * FROM e", None)
    );
    assert_eq!(
        column_work_of("WITH e AS (SELECT 1 AS a, 2 AS b) SELECT * FROM e", None),
        4 + 2 * 4
    );
    // NATURAL and USING joins match columns across both sides.
    let plain = column_work_of(
        &format!("WITH w AS ({}) SELECT 1 AS one FROM w a, w b", w(100)),
        None,
    );
    let natural = column_work_of(
        &format!(
            "WITH w AS ({}) SELECT 1 AS one FROM w a NATURAL JOIN w b",
            w(100)
        ),
        None,
    );
    assert_eq!(natural - plain, 200 * 200 / 2);
    let using = column_work_of(
        &format!(
            "WITH w AS ({}) SELECT 1 AS one FROM w a JOIN w b USING (c1, c2, c3)",
            w(100)
        ),
        None,
    );
    assert_eq!(using - plain, 3 * 200);
    // unnest: cubic in the nodes of its argument (a struct of many fields).
    let fields: Vec<String> = (0..600).map(|i| format!("'f{i}', {i}")).collect();
    let unnest = format!("SELECT unnest(named_struct({})) AS u", fields.join(", "));
    assert!(column_work_of(&unnest, None) > crate::width::MAX_COLUMN_WORK);
    let unnest_table = format!("SELECT * FROM unnest(named_struct({}))", fields.join(", "));
    assert!(column_work_of(&unnest_table, None) > crate::width::MAX_COLUMN_WORK);
    // ORDER BY items are matched with every select-list node.
    let terms = |i: usize| format!("a + {i} + {}", vec!["1"; 50].join(" + "));
    let exprs: Vec<String> = (0..1000).map(|i| format!("{} AS e{i}", terms(i))).collect();
    let order: Vec<String> = (0..1000).map(terms).collect();
    let ordered = format!(
        "SELECT {} FROM (SELECT 1 AS a) t ORDER BY {}",
        exprs.join(", "),
        order.join(", ")
    );
    assert!(column_work_of(&ordered, None) > crate::width::MAX_COLUMN_WORK);
    // Aggregate and window calls: quadratic in their number per SELECT,
    // wherever they are (an ORDER BY with 4,000 sums planned for 41 s in a
    // debug build); 300 in a select list are fine.
    let sums = |n: usize| (1..=n).map(|i| format!("sum(a + {i})")).collect::<Vec<_>>();
    let ordered_sums = format!(
        "SELECT 1 AS one FROM (SELECT 1 AS a) t ORDER BY {}",
        sums(4000).join(", ")
    );
    assert!(column_work_of(&ordered_sums, None) > crate::width::MAX_COLUMN_WORK);
    let coalesced = format!(
        "SELECT coalesce({}) AS x FROM (SELECT 1 AS a) t",
        sums(3000).join(", ")
    );
    assert!(column_work_of(&coalesced, None) > crate::width::MAX_COLUMN_WORK);
    let windows: Vec<String> = (1..=1500)
        .map(|i| format!("sum(a) OVER (PARTITION BY a + {i})"))
        .collect();
    let windowed = format!(
        "SELECT coalesce({}) AS x FROM (SELECT 1 AS a) t",
        windows.join(", ")
    );
    assert!(column_work_of(&windowed, None) > crate::width::MAX_COLUMN_WORK);
    let some = format!(
        "SELECT {} FROM (SELECT 1 AS a) t",
        sums(300)
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{s} AS s{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(column_work_of(&some, None) < 2_000_000);
    // Every query is planned with a copy of the CTEs in scope.
    let ctes: Vec<String> = (0..8000)
        .map(|i| format!("w{i} AS (SELECT 1 AS x)"))
        .collect();
    let many = format!("WITH {} SELECT 1 AS one", ctes.join(", "));
    assert!(column_work_of(&many, None) >= 8000 * 7999 / 2);
    // BY NAME: each arm matched with the columns of the arms before it.
    let arms: Vec<String> = (0..20)
        .map(|a| {
            let list: Vec<String> = (0..300).map(|i| format!("1 AS a{a}_{i}")).collect();
            format!("SELECT {}", list.join(", "))
        })
        .collect();
    assert!(
        column_work_of(&arms.join(" UNION ALL BY NAME "), None) > crate::width::MAX_COLUMN_WORK
    );
    // A subquery's names are looked up in the SELECT around it too: the
    // inner (SELECT a, b) costs (2 + 2) x 2, the outer (0 + 1) x (2 + 1)
    // plus its subquery's 2 names x its 2 columns.
    assert_eq!(
        column_work_of(
            "SELECT 1 AS one FROM (SELECT 1 AS a, 2 AS b) t WHERE EXISTS (SELECT a, b)",
            None
        ),
        4 + (2 + 2) * 2 + 3 + 2 * 2
    );
}

#[test]
fn a_planning_error_in_a_query_with_a_cte_is_not_blamed_on_the_cte() {
    // DataFusion asks the catalog for a CTE's name too; the name is not a
    // missing view set, and the real error (an ambiguous column) is shown.
    let e = rejected(&[(
        "extract_query",
        "WITH w AS (SELECT 1 AS c1) SELECT c1 FROM w a, w b",
    )]);
    assert!(e.starts_with("extract_query does not plan: "), "{e}");
    assert!(!e.contains("not a known view set"), "{e}");
    // A view set that does not exist is still named.
    assert_eq!(
        rejected(&[(
            "extract_query",
            "WITH w AS (SELECT 1 AS c1) SELECT c1 FROM nope"
        )]),
        "extract_query reads \"nope\", which is not a known view set"
    );
}

#[test]
fn a_query_too_wide_to_plan_is_refused_before_planning() {
    // 3,000 columns through 3 levels: 63 million look-ups (seconds of
    // DataFusion planning with no checkpoint in between). It reads a view
    // set that does not exist (one column, as far as the estimate knows):
    // planning would say so, and is not reached.
    let list: Vec<String> = (0..3000).map(|i| format!("1 AS c{i}")).collect();
    let inner = format!("SELECT {} FROM nope", list.join(", "));
    let query = (0..3).fold(inner, |q, _| format!("SELECT * FROM ({q}) t"));
    let e = crate::isolate::run(move || check_owned(cte_overrides(&query)))
        .err()
        .expect("refused");
    assert_eq!(e.kind, ErrorKind::TooComplex, "{e}");
    assert_eq!(e.message, "extract_query is too wide to plan");
    let detail = e.detail.unwrap();
    assert!(
        detail.contains("about 63003000 look-ups here; the limit is 25000000"),
        "{detail}"
    );
    assert!(e.hint.unwrap().contains("instead of *"));
    // The merge query is bounded the same way, over the extract's width.
    let wide_merge = format!(
        "SELECT * FROM {}",
        (0..6).fold("{source}".to_string(), |q, _| format!(
            "(SELECT * FROM {q}) s"
        ))
    );
    let extract = format!(
        "SELECT date_bin('1 minute', time) AS time_bin, process_id, {} FROM log_entries",
        (0..1500)
            .map(|i| format!("1 AS c{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let e = crate::isolate::run(move || {
        check_owned(vec![
            ("extract_query", extract),
            ("merge_partitions_query", wide_merge),
            ("merge_sort_order", "time_bin".to_string()),
        ])
    })
    .err()
    .expect("refused");
    assert_eq!(
        e.message, "merge_partitions_query is too wide to plan",
        "{e}"
    );
    assert!(e
        .hint
        .unwrap()
        .contains("instead of SELECT * FROM {source}"));
}

#[test]
fn a_wide_view_under_the_column_limit_validates() {
    // 600 columns read and returned through five levels, the merge query
    // reading all of them: 4.3 million look-ups in all.
    let extract = format!(
        "SELECT date_bin('1 minute', time) AS time_bin, process_id, {} FROM log_entries",
        (0..598)
            .map(|i| format!("1 AS c{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let nested = (0..5).fold(extract, |q, _| format!("SELECT * FROM ({q}) t"));
    let validated = crate::isolate::run(move || {
        check_owned(vec![
            ("extract_query", nested),
            (
                "merge_partitions_query",
                "SELECT * FROM {source}".to_string(),
            ),
            ("merge_sort_order", "time_bin".to_string()),
        ])
    })
    .unwrap();
    assert_eq!(validated.schema.fields().len(), 600);
}

#[test]
fn a_definitions_own_limits_are_about_it_and_time_is_not() {
    // What a re-check marks a dependent failed for (by kind, not by text):
    // the definition's own limits, but not the time it was given.
    let deep = format!("SELECT {}1{} AS x", "(".repeat(600), ")".repeat(600));
    let e = crate::isolate::run(move || check_owned(cte_overrides(&deep)))
        .err()
        .expect("refused");
    assert_eq!(e.kind, ErrorKind::TooComplex, "{e}");
    assert!(e.kind.is_about_the_definition());
    for kind in [
        ErrorKind::Syntax,
        ErrorKind::InvalidOption,
        ErrorKind::InvalidDefinition,
        ErrorKind::ProgramLimit,
        ErrorKind::TooComplex,
    ] {
        assert!(kind.is_about_the_definition(), "{kind:?}");
    }
    for kind in [ErrorKind::TimeLimit, ErrorKind::Cancelled, ErrorKind::Internal] {
        assert!(!kind.is_about_the_definition(), "{kind:?}");
    }
}

#[test]
fn the_time_limit_hint_offers_a_longer_limit_only_below_the_maximum() {
    use crate::isolate::{time_limit_error, MAX_VALIDATION_TIMEOUT};
    use std::time::Duration;
    let short = time_limit_error("extract_query", Duration::from_millis(5000));
    assert_eq!(short.kind, ErrorKind::TimeLimit);
    assert_eq!(
        short.message,
        "extract_query exceeded the validation time limit of 5000 ms"
    );
    assert!(short
        .hint
        .unwrap()
        .contains("raise micromegas_views.validation_timeout"));
    // A re-check of a dependent runs at the maximum: nothing to raise.
    let longest = time_limit_error("extract_query", MAX_VALIDATION_TIMEOUT);
    assert_eq!(longest.kind, ErrorKind::TimeLimit);
    assert_eq!(
        longest.message,
        "extract_query exceeded the validation time limit of 60000 ms"
    );
    assert_eq!(longest.hint.as_deref(), Some("Simplify the query."));
    assert!(longest.detail.unwrap().contains("the longest it may take"));
}

#[test]
fn a_query_shape_counts_every_table_and_select_block() {
    // On a planning thread's stack, as a service runs it.
    let shape = |sql: &str| {
        let sql = sql.to_string();
        crate::isolate::run(move || crate::planner::parse_query("q", &sql).map(|q| crate::planner::query_shape(&q))).unwrap()
    };
    let blocks = |sql: &str| {
        let s = shape(sql);
        (s.tables, s.selects)
    };
    assert_eq!(blocks("SELECT 1"), (0, 1));
    assert_eq!(blocks("SELECT * FROM a JOIN b ON a.x = b.x CROSS JOIN (SELECT * FROM c) s"), (4, 2));
    // Set operation members (VALUES too) and subqueries in expressions; a
    // CTE counts where it is defined and again, whole, where it is read.
    assert_eq!(
        blocks("WITH t AS (SELECT * FROM a) SELECT * FROM t UNION ALL SELECT * FROM b \
                UNION ALL SELECT * FROM c WHERE x IN (SELECT y FROM d) UNION ALL VALUES (1)"),
        (5, 7)
    );
    let union = (0..300).map(|i| format!("SELECT {i} AS x")).collect::<Vec<_>>().join(" UNION ALL ");
    assert_eq!(blocks(&union), (0, 300));
    // A CTE over the one before it, twice, sixteen deep: 2^16 scans.
    let mut ctes = vec!["c0 AS (SELECT 1 AS x FROM t)".to_string()];
    for i in 1..=16 {
        ctes.push(format!("c{i} AS (SELECT a.x FROM c{} a, c{} b)", i - 1, i - 1));
    }
    let doubling = format!("WITH {} SELECT count(*) FROM c16", ctes.join(", "));
    assert!(shape(&doubling).tables > 65_536, "{:?}", shape(&doubling));
    // Every expression, in a wide CASE too.
    let case = format!("SELECT CASE {} END AS x", (0..1000).map(|i| format!("WHEN y = {i} THEN {i}")).collect::<String>());
    assert!(shape(&case).expressions > 3000, "{:?}", shape(&case));
}

/// A constant DataFusion would convert only when the view is materialized
/// (an interval given as a string, a CAST of a string) is refused at CREATE
/// when it does not convert, naming it.
#[test]
fn constants_that_would_fail_at_materialization_are_refused() {
    for interval in ["1 fortnight", "banana"] {
        let extract = EXTRACT.replace("'1 minute'", &format!("'{interval}'"));
        assert_eq!(
            rejected(&[("extract_query", &extract)]),
            format!("extract_query: '{interval}' as an argument of date_bin() is not a valid Interval(MonthDayNano)")
        );
    }
    let e = check(&[(
        "extract_query",
        &EXTRACT.replace("count(*) AS count", "count(*) + CAST('seven' AS BIGINT) AS count"),
    )])
    .unwrap_err();
    assert_eq!(e.message, "extract_query: 'seven' in a CAST is not a valid Int64");
    assert!(e.hint.unwrap_or_default().contains("materialized"));
    // A placeholder misspelt: named as not one, with the real ones.
    let e = check(&[(
        "extract_query",
        &EXTRACT.replace("insert_time >= '{begin}'", "insert_time >= '{start}'"),
    )])
    .unwrap_err();
    assert!(e.message.starts_with("extract_query: '{start}' "), "{}", e.message);
    assert!(e.detail.unwrap_or_default().contains("not a placeholder"));
    assert!(e.hint.unwrap_or_default().contains("'{begin}'"));
    // A placeholder outside quotes: said so, not a parse error at the substituted text.
    let e = check(&[(
        "extract_query",
        &EXTRACT.replace("insert_time >= '{begin}'", "insert_time >= {begin}"),
    )])
    .unwrap_err();
    assert_eq!(e.message, "extract_query uses {begin} outside quotes");
    assert!(e.hint.unwrap_or_default().contains("'{begin}'"));
    // Constants that convert are accepted, in any spelling DataFusion reads.
    for interval in ["1 hour", "30 minutes", "1 day", "15 seconds"] {
        let extract = EXTRACT.replace("'1 minute'", &format!("'{interval}'"));
        assert!(check(&[("extract_query", &extract)]).is_ok(), "{interval}");
    }
}
