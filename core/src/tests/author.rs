//! The author checks (core/src/author.rs): true positives and near misses.

use super::*;


pub(super) fn findings_of(text: &str, catalog: &Catalog) -> Vec<(&'static str, String)> {
    validate(&definition(text), catalog)
        .unwrap()
        .findings
        .into_iter()
        .map(|f| (f.check, f.message))
        .collect()
}

pub(super) fn findings(overrides: &[(&str, &str)]) -> Vec<(&'static str, String)> {
    findings_of(&statement("v", overrides), &builtin_catalog())
}

#[test]
fn shipped_log_stats_and_the_example_view_meet_every_obligation() {
    assert_eq!(findings_of(LOG_STATS_SQL, &builtin_catalog()), []);
    assert_eq!(findings(&[]), []);
    assert_eq!(
        findings_of(&over_log_stats("4000"), &catalog_with_log_stats()),
        []
    );
}

pub(super) const MERGE_COUNT: &str = "SELECT time_bin, target, count(*) AS count, audience FROM {source} GROUP BY time_bin, target, audience";

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

pub(super) const EXTRACT_MEAN: &str = "SELECT date_bin('1 minute', time) AS time_bin, target, avg(level) AS mean_level, count(DISTINCT level) AS levels, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY time_bin, target";

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

pub(super) const EXTRACT_UNFILTERED: &str = "SELECT date_bin('1 minute', time) AS time_bin, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries GROUP BY time_bin, target";

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
    // near misses: insert_time (the example view); a view over log_stats
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
