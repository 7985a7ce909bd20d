//! The option table of seed 000: which options exist, which are required,
//! their defaults and formats, and the canonical rendering of a definition.

use crate::ddl::{CreateStatement, Literal, RawOption};
use crate::error::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};

/// View set names owned by the services' code; a DDL view may not take them.
pub const CODE_DEFINED_VIEW_SETS: &[&str] = &[
    "blocks",
    "processes",
    "streams",
    "log_entries",
    "measures",
    "thread_spans",
    "async_events",
    "net_spans",
    "images",
    "otel_spans",
];

/// The longest name Postgres itself accepts for an identifier (NAMEDATALEN - 1).
pub const MAX_NAME_LENGTH: usize = 63;

/// A complete, option-checked view set definition (not yet planned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    pub name: String,
    pub extract_query: String,
    pub count_src_query: String,
    pub merge_partitions_query: String,
    pub update_group: i32,
    pub options: ViewOptions,
}

/// What is stored in the `view_options` jsonb column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewOptions {
    pub min_time_column: String,
    pub max_time_column: String,
    pub source_partition_delta: String,
    pub merge_partition_delta: String,
    pub merge_sort_order: Option<Vec<String>>,
}

/// The options a CREATE statement accepts, in canonical order.
pub const OPTION_NAMES: &[&str] = &[
    "extract_query",
    "count_src_query",
    "merge_partitions_query",
    "update_group",
    "time_column",
    "min_time_column",
    "max_time_column",
    "source_partition_delta",
    "merge_partition_delta",
    "merge_sort_order",
];

pub const DEFAULT_PARTITION_DELTA: &str = "1 day";

/// Checks a view name: a lower-case identifier that is not reserved.
pub fn check_view_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let well_formed = matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'));
    if !well_formed {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!("invalid materialized view name \"{name}\""),
        )
        .with_detail("A view name is a lower-case SQL identifier: a letter or underscore, then letters, digits or underscores.")
        .with_hint("Write the name unquoted, or quoted in lower case."));
    }
    if name.len() > MAX_NAME_LENGTH {
        return Err(Error::new(
            ErrorKind::NameTooLong,
            format!("materialized view name \"{name}\" is too long"),
        )
        .with_detail(format!(
            "It has {} bytes; a view name has at most {MAX_NAME_LENGTH} (Postgres' limit for a name), and is never truncated.",
            name.len()
        )));
    }
    if name == "source" {
        return Err(Error::new(
            ErrorKind::ReservedName,
            "materialized view name \"source\" is reserved",
        )
        .with_detail("\"source\" names the partition set in merge queries ({source})."));
    }
    if name.starts_with("__") {
        return Err(Error::new(
            ErrorKind::ReservedName,
            format!("materialized view name \"{name}\" is reserved"),
        )
        .with_detail("Names starting with \"__\" are reserved for internal use."));
    }
    if CODE_DEFINED_VIEW_SETS.contains(&name) {
        return Err(Error::new(
            ErrorKind::ReservedName,
            format!("materialized view name \"{name}\" is reserved"),
        )
        .with_detail(format!(
            "\"{name}\" is a view set defined in the services' code."
        )));
    }
    Ok(())
}

/// The name rule every function that takes a view set name applies.
/// `Create` is a new DDL view (every rule); `Reference` names an existing
/// one (a drop: reserved names are simply not DDL views); `Builtin` is a
/// code-defined view set a service registers (the same grammar and length,
/// but the names of the services' own view sets are theirs to use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameUse {
    Create,
    Reference,
    Builtin,
}

pub fn check_name(name: &str, usage: NameUse) -> Result<()> {
    match check_view_name(name) {
        Err(e) if e.kind == ErrorKind::ReservedName && usage == NameUse::Reference => Ok(()),
        Err(e)
            if e.kind == ErrorKind::ReservedName
                && usage == NameUse::Builtin
                && CODE_DEFINED_VIEW_SETS.contains(&name) =>
        {
            Ok(())
        }
        other => other,
    }
}

/// The options of a statement or a function call, each still optional.
#[derive(Debug, Default, Clone)]
pub struct OptionValues {
    pub extract_query: Option<String>,
    pub count_src_query: Option<String>,
    pub merge_partitions_query: Option<String>,
    pub update_group: Option<i32>,
    pub time_column: Option<String>,
    pub min_time_column: Option<String>,
    pub max_time_column: Option<String>,
    pub source_partition_delta: Option<String>,
    pub merge_partition_delta: Option<String>,
    pub merge_sort_order: Option<String>,
}

impl OptionValues {
    /// Collects the raw `name = literal` pairs of a statement, refusing
    /// unknown, repeated or mistyped options.
    pub fn from_raw(raw: &[RawOption]) -> Result<Self> {
        let mut values = OptionValues::default();
        let mut seen: Vec<&str> = Vec::new();
        for option in raw {
            let Some(&name) = OPTION_NAMES.iter().find(|n| **n == option.name) else {
                return Err(
                    Error::option(format!("unrecognized option \"{}\"", option.name))
                        .with_detail(format!(
                            "at line {}, column {} of the statement",
                            option.line, option.column
                        ))
                        .with_hint(format!("Valid options are: {}.", OPTION_NAMES.join(", "))),
                );
            };
            if seen.contains(&name) {
                return Err(Error::option(format!(
                    "option \"{name}\" is specified more than once"
                ))
                .with_detail(format!(
                    "at line {}, column {} of the statement",
                    option.line, option.column
                )));
            }
            seen.push(name);
            if name == "update_group" {
                values.update_group = Some(parse_group(&option.value)?);
                continue;
            }
            let Literal::String(text) = &option.value else {
                return Err(Error::option(format!(
                    "option \"{name}\" must be a string literal, not {}",
                    option.value.describe()
                ))
                .with_hint("Quote the value: '…' or $$…$$."));
            };
            let slot = match name {
                "extract_query" => &mut values.extract_query,
                "count_src_query" => &mut values.count_src_query,
                "merge_partitions_query" => &mut values.merge_partitions_query,
                "time_column" => &mut values.time_column,
                "min_time_column" => &mut values.min_time_column,
                "max_time_column" => &mut values.max_time_column,
                "source_partition_delta" => &mut values.source_partition_delta,
                "merge_partition_delta" => &mut values.merge_partition_delta,
                "merge_sort_order" => &mut values.merge_sort_order,
                _ => return Err(Error::internal(format!("option {name} has no slot"))),
            };
            *slot = Some(text.clone());
        }
        Ok(values)
    }

    /// Applies the required/default rules and the formats of seed 000.
    pub fn into_definition(self, name: &str) -> Result<Definition> {
        check_view_name(name)?;
        // The statement's size limit, for every path (a statement's values
        // are shorter than it; a row's columns or the named arguments are
        // checked here).
        let size: usize = [
            &self.extract_query,
            &self.count_src_query,
            &self.merge_partitions_query,
            &self.time_column,
            &self.min_time_column,
            &self.max_time_column,
            &self.source_partition_delta,
            &self.merge_partition_delta,
            &self.merge_sort_order,
        ]
        .iter()
        .map(|v| v.as_ref().map_or(0, String::len))
        .sum();
        if size > crate::ddl::MAX_STATEMENT_BYTES {
            return Err(Error::new(
                ErrorKind::ProgramLimit,
                format!(
                    "definition of \"{name}\" is too long: {size} bytes of options, the limit is {} bytes",
                    crate::ddl::MAX_STATEMENT_BYTES
                ),
            ));
        }
        let extract_query = required_query(self.extract_query, "extract_query")?;
        let count_src_query = required_query(self.count_src_query, "count_src_query")?;
        let merge_partitions_query =
            required_query(self.merge_partitions_query, "merge_partitions_query")?;
        let update_group = self.update_group.ok_or_else(|| {
            Error::option("option \"update_group\" is required")
                .with_detail("update_group places the view in the daemon's materialization order; it has no default.")
                .with_hint("Give an integer strictly greater than the group of every view set the definition reads.")
        })?;
        let time_column = self
            .time_column
            .map(|c| column_name(c, "time_column"))
            .transpose()?;
        let min = self
            .min_time_column
            .map(|c| column_name(c, "min_time_column"))
            .transpose()?;
        let max = self
            .max_time_column
            .map(|c| column_name(c, "max_time_column"))
            .transpose()?;
        let (min_time_column, max_time_column) = match (min, max, time_column) {
            (Some(min), Some(max), _) => (min, max),
            (min, max, Some(t)) => (min.unwrap_or_else(|| t.clone()), max.unwrap_or(t)),
            (min, max, None) => {
                let missing = match (min.is_some(), max.is_some()) {
                    (true, false) => "max_time_column",
                    (false, true) => "min_time_column",
                    _ => "time_column",
                };
                return Err(Error::option(format!("option \"{missing}\" is required"))
                    .with_detail("time_column is required unless both min_time_column and max_time_column are given."));
            }
        };
        let source_partition_delta = match self.source_partition_delta {
            Some(text) => parse_delta(&text, "source_partition_delta")?,
            None => DEFAULT_PARTITION_DELTA.to_string(),
        };
        let merge_partition_delta = match self.merge_partition_delta {
            Some(text) => parse_delta(&text, "merge_partition_delta")?,
            None => source_partition_delta.clone(),
        };
        let merge_sort_order = self
            .merge_sort_order
            .map(|s| parse_sort_order(&s))
            .transpose()?;
        Ok(Definition {
            name: name.to_string(),
            extract_query,
            count_src_query,
            merge_partitions_query,
            update_group,
            options: ViewOptions {
                min_time_column,
                max_time_column,
                source_partition_delta,
                merge_partition_delta,
                merge_sort_order,
            },
        })
    }
}

impl Definition {
    /// The definition a CREATE statement describes.
    pub fn from_statement(statement: &CreateStatement) -> Result<Self> {
        OptionValues::from_raw(&statement.options)?.into_definition(&statement.name)
    }

    /// The definition a table row describes (a direct INSERT or UPDATE):
    /// `view_options` must be the jsonb object this extension writes.
    pub fn from_row(
        name: &str,
        extract_query: Option<String>,
        count_src_query: Option<String>,
        merge_partitions_query: Option<String>,
        update_group: Option<i32>,
        view_options: Option<&serde_json::Value>,
    ) -> Result<Self> {
        let mut values = OptionValues {
            extract_query,
            count_src_query,
            merge_partitions_query,
            update_group,
            ..Default::default()
        };
        if let Some(options) = view_options {
            let object = options
                .as_object()
                .ok_or_else(|| Error::option("view_options must be a JSON object"))?;
            for (key, value) in object {
                let text = || -> Result<Option<String>> {
                    match value {
                        serde_json::Value::Null => Ok(None),
                        serde_json::Value::String(s) => Ok(Some(s.clone())),
                        _ => Err(Error::option(format!(
                            "view_options key \"{key}\" must be a string"
                        ))),
                    }
                };
                match key.as_str() {
                    "time_column" => values.time_column = text()?,
                    "min_time_column" => values.min_time_column = text()?,
                    "max_time_column" => values.max_time_column = text()?,
                    "source_partition_delta" => values.source_partition_delta = text()?,
                    "merge_partition_delta" => values.merge_partition_delta = text()?,
                    "merge_sort_order" => {
                        values.merge_sort_order = match value {
                            serde_json::Value::Null => None,
                            serde_json::Value::String(s) => Some(s.clone()),
                            serde_json::Value::Array(items) => {
                                let mut columns = Vec::new();
                                for item in items {
                                    let column = item.as_str().ok_or_else(|| {
                                        Error::option("view_options key \"merge_sort_order\" must be an array of strings")
                                    })?;
                                    columns.push(column.to_string());
                                }
                                Some(columns.join(", "))
                            }
                            _ => {
                                return Err(Error::option(
                                    "view_options key \"merge_sort_order\" must be an array of strings",
                                ))
                            }
                        }
                    }
                    other => {
                        return Err(Error::option(format!("unrecognized view_options key \"{other}\""))
                            .with_hint("Valid keys are: min_time_column, max_time_column, source_partition_delta, merge_partition_delta, merge_sort_order (and time_column)."))
                    }
                }
            }
        }
        values.into_definition(name)
    }

    /// The canonical `CREATE MATERIALIZED VIEW` text of this definition.
    pub fn render(&self, or_replace: bool) -> String {
        let mut out = String::new();
        out.push_str(if or_replace {
            "CREATE OR REPLACE MATERIALIZED VIEW "
        } else {
            "CREATE MATERIALIZED VIEW "
        });
        out.push_str(&self.name);
        out.push_str(" WITH (\n");
        let o = &self.options;
        let mut items: Vec<(&str, String)> = vec![
            ("extract_query", dollar_quote(&self.extract_query)),
            ("count_src_query", dollar_quote(&self.count_src_query)),
            (
                "merge_partitions_query",
                dollar_quote(&self.merge_partitions_query),
            ),
            ("update_group", self.update_group.to_string()),
        ];
        if o.min_time_column == o.max_time_column {
            items.push(("time_column", quote(&o.min_time_column)));
        } else {
            items.push(("min_time_column", quote(&o.min_time_column)));
            items.push(("max_time_column", quote(&o.max_time_column)));
        }
        items.push(("source_partition_delta", quote(&o.source_partition_delta)));
        items.push(("merge_partition_delta", quote(&o.merge_partition_delta)));
        if let Some(order) = &o.merge_sort_order {
            items.push(("merge_sort_order", quote(&order.join(", "))));
        }
        let width = items.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        let lines: Vec<String> = items
            .iter()
            .map(|(n, v)| format!("  {n:<width$} = {v}"))
            .collect();
        out.push_str(&lines.join(",\n"));
        out.push_str("\n);");
        out
    }

    /// The `view_options` jsonb value.
    pub fn view_options_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.options).expect("options serialize")
    }
}

fn required_query(value: Option<String>, name: &str) -> Result<String> {
    match value {
        None => Err(Error::option(format!("option \"{name}\" is required"))),
        Some(q) if q.trim().is_empty() => Err(Error::option(format!(
            "option \"{name}\" must not be empty"
        ))),
        Some(q) => Ok(q),
    }
}

fn parse_group(value: &Literal) -> Result<i32> {
    match value {
        Literal::Integer(text) => text.parse::<i32>().map_err(|_| {
            Error::option(format!("option \"update_group\" is out of range: {text}"))
                .with_detail("update_group is a 32-bit integer.")
        }),
        Literal::String(s) => Err(Error::option(format!(
            "option \"update_group\" must be an integer, not a string ('{s}')"
        ))
        .with_hint("Write the number without quotes, e.g. update_group = 4000.")),
    }
}

fn column_name(value: String, option: &str) -> Result<String> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(Error::option(format!(
            "option \"{option}\" must name a column"
        )));
    }
    Ok(trimmed.to_string())
}

/// `'<n> <unit>'` with n ≥ 1 and unit second(s), minute(s), hour(s) or
/// day(s); returned in canonical form (`1 day`, `6 hours`).
pub fn parse_delta(text: &str, option: &str) -> Result<String> {
    let bad = || {
        Error::option(format!("invalid value for option \"{option}\": \"{text}\""))
            .with_detail("A partition delta is '<n> <unit>' with n ≥ 1 and unit second(s), minute(s), hour(s) or day(s).")
            .with_hint("For example '1 day' or '6 hours'.")
    };
    let mut parts = text.split_whitespace();
    let (Some(count), Some(unit), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    if !count.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u32 = count.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    let unit = match unit.to_lowercase().as_str() {
        "second" | "seconds" => "second",
        "minute" | "minutes" => "minute",
        "hour" | "hours" => "hour",
        "day" | "days" => "day",
        _ => return Err(bad()),
    };
    Ok(if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    })
}

/// The length of a canonical delta in seconds.
pub fn delta_seconds(delta: &str) -> Option<u64> {
    let mut parts = delta.split(' ');
    let n: u64 = parts.next()?.parse().ok()?;
    let unit = match parts.next()?.trim_end_matches('s') {
        "second" => 1,
        "minute" => 60,
        "hour" => 3600,
        "day" => 86400,
        _ => return None,
    };
    Some(n * unit)
}

fn parse_sort_order(text: &str) -> Result<Vec<String>> {
    let columns: Vec<String> = text.split(',').map(|c| c.trim().to_string()).collect();
    if columns.iter().any(|c| c.is_empty()) {
        return Err(Error::option(format!(
            "invalid value for option \"merge_sort_order\": \"{text}\""
        ))
        .with_detail("merge_sort_order is a non-empty comma-separated list of column names."));
    }
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].contains(c) {
            return Err(Error::option(format!(
                "column \"{c}\" appears more than once in option \"merge_sort_order\""
            )));
        }
    }
    Ok(columns)
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Dollar-quotes `text` with the shortest tag that does not occur in it.
fn dollar_quote(text: &str) -> String {
    let mut tag = String::new();
    let mut i = 0;
    while text.contains(&format!("${tag}$")) || text.ends_with(&format!("${tag}")) {
        i += 1;
        tag = format!("q{i}");
    }
    format!("${tag}${text}${tag}$")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddl::{parse, Statement};

    fn definition(options: &str) -> Result<Definition> {
        let text = format!("CREATE MATERIALIZED VIEW v WITH ({options})");
        match parse(&text)? {
            Statement::Create(c) => Definition::from_statement(&c),
            _ => unreachable!(),
        }
    }

    const QUERIES: &str =
        "extract_query = 'e', count_src_query = 'c', merge_partitions_query = 'm', update_group = 4000";

    #[test]
    fn defaults() {
        let d = definition(&format!("{QUERIES}, time_column = 'time_bin'")).unwrap();
        assert_eq!(d.options.min_time_column, "time_bin");
        assert_eq!(d.options.max_time_column, "time_bin");
        assert_eq!(d.options.source_partition_delta, "1 day");
        assert_eq!(d.options.merge_partition_delta, "1 day");
        assert_eq!(d.options.merge_sort_order, None);
        assert_eq!(d.update_group, 4000);
    }

    #[test]
    fn merge_delta_defaults_to_source_delta() {
        let d = definition(&format!(
            "{QUERIES}, time_column = 't', source_partition_delta = '6 HOURS'"
        ))
        .unwrap();
        assert_eq!(d.options.source_partition_delta, "6 hours");
        assert_eq!(d.options.merge_partition_delta, "6 hours");
    }

    #[test]
    fn min_and_max_replace_time_column() {
        let d = definition(&format!(
            "{QUERIES}, min_time_column = 'a', max_time_column = 'b'"
        ))
        .unwrap();
        assert_eq!(
            (
                d.options.min_time_column.as_str(),
                d.options.max_time_column.as_str()
            ),
            ("a", "b")
        );
        let d = definition(&format!(
            "{QUERIES}, time_column = 't', max_time_column = 'b'"
        ))
        .unwrap();
        assert_eq!(
            (
                d.options.min_time_column.as_str(),
                d.options.max_time_column.as_str()
            ),
            ("t", "b")
        );
        let e = definition(&format!("{QUERIES}, min_time_column = 'a'")).unwrap_err();
        assert_eq!(e.message, "option \"max_time_column\" is required");
        let e = definition(QUERIES).unwrap_err();
        assert_eq!(e.message, "option \"time_column\" is required");
    }

    #[test]
    fn required_options() {
        for missing in [
            "extract_query",
            "count_src_query",
            "merge_partitions_query",
            "update_group",
        ] {
            let options: Vec<&str> = QUERIES
                .split(", ")
                .filter(|o| !o.starts_with(missing))
                .collect();
            let e = definition(&format!("{}, time_column = 't'", options.join(", "))).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidOption);
            assert_eq!(e.message, format!("option \"{missing}\" is required"));
        }
    }

    #[test]
    fn unknown_and_repeated_options() {
        let e = definition(&format!("{QUERIES}, time_column = 't', colour = 'red'")).unwrap_err();
        assert_eq!(e.message, "unrecognized option \"colour\"");
        assert_eq!(e.kind, ErrorKind::InvalidOption);
        let e =
            definition(&format!("{QUERIES}, time_column = 't', time_column = 'u'")).unwrap_err();
        assert_eq!(
            e.message,
            "option \"time_column\" is specified more than once"
        );
    }

    #[test]
    fn option_types() {
        let e = definition("update_group = '4000'").unwrap_err();
        assert!(
            e.message
                .starts_with("option \"update_group\" must be an integer"),
            "{}",
            e.message
        );
        let e = definition("update_group = 99999999999").unwrap_err();
        assert_eq!(
            e.message,
            "option \"update_group\" is out of range: 99999999999"
        );
        let e = definition("extract_query = 5").unwrap_err();
        assert_eq!(
            e.message,
            "option \"extract_query\" must be a string literal, not an integer"
        );
        let e = definition(&format!("{QUERIES}, time_column = '  '")).unwrap_err();
        assert_eq!(e.message, "option \"time_column\" must name a column");
        let e = definition("extract_query = '  ', count_src_query = 'c', merge_partitions_query = 'm', update_group = 1, time_column = 't'").unwrap_err();
        assert_eq!(e.message, "option \"extract_query\" must not be empty");
    }

    #[test]
    fn deltas() {
        for good in [
            "1 second",
            "30 seconds",
            "1 minute",
            "5 minutes",
            "1 hour",
            "2 hours",
            "1 day",
            "7 days",
            "1 DAY",
            " 2  hours ",
        ] {
            assert!(parse_delta(good, "d").is_ok(), "{good}");
        }
        for bad in [
            "0 day",
            "-1 day",
            "1 week",
            "day",
            "1",
            "1.5 hours",
            "1 day 2",
            "",
            "+1 day",
        ] {
            let e = parse_delta(bad, "source_partition_delta").unwrap_err();
            assert_eq!(
                e.message,
                format!("invalid value for option \"source_partition_delta\": \"{bad}\"")
            );
        }
        assert_eq!(parse_delta("1 days", "d").unwrap(), "1 day");
        assert_eq!(parse_delta("2 hour", "d").unwrap(), "2 hours");
        assert_eq!(delta_seconds("2 hours"), Some(7200));
        assert_eq!(delta_seconds("1 day"), Some(86400));
    }

    #[test]
    fn sort_order() {
        let d = definition(&format!(
            "{QUERIES}, time_column = 't', merge_sort_order = 'a, b ,c'"
        ))
        .unwrap();
        assert_eq!(
            d.options.merge_sort_order,
            Some(vec!["a".into(), "b".into(), "c".into()])
        );
        let e = definition(&format!(
            "{QUERIES}, time_column = 't', merge_sort_order = ''"
        ))
        .unwrap_err();
        assert_eq!(
            e.message,
            "invalid value for option \"merge_sort_order\": \"\""
        );
        let e = definition(&format!(
            "{QUERIES}, time_column = 't', merge_sort_order = 'a,,b'"
        ))
        .unwrap_err();
        assert_eq!(
            e.message,
            "invalid value for option \"merge_sort_order\": \"a,,b\""
        );
        let e = definition(&format!(
            "{QUERIES}, time_column = 't', merge_sort_order = 'a, a'"
        ))
        .unwrap_err();
        assert_eq!(
            e.message,
            "column \"a\" appears more than once in option \"merge_sort_order\""
        );
    }

    #[test]
    fn names() {
        assert!(check_view_name("my_view_2").is_ok());
        assert!(check_view_name("_x").is_ok());
        for bad in ["MyView", "2x", "a-b", "", "é"] {
            assert_eq!(
                check_view_name(bad).unwrap_err().kind,
                ErrorKind::InvalidName,
                "{bad}"
            );
        }
        assert!(check_view_name(&"a".repeat(63)).is_ok());
        assert_eq!(
            check_view_name(&"a".repeat(64)).unwrap_err().kind,
            ErrorKind::NameTooLong
        );
        for reserved in ["source", "__x", "blocks", "log_entries", "otel_spans"] {
            let e = check_view_name(reserved).unwrap_err();
            assert_eq!(e.kind, ErrorKind::ReservedName, "{reserved}");
            assert_eq!(
                e.message,
                format!("materialized view name \"{reserved}\" is reserved")
            );
        }
        // The same rule for every use, but what is reserved depends on it.
        assert!(check_name("blocks", NameUse::Create).is_err());
        assert!(check_name("blocks", NameUse::Reference).is_ok());
        assert!(check_name("blocks", NameUse::Builtin).is_ok());
        assert!(check_name("svc_set", NameUse::Builtin).is_ok());
        assert!(check_name("__svc", NameUse::Builtin).is_err());
        for usage in [NameUse::Create, NameUse::Reference, NameUse::Builtin] {
            assert_eq!(
                check_name(&"a".repeat(64), usage).unwrap_err().kind,
                ErrorKind::NameTooLong
            );
            assert_eq!(
                check_name("Svc", usage).unwrap_err().kind,
                ErrorKind::InvalidName
            );
        }
    }

    #[test]
    fn render_round_trips() {
        let d = definition(&format!(
            "extract_query = $$SELECT '$$' AS x$$, count_src_query = 'c', merge_partitions_query = 'it''s', update_group = 7, min_time_column = 'a', max_time_column = 'b', merge_sort_order = 'a,b'"
        ));
        // $$ inside a $$-quoted literal cannot be written; use a tag instead.
        assert!(d.is_err());
        let d = definition(&format!(
            "extract_query = $t$SELECT '$$' AS x$t$, count_src_query = 'c', merge_partitions_query = 'it''s', update_group = 7, min_time_column = 'a', max_time_column = 'b', merge_sort_order = 'a,b'"
        ))
        .unwrap();
        let text = d.render(true);
        assert!(text.contains("$q1$SELECT '$$' AS x$q1$"), "{text}");
        let Statement::Create(c) = parse(&text).unwrap() else {
            unreachable!()
        };
        assert!(c.or_replace);
        assert_eq!(Definition::from_statement(&c).unwrap(), d);
    }

    #[test]
    fn from_row_matches_statement() {
        let d = definition(&format!(
            "{QUERIES}, time_column = 't', merge_sort_order = 'a, b'"
        ))
        .unwrap();
        let json = d.view_options_json();
        let r = Definition::from_row(
            "v",
            Some("e".into()),
            Some("c".into()),
            Some("m".into()),
            Some(4000),
            Some(&json),
        )
        .unwrap();
        assert_eq!(r, d);
        let bad = serde_json::json!({"colour": "red"});
        let e = Definition::from_row(
            "v",
            Some("e".into()),
            Some("c".into()),
            Some("m".into()),
            Some(4000),
            Some(&bad),
        )
        .unwrap_err();
        assert_eq!(e.message, "unrecognized view_options key \"colour\"");
    }

    #[test]
    fn the_size_limit_holds_for_columns_too() {
        let huge = format!("SELECT {}1", "1 + ".repeat(200_000));
        let e = Definition::from_row(
            "v",
            Some(huge),
            Some("x".into()),
            Some("y".into()),
            Some(1),
            None,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::ProgramLimit);
        assert!(
            e.message.starts_with("definition of \"v\" is too long: "),
            "{e}"
        );
    }
}
