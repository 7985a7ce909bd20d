//! The option table of a view set definition: which options exist, which are required,
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
    /// False: creating the view also queues a refresh of everything.
    /// Stored only when false, so rows written before it existed read the same.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub with_no_data: bool,
    /// Whether the daemon keeps the view refreshed on its own (the
    /// snapshot carries it). Stored only when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub auto_refresh: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// How an option's value is written in a statement and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// A SQL query (string literal, not empty).
    Query,
    /// A 32-bit integer literal.
    Group,
    /// A column of the extract query's output (string literal).
    Column,
    /// `'<n> <unit>'`, unit second(s), minute(s), hour(s) or day(s).
    Delta,
    /// A comma-separated list of distinct output columns.
    SortOrder,
    /// `true` or `false` (also written as a string).
    Flag,
}

impl OptionKind {
    /// The SQL type of the option as a named argument of `mm_create_view`.
    pub fn sql_type(self) -> &'static str {
        match self {
            OptionKind::Group => "integer",
            OptionKind::Flag => "boolean",
            _ => "text",
        }
    }
}

/// One option of `CREATE MATERIALIZED VIEW … WITH (…)`.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    pub name: &'static str,
    pub kind: OptionKind,
    /// Required, or what an omitted value means.
    pub default: Option<&'static str>,
    /// Stored in a column of its own (the queries and update_group);
    /// the others are keys of the `view_options` jsonb column.
    pub own_column: bool,
    /// One line for the option table (docs/definitions.md).
    pub doc: &'static str,
}

/// The option table, in canonical order. It drives parsing,
/// the row and `view_options` mapping, the rendered statement, the hint
/// that lists the options, the named-argument form of `mm_create_view`
/// (checked against the installed function by a test) and the README table
/// (checked by a test).
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "extract_query",
        kind: OptionKind::Query,
        default: None,
        own_column: true,
        doc: "Builds one partition from the source; its output is the view's schema. `{begin}`/`{end}` are the partition's insert-time bounds.",
    },
    OptionSpec {
        name: "count_src_query",
        kind: OptionKind::Query,
        default: None,
        own_column: true,
        doc: "Counts the source rows of a partition (one Int64 column named `count`); reads raw sources only.",
    },
    OptionSpec {
        name: "merge_partitions_query",
        kind: OptionKind::Query,
        default: None,
        own_column: true,
        doc: "Merges partitions read as `{source}` into one, with the extract query's schema.",
    },
    OptionSpec {
        name: "update_group",
        kind: OptionKind::Group,
        default: None,
        own_column: true,
        doc: "The daemon's materialization order: above the group of everything the view reads.",
    },
    OptionSpec {
        name: "time_column",
        kind: OptionKind::Column,
        default: Some("required unless both min_time_column and max_time_column are given"),
        own_column: false,
        doc: "The output column holding each row's event time (sets both bounds).",
    },
    OptionSpec {
        name: "min_time_column",
        kind: OptionKind::Column,
        default: Some("time_column"),
        own_column: false,
        doc: "The output column holding a row's earliest event time.",
    },
    OptionSpec {
        name: "max_time_column",
        kind: OptionKind::Column,
        default: Some("time_column"),
        own_column: false,
        doc: "The output column holding a row's latest event time.",
    },
    OptionSpec {
        name: "source_partition_delta",
        kind: OptionKind::Delta,
        default: Some("'1 day'"),
        own_column: false,
        doc: "The time span of a partition built from the source.",
    },
    OptionSpec {
        name: "merge_partition_delta",
        kind: OptionKind::Delta,
        default: Some("source_partition_delta"),
        own_column: false,
        doc: "The time span of a merged partition.",
    },
    OptionSpec {
        name: "merge_sort_order",
        kind: OptionKind::SortOrder,
        default: Some("none (unsorted)"),
        own_column: false,
        doc: "Output columns a merged partition is sorted by.",
    },
    OptionSpec {
        name: "with_no_data",
        kind: OptionKind::Flag,
        default: Some("true"),
        own_column: false,
        doc: "False: creating (or replacing) the view also queues a refresh of everything, and `mm_create_view` returns its `job_id`.",
    },
    OptionSpec {
        name: "auto_refresh",
        kind: OptionKind::Flag,
        default: Some("false"),
        own_column: false,
        doc: "Whether the daemon keeps the view refreshed by itself; stored and carried in `mm_view_set_snapshot()`.",
    },
];

pub const DEFAULT_PARTITION_DELTA: &str = "1 day";

/// The option named `name`.
pub fn option_spec(name: &str) -> Option<&'static OptionSpec> {
    OPTIONS.iter().find(|o| o.name == name)
}

fn option_names(filter: impl Fn(&OptionSpec) -> bool) -> String {
    OPTIONS
        .iter()
        .filter(|o| filter(o))
        .map(|o| o.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The parameters of the named-argument form of `mm_create_view`, as
/// `pg_get_function_arguments` shows them.
pub fn named_arguments_sql() -> String {
    let mut args = vec!["name text".to_string()];
    for o in OPTIONS {
        let sql_type = o.kind.sql_type();
        let default = match o.default {
            Some(_) => format!(" DEFAULT NULL::{sql_type}"),
            None => String::new(),
        };
        args.push(format!("{} {sql_type}{default}", o.name));
    }
    args.push("or_replace boolean DEFAULT false".to_string());
    args.join(", ")
}

/// The table of options docs/definitions.md shows.
pub fn markdown_table() -> String {
    let mut out = String::from("| option | type | default | meaning |\n|---|---|---|---|\n");
    for o in OPTIONS {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            o.name,
            o.kind.sql_type(),
            o.default.unwrap_or("**required**"),
            o.doc
        ));
    }
    out
}

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

/// The options of a statement, a row or a function call, each still
/// optional and unchecked, by position in [`OPTIONS`].
#[derive(Debug, Default, Clone)]
pub struct OptionValues {
    values: [Option<String>; OPTIONS.len()],
}

impl OptionValues {
    fn index(name: &str) -> Option<usize> {
        OPTIONS.iter().position(|o| o.name == name)
    }

    fn get(&self, name: &str) -> Option<&str> {
        Self::index(name).and_then(|i| self.values[i].as_deref())
    }

    fn take(&mut self, name: &str) -> Option<String> {
        Self::index(name).and_then(|i| self.values[i].take())
    }

    /// The values in [`OPTIONS`] order (update_group as its decimal text).
    pub fn from_positional(values: impl IntoIterator<Item = Option<String>>) -> Self {
        let mut out = OptionValues::default();
        for (slot, value) in out.values.iter_mut().zip(values) {
            *slot = value;
        }
        out
    }

    /// Collects the raw `name = literal` pairs of a statement, refusing
    /// unknown, repeated or mistyped options.
    pub fn from_raw(raw: &[RawOption]) -> Result<Self> {
        let mut values = OptionValues::default();
        for option in raw {
            let at = || {
                format!(
                    "at line {}, column {} of the statement",
                    option.line, option.column
                )
            };
            let Some(i) = Self::index(&option.name) else {
                return Err(
                    Error::option(format!("unrecognized option \"{}\"", option.name))
                        .with_detail(at())
                        .with_hint(format!("Valid options are: {}.", option_names(|_| true))),
                );
            };
            let spec = &OPTIONS[i];
            if values.values[i].is_some() {
                return Err(Error::option(format!(
                    "option \"{}\" is specified more than once",
                    spec.name
                ))
                .with_detail(at()));
            }
            let text = match (spec.kind, &option.value) {
                (OptionKind::Group, value) => parse_group(value)?.to_string(),
                (OptionKind::Flag, Literal::Boolean(b)) => b.to_string(),
                (OptionKind::Flag, Literal::String(text)) => text.clone(),
                (OptionKind::Flag, value) => {
                    return Err(Error::option(format!(
                        "option \"{}\" must be true or false, not {}",
                        spec.name,
                        value.describe()
                    )))
                }
                (_, Literal::String(text)) => text.clone(),
                (_, value) => {
                    return Err(Error::option(format!(
                        "option \"{}\" must be a string literal, not {}",
                        spec.name,
                        value.describe()
                    ))
                    .with_hint("Quote the value: '…' or $$…$$."))
                }
            };
            values.values[i] = Some(text);
        }
        Ok(values)
    }

    /// The options of a table row: the own columns, and the keys of the
    /// `view_options` jsonb object (the form this extension writes, or
    /// `time_column` and a `merge_sort_order` string as in a statement).
    pub fn from_row(
        extract_query: Option<String>,
        count_src_query: Option<String>,
        merge_partitions_query: Option<String>,
        update_group: Option<i32>,
        view_options: Option<&serde_json::Value>,
    ) -> Result<Self> {
        let mut values = OptionValues::from_positional([
            extract_query,
            count_src_query,
            merge_partitions_query,
            update_group.map(|g| g.to_string()),
        ]);
        let Some(options) = view_options else {
            return Ok(values);
        };
        let object = options
            .as_object()
            .ok_or_else(|| Error::option("view_options must be a JSON object"))?;
        for (key, value) in object {
            let Some(i) = Self::index(key).filter(|&i| !OPTIONS[i].own_column) else {
                return Err(
                    Error::option(format!("unrecognized view_options key \"{key}\"")).with_hint(
                        format!("Valid keys are: {}.", option_names(|o| !o.own_column)),
                    ),
                );
            };
            let spec = &OPTIONS[i];
            values.values[i] = match (spec.kind, value) {
                (_, serde_json::Value::Null) => None,
                (OptionKind::Flag, serde_json::Value::Bool(b)) => Some(b.to_string()),
                (_, serde_json::Value::String(s)) => Some(s.clone()),
                (OptionKind::SortOrder, serde_json::Value::Array(items)) => {
                    let columns: Option<Vec<&str>> = items.iter().map(|c| c.as_str()).collect();
                    let columns = columns.ok_or_else(|| {
                        Error::option(format!(
                            "view_options key \"{key}\" must be an array of strings"
                        ))
                    })?;
                    Some(columns.join(", "))
                }
                (OptionKind::SortOrder, _) => {
                    return Err(Error::option(format!(
                        "view_options key \"{key}\" must be an array of strings"
                    )))
                }
                _ => {
                    return Err(Error::option(format!(
                        "view_options key \"{key}\" must be a string"
                    )))
                }
            };
        }
        Ok(values)
    }

    /// Applies the required/default rules and the formats of the options.
    pub fn into_definition(mut self, name: &str) -> Result<Definition> {
        check_view_name(name)?;
        // The statement's size limit, for every path (a statement's values
        // are shorter than it; a row's columns or the named arguments are
        // checked here).
        let size: usize = self.values.iter().flatten().map(String::len).sum();
        if size > crate::ddl::MAX_STATEMENT_BYTES {
            return Err(Error::new(
                ErrorKind::ProgramLimit,
                format!(
                    "definition of \"{name}\" is too long: {size} bytes of options, the limit is {} bytes",
                    crate::ddl::MAX_STATEMENT_BYTES
                ),
            ));
        }
        // Each value in its kind's format, in canonical order.
        for (spec, value) in OPTIONS.iter().zip(self.values.iter_mut()) {
            match (spec.kind, value.take()) {
                (OptionKind::Query, None) if spec.default.is_none() => {
                    return Err(Error::option(format!(
                        "option \"{}\" is required",
                        spec.name
                    )))
                }
                (OptionKind::Group, None) => {
                    return Err(Error::option(format!("option \"{}\" is required", spec.name))
                        .with_detail("update_group places the view in the daemon's materialization order; it has no default.")
                        .with_hint("Give an integer strictly greater than the group of every view set the definition reads."))
                }
                (_, None) => {}
                (kind, Some(text)) => *value = Some(check_value(kind, spec.name, text)?),
            }
        }
        let group = self.get("update_group").expect("checked above");
        let update_group = group.parse::<i32>().map_err(|_| {
            let integer = group.strip_prefix('-').unwrap_or(group);
            if !integer.is_empty() && integer.bytes().all(|b| b.is_ascii_digit()) {
                Error::option(format!("option \"update_group\" is out of range: {group}"))
                    .with_detail("update_group is a 32-bit integer.")
            } else {
                Error::option(format!(
                    "option \"update_group\" must be an integer, not \"{group}\""
                ))
            }
        })?;
        let time_column = self.take("time_column");
        let (min, max) = (self.take("min_time_column"), self.take("max_time_column"));
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
        let source_partition_delta = self
            .take("source_partition_delta")
            .unwrap_or_else(|| DEFAULT_PARTITION_DELTA.to_string());
        let merge_partition_delta = self
            .take("merge_partition_delta")
            .unwrap_or_else(|| source_partition_delta.clone());
        let merge_sort_order = self
            .take("merge_sort_order")
            .map(|s| s.split(", ").map(str::to_string).collect());
        let with_no_data = self.take("with_no_data").is_none_or(|v| v == "true");
        let auto_refresh = self.take("auto_refresh").is_some_and(|v| v == "true");
        let mut query = |name| self.take(name).expect("required, checked above");
        Ok(Definition {
            name: name.to_string(),
            extract_query: query("extract_query"),
            count_src_query: query("count_src_query"),
            merge_partitions_query: query("merge_partitions_query"),
            update_group,
            options: ViewOptions {
                min_time_column,
                max_time_column,
                source_partition_delta,
                merge_partition_delta,
                merge_sort_order,
                with_no_data,
                auto_refresh,
            },
        })
    }
}

/// A value in its kind's canonical format (a sort order as `a, b, c`).
fn check_value(kind: OptionKind, option: &str, text: String) -> Result<String> {
    match kind {
        OptionKind::Query if text.trim().is_empty() => Err(Error::option(format!(
            "option \"{option}\" must not be empty"
        ))),
        OptionKind::Query | OptionKind::Group => Ok(text),
        OptionKind::Column => column_name(text, option),
        OptionKind::Delta => parse_delta(&text, option),
        OptionKind::SortOrder => Ok(parse_sort_order(&text)?.join(", ")),
        OptionKind::Flag => match text.trim().to_ascii_lowercase().as_str() {
            "true" => Ok("true".into()),
            "false" => Ok("false".into()),
            _ => Err(
                Error::option(format!("invalid value for option \"{option}\": \"{text}\""))
                    .with_hint("Write true or false."),
            ),
        },
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
        OptionValues::from_row(
            extract_query,
            count_src_query,
            merge_partitions_query,
            update_group,
            view_options,
        )?
        .into_definition(name)
    }

    /// How option `spec` is written in the canonical statement, if at all
    /// (time_column stands for equal bounds; an unset sort order is omitted).
    fn rendered_option(&self, spec: &OptionSpec) -> Option<String> {
        let o = &self.options;
        let same_bounds = o.min_time_column == o.max_time_column;
        match spec.name {
            "extract_query" => Some(dollar_quote(&self.extract_query)),
            "count_src_query" => Some(dollar_quote(&self.count_src_query)),
            "merge_partitions_query" => Some(dollar_quote(&self.merge_partitions_query)),
            "update_group" => Some(self.update_group.to_string()),
            "time_column" => same_bounds.then(|| quote(&o.min_time_column)),
            "min_time_column" => (!same_bounds).then(|| quote(&o.min_time_column)),
            "max_time_column" => (!same_bounds).then(|| quote(&o.max_time_column)),
            "source_partition_delta" => Some(quote(&o.source_partition_delta)),
            "merge_partition_delta" => Some(quote(&o.merge_partition_delta)),
            "merge_sort_order" => o.merge_sort_order.as_ref().map(|c| quote(&c.join(", "))),
            // Only what differs from the default, so statements written
            // before these options existed render the same.
            "with_no_data" => (!o.with_no_data).then(|| "false".to_string()),
            "auto_refresh" => o.auto_refresh.then(|| "true".to_string()),
            other => unreachable!("option {other} has no rendering"),
        }
    }

    /// The canonical `CREATE MATERIALIZED VIEW` text of this definition.
    pub fn render(&self, or_replace: bool) -> String {
        let items: Vec<(&str, String)> = OPTIONS
            .iter()
            .filter_map(|spec| Some((spec.name, self.rendered_option(spec)?)))
            .collect();
        let width = items.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        let lines: Vec<String> = items
            .iter()
            .map(|(n, v)| format!("  {n:<width$} = {v}"))
            .collect();
        format!(
            "CREATE {}MATERIALIZED VIEW {} WITH (\n{}\n);",
            if or_replace { "OR REPLACE " } else { "" },
            self.name,
            lines.join(",\n")
        )
    }

    /// The `view_options` jsonb value.
    pub fn view_options_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.options).expect("options serialize")
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
        Literal::Boolean(b) => Err(Error::option(format!(
            "option \"update_group\" must be an integer, not {b}"
        ))),
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

#[cfg(test)]
mod table_tests {
    use super::*;

    fn create(options: &str) -> Result<Definition> {
        let text = format!(
            "CREATE MATERIALIZED VIEW v WITH (extract_query = 'SELECT 1', count_src_query = 'SELECT 1', \
             merge_partitions_query = 'SELECT 1', update_group = 1, time_column = 't'{options})"
        );
        match crate::ddl::parse(&text)? {
            crate::ddl::Statement::Create(c) => Definition::from_statement(&c),
            other => panic!("{other:?}"),
        }
    }

    /// with_no_data and auto_refresh: keywords or strings, defaults kept
    /// out of the stored forms, non-defaults rendered and read back.
    #[test]
    fn flags_parse_render_and_store() {
        let plain = create("").unwrap();
        assert!(plain.options.with_no_data && !plain.options.auto_refresh);
        assert!(!plain.render(false).contains("with_no_data"));
        assert!(!plain.render(false).contains("auto_refresh"));
        assert_eq!(plain.view_options_json().get("with_no_data"), None);
        assert_eq!(plain.view_options_json().get("auto_refresh"), None);

        let flagged = create(", with_no_data = false, auto_refresh = TRUE").unwrap();
        assert!(!flagged.options.with_no_data && flagged.options.auto_refresh);
        let json = flagged.view_options_json();
        assert_eq!(json["with_no_data"], false);
        assert_eq!(json["auto_refresh"], true);
        let rendered = flagged.render(false);
        assert!(
            rendered.contains("with_no_data           = false"),
            "{rendered}"
        );
        assert!(
            rendered.contains("auto_refresh           = true"),
            "{rendered}"
        );
        match crate::ddl::parse(&rendered).unwrap() {
            crate::ddl::Statement::Create(c) => {
                assert_eq!(Definition::from_statement(&c).unwrap(), flagged)
            }
            other => panic!("{other:?}"),
        }
        let from_row = Definition::from_row(
            "v",
            Some("SELECT 1".into()),
            Some("SELECT 1".into()),
            Some("SELECT 1".into()),
            Some(1),
            Some(&json),
        )
        .unwrap();
        assert_eq!(from_row, flagged);

        assert!(
            !create(", with_no_data = 'False'")
                .unwrap()
                .options
                .with_no_data
        );
        let e = create(", with_no_data = 1").unwrap_err();
        assert_eq!(
            e.message,
            "option \"with_no_data\" must be true or false, not an integer"
        );
        let e = create(", auto_refresh = 'sometimes'").unwrap_err();
        assert_eq!(
            e.message,
            "invalid value for option \"auto_refresh\": \"sometimes\""
        );
        let e = create(", update_group = true").unwrap_err();
        assert!(
            e.message.contains("more than once") || e.message.contains("integer"),
            "{e}"
        );
    }

    /// The option table of docs/definitions.md is this module's, word for word.
    #[test]
    fn the_readme_table_is_the_option_table() {
        let readme = include_str!("../../docs/definitions.md");
        let begin = "<!-- options table: generated from core/src/options.rs -->\n";
        let start = readme
            .find(begin)
            .expect("docs/definitions.md has the option table")
            + begin.len();
        let end = start
            + readme[start..]
                .find("<!-- end of options table -->")
                .unwrap();
        assert_eq!(
            &readme[start..end],
            markdown_table(),
            "update docs/definitions.md from options::markdown_table()"
        );
    }

    #[test]
    fn every_option_renders_and_maps() {
        assert_eq!(OPTIONS.len(), 12);
        for spec in OPTIONS {
            assert_eq!(option_spec(spec.name).unwrap().name, spec.name);
            assert!(named_arguments_sql().contains(spec.name));
        }
    }
}
