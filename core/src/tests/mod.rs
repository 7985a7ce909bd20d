//! The core's tests, by subject; the helpers every subject uses are here.

mod checks;
mod limits;
mod builtins;
mod author;
mod layers;

#[allow(unused_imports)]
use checks::*;
#[allow(unused_imports)]
use limits::*;
#[allow(unused_imports)]
use builtins::*;
#[allow(unused_imports)]
use author::*;
#[allow(unused_imports)]
use layers::*;

use crate::builtins::{builtin_catalog, LOG_STATS_SQL};
use crate::catalog::{Catalog, CatalogEntry, SourceKind};
use crate::checks::{referenced_relations, validate, Validated};
use crate::ddl::{parse, Statement};
use crate::error::{ErrorKind, Result};
use crate::options::Definition;
use crate::schema;

pub(super) fn definition(text: &str) -> Definition {
    match parse(text).unwrap() {
        Statement::Create(c) => Definition::from_statement(&c).unwrap(),
        _ => panic!("not a CREATE"),
    }
}

pub(super) const EXTRACT: &str = "SELECT date_bin('1 minute', time) AS time_bin, target, count(*) AS count, arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY time_bin, target, audience";
pub(super) const COUNT: &str = "SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'";
pub(super) const MERGE: &str = "SELECT time_bin, target, sum(count) AS count, audience FROM {source} GROUP BY time_bin, target, audience";

/// A statement defining the example view (a micromegas-style log count), with
/// any option replaced.
pub(super) fn statement(name: &str, overrides: &[(&str, &str)]) -> String {
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

pub(super) fn check(overrides: &[(&str, &str)]) -> Result<Validated> {
    validate(&definition(&statement("v", overrides)), &builtin_catalog())
}

pub(super) fn rejected(overrides: &[(&str, &str)]) -> String {
    let e = check(overrides).expect_err("should be rejected");
    assert_eq!(e.kind, ErrorKind::InvalidDefinition, "{e}");
    e.message
}
