//! Where validation time goes, step by step, for the shipped log_stats:
//!   cargo run --release -p micromegas_views_core --example validate_timing
use micromegas_views_core::builtins::{builtin_catalog, LOG_STATS_SQL};
use micromegas_views_core::{checks, ddl, planner, schema, Definition, Statement};
use std::time::Instant;

fn main() {
    let Statement::Create(create) = ddl::parse(LOG_STATS_SQL).unwrap() else {
        unreachable!()
    };
    let definition = Definition::from_statement(&create).unwrap();
    let catalog = builtin_catalog();
    let rounds = 500;
    let time = |label: &str, f: &mut dyn FnMut()| {
        f();
        let start = Instant::now();
        for _ in 0..rounds {
            f();
        }
        println!(
            "{label:<40} {:>8.3} ms",
            start.elapsed().as_secs_f64() * 1000.0 / rounds as f64
        );
    };
    time("parse the three queries", &mut || {
        for q in [
            &definition.extract_query,
            &definition.count_src_query,
            &definition.merge_partitions_query,
        ] {
            planner::parse_query("q", q).unwrap();
        }
    });
    time("plan extract (SqlToRel + analyzer)", &mut || {
        let q = planner::parse_query("extract_query", &definition.extract_query).unwrap();
        planner::plan("extract_query", q, &catalog, None).unwrap();
    });
    time("plan count", &mut || {
        let q = planner::parse_query("count_src_query", &definition.count_src_query).unwrap();
        planner::plan("count_src_query", q, &catalog, None).unwrap();
    });
    time("validate (everything)", &mut || {
        checks::validate(&definition, &catalog).unwrap();
    });
    let validated = checks::validate(&definition, &catalog).unwrap();
    time("schema to IPC + JSON + hash", &mut || {
        schema::to_ipc_base64(&validated.schema).unwrap();
        schema::to_json(&validated.schema);
        schema::schema_hash(&validated.schema);
    });
    let catalog_json = serde_json::json!([
        {"name": "blocks", "schema_ipc": schema::to_ipc_base64(&catalog.get("blocks").unwrap().schema).unwrap(), "update_group": 1000, "kind": "raw"},
        {"name": "log_entries", "schema_ipc": schema::to_ipc_base64(&catalog.get("log_entries").unwrap().schema).unwrap(), "update_group": 2000, "kind": "materialized"}
    ]);
    time("catalog from JSON (2 IPC schemas)", &mut || {
        micromegas_views_core::Catalog::from_json(&catalog_json).unwrap();
    });
}
