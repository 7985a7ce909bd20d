//! What validating one definition costs in-process, without Postgres: the
//! floor under `mm_create_view`'s planning. Each call validates
//! a distinct log_stats-like definition (a literal differs), so no answer is
//! remembered between calls (the decoded built-in schemas are, as in a
//! backend; MODE=validate uses a catalog built once and decodes nothing).
//!
//!     cargo run --release -p micromegas_views_core --example plan_time
//!
//! MODE=validate  parse the statement, then plan and check (`validate`);
//! MODE=prepare   what the extension's write does: `derive`, then `prepare`
//!                against stored catalog rows (the default);
//! MODE=isolated  the same two steps each on a planning thread, as the
//!                extension runs them.
//! N=calls per round (default 1000); 3 rounds.

use micromegas_views_core::builtins::{builtin_catalog, builtin_rows};
use micromegas_views_core::checks::validate;
use micromegas_views_core::ddl::{parse, Statement};
use micromegas_views_core::options::Definition;
use micromegas_views_core::prepare::{derive, prepare, RowInput};
use micromegas_views_core::{isolate, CatalogRow};
use std::time::Instant;

const STATEMENT: &str = "CREATE MATERIALIZED VIEW v{N} WITH (
  extract_query = $q$SELECT date_bin('1 minute', time) AS time_bin, process_id, level, target, count(*) AS count,
      arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience
    FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' AND target <> 'x{N}'
    GROUP BY process_id, level, target, time_bin$q$,
  count_src_query = $q$SELECT sum(nb_objects) AS count FROM blocks
    WHERE array_has(\"streams.tags\", 'log') AND insert_time >= '{begin}' AND insert_time < '{end}'$q$,
  merge_partitions_query = $q$SELECT time_bin, process_id, level, target, sum(count) AS count, audience
    FROM {source} GROUP BY process_id, level, target, time_bin, audience$q$,
  update_group = 3000, time_column = 'time_bin', merge_sort_order = 'time_bin, process_id, level, target')";

/// The two built-ins the definition reads, as their rows store them.
fn catalog_rows() -> Vec<CatalogRow> {
    builtin_rows()
        .into_iter()
        .filter(|row| row.name == "log_entries" || row.name == "blocks")
        .collect()
}

fn main() {
    let catalog = builtin_catalog();
    let rows = catalog_rows();
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mode = std::env::var("MODE").unwrap_or_else(|_| "prepare".into());
    let mut per_call = Vec::new();
    for round in 0..3 {
        let started = Instant::now();
        for i in 0..n {
            let text = STATEMENT.replace("{N}", &format!("{round}_{i}"));
            let row = RowInput {
                definition_sql: Some(text.clone()),
                ..Default::default()
            };
            match mode.as_str() {
                "validate" => {
                    let Statement::Create(create) = parse(&text).expect("parses") else {
                        panic!("not a CREATE")
                    };
                    let definition = Definition::from_statement(&create).expect("a definition");
                    validate(&definition, &catalog).expect("validates");
                }
                "prepare" => {
                    let derived = derive(row).expect("derives");
                    prepare(&derived, &rows, false).expect("validates");
                }
                "isolated" => {
                    let derived = isolate::run(move || derive(row)).expect("derives");
                    let rows = rows.clone();
                    isolate::run(move || prepare(&derived, &rows, false)).expect("validates");
                }
                other => panic!("MODE must be validate, prepare or isolated, not {other}"),
            }
        }
        per_call.push(started.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    per_call.sort_by(f64::total_cmp);
    println!(
        "{mode}: {:.0} us per definition (median of 3 rounds of {n}; {:.0} - {:.0})",
        per_call[1], per_call[0], per_call[2]
    );
}
