//! Every CREATE-time check: one accepted and at least one rejected case each,
//! asserting the message.

use super::*;

#[test]
fn the_example_view_validates() {
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

pub(super) fn catalog_with_log_stats() -> Catalog {
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

pub(super) fn over_log_stats(group: &str) -> String {
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
    // An extract reading blocks directly may count blocks (the example view above).
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
