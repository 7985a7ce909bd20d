//! The limits of a validation and of the work it starts: nesting, types,
//! plan nodes, time, abandoned work, the width and shape of what is planned.

use super::*;

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
pub(super) fn cte_chain(depth: usize) -> String {
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

pub(super) fn cte_overrides(query: &str) -> Vec<(&'static str, String)> {
    vec![
        ("extract_query", query.to_string()),
        (
            "merge_partitions_query",
            "SELECT time_bin, process_id FROM {source}".to_string(),
        ),
        ("merge_sort_order", "time_bin".to_string()),
    ]
}

pub(super) fn check_owned(overrides: Vec<(&'static str, String)>) -> Result<Validated> {
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

pub(super) fn hex_of(bytes: &[u8]) -> String {
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


/// `SELECT *` nested `depth` times over a select list of `width` literals.
pub(super) fn nested_wide(width: usize, depth: usize) -> String {
    let list: Vec<String> = (0..width).map(|i| format!("1 AS c{i}")).collect();
    let mut q = format!("SELECT {}", list.join(", "));
    for _ in 0..depth {
        q = format!("SELECT * FROM ({q}) t");
    }
    q
}

pub(super) fn column_work_of(query: &str, source_width: Option<usize>) -> u64 {
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
