//! Arrow schemas as stored: base64 Arrow IPC, JSON, a readable string, and
//! the portable schema hash.
//!
//! The schema hash is xxhash64 (seed 0) of the canonical encoding below,
//! stored as 8 bytes, big-endian. The encoding is this extension's own, so it
//! does not move when arrow changes how it prints types:
//!
//! ```text
//! micromegas-schema-v1\n
//! then per field, in order:  <name as a JSON string>:<type>\n
//! ```
//!
//! `<type>` is one of `null bool int8 int16 int32 int64 uint8 uint16 uint32
//! uint64 float16 float32 float64 utf8 large_utf8 utf8_view binary
//! large_binary binary_view date32 date64`, or `fixed_size_binary(n)`,
//! `timestamp(unit)`, `timestamp(unit,"tz")`, `time32(unit)`, `time64(unit)`,
//! `duration(unit)` (unit `s ms us ns`), `interval(year_month|day_time|month_day_nano)`,
//! `decimal32|64|128|256(p,s)`, `list(t)`, `large_list(t)`, `list_view(t)`,
//! `large_list_view(t)`, `fixed_size_list(n,t)`, `struct("a":t,"b":t)`,
//! `map("entries":struct(…),sorted|unsorted)`, `dictionary(k,v)`,
//! `run_end_encoded(r,v)`, `union(sparse|dense,id:"name":t,…)`.
//! Nullability and metadata never take part; neither do the names of list
//! item fields (producers disagree on `item` vs `element`); struct, map and
//! union field names do.

use crate::error::{Error, ErrorKind, Result};
use arrow_schema::{DataType, Field, IntervalUnit, Schema, SchemaRef, TimeUnit, UnionMode};
use base64::Engine;
use std::str::FromStr;
use std::sync::Arc;

const CANONICAL_HEADER: &str = "micromegas-schema-v1\n";

/// Limits on a schema a caller hands in (JSON or base64 IPC). Arrow's own
/// readers recurse without a limit of their own, so these are checked first.
///
/// The text of a schema, JSON or base64 IPC, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 1024 * 1024;
/// Levels of nesting a type may have (`Int64` has none, `List(List(Int64))`
/// two): the most Arrow IPC reads back, whose flatbuffers verifier stops at
/// 64 tables deep, of which the message and schema take four. A dictionary
/// is an encoding of its field, not a level.
pub const MAX_TYPE_DEPTH: usize = 60;
/// Brackets a JSON type string may nest before it is parsed: a level of a
/// type takes one or two (`Map("entries": Struct(…), unsorted)`).
pub const MAX_TYPE_TEXT_DEPTH: usize = 2 * MAX_TYPE_DEPTH;
/// Fields in a schema, nested fields included.
pub const MAX_SCHEMA_FIELDS: usize = 10_000;

/// The canonical encoding hashed by [`schema_hash`].
pub fn canonical_encoding(schema: &Schema) -> String {
    let mut out = String::from(CANONICAL_HEADER);
    for field in schema.fields() {
        out.push_str(&named(field));
        out.push('\n');
    }
    out
}

/// xxhash64 of the canonical encoding.
pub fn schema_hash(schema: &Schema) -> u64 {
    xxhash_rust::xxh64::xxh64(canonical_encoding(schema).as_bytes(), 0)
}

/// The hash as stored in `bytea` columns: 8 bytes, big-endian.
pub fn schema_hash_bytes(schema: &Schema) -> [u8; 8] {
    schema_hash(schema).to_be_bytes()
}

fn named(field: &Field) -> String {
    format!(
        "{}:{}",
        json_string(field.name()),
        canonical_type(field.data_type())
    )
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

fn unit(u: &TimeUnit) -> &'static str {
    match u {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "us",
        TimeUnit::Nanosecond => "ns",
    }
}

/// The canonical spelling of one data type.
pub fn canonical_type(t: &DataType) -> String {
    use DataType::*;
    match t {
        Null => "null".into(),
        Boolean => "bool".into(),
        Int8 => "int8".into(),
        Int16 => "int16".into(),
        Int32 => "int32".into(),
        Int64 => "int64".into(),
        UInt8 => "uint8".into(),
        UInt16 => "uint16".into(),
        UInt32 => "uint32".into(),
        UInt64 => "uint64".into(),
        Float16 => "float16".into(),
        Float32 => "float32".into(),
        Float64 => "float64".into(),
        Utf8 => "utf8".into(),
        LargeUtf8 => "large_utf8".into(),
        Utf8View => "utf8_view".into(),
        Binary => "binary".into(),
        LargeBinary => "large_binary".into(),
        BinaryView => "binary_view".into(),
        FixedSizeBinary(n) => format!("fixed_size_binary({n})"),
        Date32 => "date32".into(),
        Date64 => "date64".into(),
        Timestamp(u, None) => format!("timestamp({})", unit(u)),
        Timestamp(u, Some(tz)) => format!("timestamp({},{})", unit(u), json_string(tz)),
        Time32(u) => format!("time32({})", unit(u)),
        Time64(u) => format!("time64({})", unit(u)),
        Duration(u) => format!("duration({})", unit(u)),
        Interval(IntervalUnit::YearMonth) => "interval(year_month)".into(),
        Interval(IntervalUnit::DayTime) => "interval(day_time)".into(),
        Interval(IntervalUnit::MonthDayNano) => "interval(month_day_nano)".into(),
        Decimal32(p, s) => format!("decimal32({p},{s})"),
        Decimal64(p, s) => format!("decimal64({p},{s})"),
        Decimal128(p, s) => format!("decimal128({p},{s})"),
        Decimal256(p, s) => format!("decimal256({p},{s})"),
        List(f) => format!("list({})", canonical_type(f.data_type())),
        LargeList(f) => format!("large_list({})", canonical_type(f.data_type())),
        ListView(f) => format!("list_view({})", canonical_type(f.data_type())),
        LargeListView(f) => format!("large_list_view({})", canonical_type(f.data_type())),
        FixedSizeList(f, n) => format!("fixed_size_list({n},{})", canonical_type(f.data_type())),
        Struct(fields) => {
            let inner: Vec<String> = fields.iter().map(|f| named(f)).collect();
            format!("struct({})", inner.join(","))
        }
        Map(f, sorted) => format!(
            "map({},{})",
            named(f),
            if *sorted { "sorted" } else { "unsorted" }
        ),
        Dictionary(k, v) => format!("dictionary({},{})", canonical_type(k), canonical_type(v)),
        RunEndEncoded(r, v) => format!(
            "run_end_encoded({},{})",
            canonical_type(r.data_type()),
            canonical_type(v.data_type())
        ),
        Union(fields, mode) => {
            let inner: Vec<String> = fields
                .iter()
                .map(|(id, f)| format!("{id}:{}", named(f)))
                .collect();
            let mode = match mode {
                UnionMode::Sparse => "sparse",
                UnionMode::Dense => "dense",
            };
            format!("union({mode},{})", inner.join(","))
        }
    }
}

/// Base64 of an Arrow IPC stream holding the schema and no batch (what
/// `pyarrow.ipc.open_stream(...).schema` reads).
/// A schema past [`check_limits`] is refused here with that error, as it
/// would be when read back.
pub fn to_ipc_base64(schema: &Schema) -> Result<String> {
    check_limits(schema)?;
    let mut buffer = Vec::new();
    {
        let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut buffer, schema)
            .map_err(|e| Error::internal(format!("cannot encode schema as Arrow IPC: {e}")))?;
        writer
            .finish()
            .map_err(|e| Error::internal(format!("cannot encode schema as Arrow IPC: {e}")))?;
    }
    Ok(base64::engine::general_purpose::STANDARD.encode(buffer))
}

/// The metadata (flatbuffer) of the first message of an Arrow IPC stream:
/// an optional continuation marker, a little-endian length, then that many
/// bytes. The declared length is checked against the bytes present before
/// anything is read: arrow's StreamReader allocates (and zeroes) whatever a
/// four-byte prefix claims, up to 2 GiB, before finding it is not there.
fn ipc_schema_message(bytes: &[u8]) -> std::result::Result<&[u8], String> {
    let mut rest = bytes;
    if rest.len() >= 4 && rest[..4] == [0xff; 4] {
        rest = &rest[4..];
    }
    if rest.len() < 4 {
        return Err(format!(
            "the stream is {} bytes long, too short for a message",
            bytes.len()
        ));
    }
    let declared = i32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let available = rest.len() - 4;
    match usize::try_from(declared) {
        Ok(length) if length > 0 && length <= available => Ok(&rest[4..4 + length]),
        _ => Err(format!(
            "the message declares {declared} bytes of metadata, but {available} follow"
        )),
    }
}

pub fn from_ipc_base64(text: &str) -> Result<SchemaRef> {
    check_text_size("Arrow IPC schema", text)?;
    let bad =
        |e: String| Error::new(ErrorKind::InvalidSchema, "invalid Arrow IPC schema").with_detail(e);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| bad(format!("not base64: {e}")))?;
    let metadata = ipc_schema_message(&bytes).map_err(bad)?;
    // arrow-ipc verifies the flatbuffer, but its conversion to a Schema
    // still panics on some well-formed yet invalid messages (a schema
    // without a field list, a list without its child, an unknown unit):
    // those are the caller's malformed input, not an internal error.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let message = arrow_ipc::root_as_message(metadata)
            .map_err(|e| format!("not an Arrow IPC message: {e}"))?;
        let schema = message
            .header_as_schema()
            .ok_or_else(|| "the first message is not a schema".to_string())?;
        Ok::<_, String>(Arc::new(arrow_ipc::convert::fb_to_schema(schema)))
    }));
    let schema = match decoded {
        Ok(Ok(schema)) => schema,
        Ok(Err(e)) => return Err(bad(e)),
        Err(panic) => {
            let cause = crate::isolate::panic_message(panic.as_ref());
            return Err(bad(format!("the message is malformed: {cause}")));
        }
    };
    check_limits(&schema)?;
    Ok(schema)
}

fn check_text_size(what: &str, text: &str) -> Result<()> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(Error::too_large(format!(
            "{what} is too large: {} bytes, the limit is {MAX_SCHEMA_BYTES} bytes",
            text.len()
        )));
    }
    Ok(())
}

/// Checks a decoded schema against [`MAX_TYPE_DEPTH`] and
/// [`MAX_SCHEMA_FIELDS`]. The walk stops one level past the depth limit,
/// so it never recurses deeper than that.
pub fn check_limits(schema: &Schema) -> Result<()> {
    let mut fields = 0usize;
    for field in schema.fields() {
        walk_field(field.name(), field, 0, &mut fields)?;
    }
    Ok(())
}

/// `top` is the top-level field the walk is under, for the message.
fn walk_field(top: &str, field: &Field, depth: usize, count: &mut usize) -> Result<()> {
    *count += 1;
    if *count > MAX_SCHEMA_FIELDS {
        return Err(
            Error::too_large(format!("schema has more than {MAX_SCHEMA_FIELDS} fields"))
                .with_detail(format!(
                    "Nested fields count too; the limit is {MAX_SCHEMA_FIELDS}."
                )),
        );
    }
    if depth > MAX_TYPE_DEPTH {
        return Err(Error::too_complex(format!(
            "type of field \"{top}\" is nested more than {MAX_TYPE_DEPTH} levels deep"
        ))
        .with_detail(format!(
            "The limit is {MAX_TYPE_DEPTH} levels of nesting, the most Arrow IPC can read back."
        )));
    }
    walk_type(top, field.data_type(), depth, count)
}

fn walk_type(top: &str, t: &DataType, depth: usize, count: &mut usize) -> Result<()> {
    use DataType::*;
    match t {
        List(f)
        | LargeList(f)
        | ListView(f)
        | LargeListView(f)
        | FixedSizeList(f, _)
        | Map(f, _) => walk_field(top, f, depth + 1, count),
        Struct(fields) => fields
            .iter()
            .try_for_each(|f| walk_field(top, f, depth + 1, count)),
        Union(fields, _) => fields
            .iter()
            .try_for_each(|(_, f)| walk_field(top, f, depth + 1, count)),
        RunEndEncoded(r, v) => {
            walk_field(top, r, depth + 1, count)?;
            walk_field(top, v, depth + 1, count)
        }
        // Dictionary nesting is bounded by the bracket scan (JSON) or the
        // IPC verifier; it adds no level of its own.
        Dictionary(_, v) => walk_type(top, v, depth, count),
        _ => Ok(()),
    }
}

/// The deepest bracket nesting of a type string outside quoted text, or an
/// error past [`MAX_TYPE_TEXT_DEPTH`]: a cheap scan that keeps arrow's
/// recursive type parser away from hostile input.
fn check_type_text(name: &str, text: &str) -> Result<()> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '(' | '[' | '{' | '<' => {
                depth += 1;
                if depth > MAX_TYPE_TEXT_DEPTH {
                    return Err(Error::too_complex(format!(
                        "type of field \"{name}\" is nested too deeply"
                    ))
                    .with_detail(format!(
                        "Its text nests more than {MAX_TYPE_TEXT_DEPTH} brackets; a type may nest at most {MAX_TYPE_DEPTH} levels."
                    )));
                }
            }
            ')' | ']' | '}' | '>' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The JSON form: `{"fields": [{"name": …, "type": "<arrow type>", "nullable": …}]}`
/// where the type is spelled as arrow prints it (e.g. `Dictionary(Int32, Utf8)`).
pub fn to_json(schema: &Schema) -> serde_json::Value {
    let fields: Vec<serde_json::Value> = schema
        .fields()
        .iter()
        .map(|f| {
            serde_json::json!({
                "name": f.name(),
                "type": f.data_type().to_string(),
                "nullable": f.is_nullable(),
            })
        })
        .collect();
    serde_json::json!({ "fields": fields })
}

/// Reads the JSON form; a bare array of fields is accepted too, and
/// `nullable` defaults to true.
pub fn from_json(value: &serde_json::Value) -> Result<SchemaRef> {
    let bad = |detail: String| {
        Error::new(ErrorKind::InvalidSchema, "invalid JSON schema").with_detail(detail)
    };
    let fields = match value {
        serde_json::Value::Array(items) => items,
        serde_json::Value::Object(o) => match o.get("fields") {
            Some(serde_json::Value::Array(items)) => items,
            _ => return Err(bad("expected an object with a \"fields\" array".into())),
        },
        _ => return Err(bad("expected an object with a \"fields\" array".into())),
    };
    if fields.len() > MAX_SCHEMA_FIELDS {
        return Err(Error::too_large(format!(
            "schema has {} fields, the limit is {MAX_SCHEMA_FIELDS}",
            fields.len()
        )));
    }
    let mut out = Vec::with_capacity(fields.len());
    for (i, f) in fields.iter().enumerate() {
        let name = f
            .get("name")
            .and_then(|n| n.as_str())
            .ok_or_else(|| bad(format!("field {} has no \"name\" string", i + 1)))?;
        let type_text = f
            .get("type")
            .and_then(|n| n.as_str())
            .ok_or_else(|| bad(format!("field \"{name}\" has no \"type\" string")))?;
        check_type_text(name, type_text)?;
        let data_type = DataType::from_str(type_text).map_err(|e| {
            bad(format!(
                "field \"{name}\": cannot parse type \"{type_text}\": {e}"
            ))
        })?;
        let nullable = match f.get("nullable") {
            None | Some(serde_json::Value::Null) => true,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(_) => {
                return Err(bad(format!(
                    "field \"{name}\": \"nullable\" must be a boolean"
                )))
            }
        };
        if out.iter().any(|f: &Field| f.name() == name) {
            return Err(bad(format!("field \"{name}\" appears more than once")));
        }
        out.push(Field::new(name, data_type, nullable));
    }
    let schema = Schema::new(out);
    check_limits(&schema)?;
    Ok(Arc::new(schema))
}

/// Every schema the catalog keeps is stored in both forms, so it must read
/// back the same from each: arrow prints some types (a time zone with a
/// quote in it, say) in a form its own parser reads differently.
fn check_round_trip(schema: &Schema) -> Result<()> {
    let from_json = from_json(&to_json(schema))?;
    let from_ipc = from_ipc_base64(&to_ipc_base64(schema)?)?;
    for other in [&from_json, &from_ipc] {
        for (i, field) in schema.fields().iter().enumerate() {
            let back = other.fields().get(i);
            if back.map(|b| named(b)) != Some(named(field)) {
                return Err(Error::new(
                    ErrorKind::InvalidSchema,
                    format!(
                        "type of field \"{}\" does not read back from its stored form",
                        field.name()
                    ),
                )
                .with_detail(format!(
                    "{} reads back as {}",
                    field.data_type(),
                    back.map_or("nothing".to_string(), |b| b.data_type().to_string())
                ))
                .with_hint(
                    "Use a time zone such as \"+00:00\" or \"UTC\", and plain field names.",
                ));
            }
        }
    }
    Ok(())
}

/// Reads either form: JSON when the text starts with `{` or `[`, else base64
/// IPC, and checks that it reads back the same from both stored forms.
pub fn parse_any(text: &str) -> Result<SchemaRef> {
    let schema = parse_either(text)?;
    check_round_trip(&schema)?;
    Ok(schema)
}

fn parse_either(text: &str) -> Result<SchemaRef> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        check_text_size("JSON schema", trimmed)?;
        let value: serde_json::Value = serde_json::from_str(trimmed).map_err(|e| {
            if e.to_string().starts_with("recursion limit exceeded") {
                // serde_json stops at 128 levels of JSON nesting.
                return Error::too_complex("JSON schema is nested too deeply")
                    .with_detail("JSON may nest at most 128 levels.");
            }
            Error::new(ErrorKind::InvalidSchema, "invalid JSON schema").with_detail(e.to_string())
        })?;
        from_json(&value)
    } else {
        from_ipc_base64(trimmed)
    }
}

/// One line per field, `name: Type`, as `list_view_sets().schema` shows it.
pub fn format(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| {
            format!(
                "{}: {}{}",
                f.name(),
                f.data_type(),
                if f.is_nullable() { "" } else { " not null" }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::Fields;

    fn sample() -> Schema {
        Schema::new(vec![
            Field::new(
                "time_bin",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into())),
                true,
            ),
            Field::new(
                "target",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                true,
            ),
            Field::new("count", DataType::Int64, false),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                true,
            ),
        ])
    }

    #[test]
    fn canonical_encoding_is_documented_form() {
        assert_eq!(
            canonical_encoding(&sample()),
            "micromegas-schema-v1\n\"time_bin\":timestamp(ns,\"+00:00\")\n\"target\":dictionary(int32,utf8)\n\"count\":int64\n\"tags\":list(utf8)\n"
        );
    }

    #[test]
    fn hash_is_pinned() {
        // A change here breaks every stored partition's schema hash: never
        // update this value, add a new encoding version instead.
        assert_eq!(
            format!("{:016x}", schema_hash(&sample())),
            "902fe09f6ac56860"
        );
        assert_eq!(
            schema_hash_bytes(&sample()),
            [0x90, 0x2f, 0xe0, 0x9f, 0x6a, 0xc5, 0x68, 0x60]
        );
    }

    #[test]
    fn hash_ignores_nullability_metadata_and_list_item_names() {
        let other = Schema::new(vec![
            Field::new(
                "time_bin",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into())),
                false,
            ),
            Field::new(
                "target",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                false,
            ),
            Field::new("count", DataType::Int64, true),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("element", DataType::Utf8, false))),
                true,
            ),
        ])
        .with_metadata([("k".to_string(), "v".to_string())].into());
        assert_eq!(schema_hash(&sample()), schema_hash(&other));
    }

    #[test]
    fn hash_sees_names_types_and_order() {
        let base = schema_hash(&sample());
        let mut fields: Vec<Field> = sample()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.swap(0, 1);
        assert_ne!(base, schema_hash(&Schema::new(fields.clone())));
        fields.swap(0, 1);
        fields[2] = Field::new("count", DataType::Int32, false);
        assert_ne!(base, schema_hash(&Schema::new(fields.clone())));
        fields[2] = Field::new("total", DataType::Int64, false);
        assert_ne!(base, schema_hash(&Schema::new(fields)));
    }

    #[test]
    fn ipc_round_trip() {
        let text = to_ipc_base64(&sample()).unwrap();
        assert_eq!(from_ipc_base64(&text).unwrap().as_ref(), &sample());
        assert_eq!(parse_any(&text).unwrap().as_ref(), &sample());
        let e = from_ipc_base64("not base64!").unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidSchema);
        let e = from_ipc_base64("AAAA").unwrap_err();
        assert_eq!(e.message, "invalid Arrow IPC schema");
    }

    #[test]
    fn json_round_trip() {
        let json = to_json(&sample());
        assert_eq!(from_json(&json).unwrap().as_ref(), &sample());
        let parsed = parse_any(r#"[{"name": "t", "type": "Timestamp(Nanosecond, Some(\"+00:00\"))"}, {"name": "d", "type": "Dictionary(Int32, Binary)", "nullable": false}]"#).unwrap();
        assert_eq!(
            parsed.field(0).data_type(),
            &DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into()))
        );
        assert!(!parsed.field(1).is_nullable());
        let e = parse_any(r#"[{"name": "t", "type": "Nope"}]"#).unwrap_err();
        assert!(e
            .detail
            .unwrap()
            .starts_with("field \"t\": cannot parse type \"Nope\""));
        let e = parse_any(r#"[{"name": "t", "type": "Utf8"}, {"name": "t", "type": "Utf8"}]"#)
            .unwrap_err();
        assert_eq!(
            e.detail.as_deref(),
            Some("field \"t\" appears more than once")
        );
    }

    /// A field whose type nests `depth` levels: lists around an Int64.
    fn nested(depth: usize) -> Schema {
        let mut t = DataType::Int64;
        for _ in 0..depth {
            t = DataType::List(Arc::new(Field::new("item", t, true)));
        }
        Schema::new(vec![Field::new("a", t, true)])
    }

    #[test]
    fn the_deepest_type_allowed_round_trips_through_json_and_ipc() {
        let deepest = nested(MAX_TYPE_DEPTH);
        let json = to_json(&deepest);
        assert_eq!(from_json(&json).unwrap().as_ref(), &deepest);
        let ipc = to_ipc_base64(&deepest).unwrap();
        assert_eq!(from_ipc_base64(&ipc).unwrap().as_ref(), &deepest);
    }

    #[test]
    fn a_type_one_level_too_deep_is_refused_in_either_form() {
        let too_deep = nested(MAX_TYPE_DEPTH + 1);
        let e = from_json(&to_json(&too_deep)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooComplex);
        assert_eq!(
            e.message,
            "type of field \"a\" is nested more than 60 levels deep"
        );
        let e = to_ipc_base64(&too_deep).unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooComplex);
        assert_eq!(e.message, "type of field \"a\" is nested more than 60 levels deep");
        // Written by another writer, it is refused when read.
        let mut raw = Vec::new();
        arrow_ipc::writer::StreamWriter::try_new(&mut raw, &too_deep)
            .unwrap()
            .finish()
            .unwrap();
        let raw = base64::engine::general_purpose::STANDARD.encode(raw);
        match from_ipc_base64(&raw) {
            Err(e) => assert!(
                matches!(e.kind, ErrorKind::TooComplex | ErrorKind::InvalidSchema),
                "{e}"
            ),
            Ok(s) => panic!(
                "accepted a schema {} levels deep: {s:?}",
                MAX_TYPE_DEPTH + 1
            ),
        }
    }

    #[test]
    fn a_hostile_type_string_never_reaches_the_recursive_parser() {
        // Hundreds of thousands of levels: arrow's parser would overflow any
        // stack; the bracket scan refuses it first, on this test's own stack.
        let depth = 300_000;
        let text = format!("{}Int64{}", "List(".repeat(depth), ")".repeat(depth));
        let json = serde_json::json!([{"name": "deep", "type": text}]);
        let e = from_json(&json).unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooComplex);
        assert_eq!(e.message, "type of field \"deep\" is nested too deeply");
        assert!(e.detail.unwrap().contains("120 brackets"));
        // Brackets inside a quoted timezone or field name do not count.
        let quoted = format!(r#"Timestamp(Nanosecond, Some("{}"))"#, "(".repeat(500));
        assert!(from_json(&serde_json::json!([{"name": "t", "type": quoted}])).is_ok());
    }

    #[test]
    fn size_and_field_limits() {
        let many: Vec<serde_json::Value> = (0..=MAX_SCHEMA_FIELDS)
            .map(|i| serde_json::json!({"name": format!("f{i}"), "type": "Int64"}))
            .collect();
        let e = from_json(&serde_json::Value::Array(many)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ProgramLimit);
        assert_eq!(e.message, "schema has 10001 fields, the limit is 10000");
        // Nested fields count too.
        let wide = DataType::Struct(
            (0..MAX_SCHEMA_FIELDS)
                .map(|i| Field::new(format!("f{i}"), DataType::Int64, true))
                .collect(),
        );
        let e = check_limits(&Schema::new(vec![Field::new("s", wide, true)])).unwrap_err();
        assert_eq!(e.message, "schema has more than 10000 fields");
        let huge = "A".repeat(MAX_SCHEMA_BYTES + 1);
        let e = from_ipc_base64(&huge).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ProgramLimit);
        assert_eq!(
            e.message,
            "Arrow IPC schema is too large: 1048577 bytes, the limit is 1048576 bytes"
        );
        let e = parse_any(&format!("[{}]", " ".repeat(MAX_SCHEMA_BYTES))).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ProgramLimit);
        // JSON nested past serde_json's own limit is a complexity error too.
        let e = parse_any(&format!("{}{}", "[".repeat(1000), "]".repeat(1000))).unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooComplex, "{e}");
    }

    #[test]
    fn a_message_arrow_ipc_panics_on_is_an_invalid_schema() {
        // Found by the schema_ipc fuzz target: a verified message whose
        // schema has no field list (arrow-ipc 59 unwraps it).
        use base64::Engine;
        let bytes = include_bytes!(
            "../../fuzz/regressions/schema_ipc/crash-02199c22965833630e3619f6d0e60ad21dcb5660"
        );
        let text = base64::engine::general_purpose::STANDARD.encode(bytes);
        let e = from_ipc_base64(&text).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidSchema);
        assert_eq!(e.message, "invalid Arrow IPC schema");
        assert!(
            e.detail
                .as_deref()
                .unwrap()
                .starts_with("the message is malformed: "),
            "{e}"
        );
    }

    /// A broad set of schemas: every type the catalog uses, nested lists,
    /// structs, maps, dictionaries, time zones, decimals, unions.
    fn pinned_schemas() -> Vec<(&'static str, Schema)> {
        use DataType::*;
        let item = |t: DataType| Arc::new(Field::new("item", t, true));
        let ts = |tz: Option<&str>| Timestamp(TimeUnit::Nanosecond, tz.map(Into::into));
        let dict = |v: DataType| Dictionary(Box::new(Int32), Box::new(v));
        let one = |name: &str, t: DataType| Schema::new(vec![Field::new(name, t, true)]);
        let property = Struct(Fields::from(vec![
            Field::new("key", Utf8, false),
            Field::new("value", Utf8, false),
        ]));
        vec![
            ("empty", Schema::empty()),
            (
                "primitives",
                Schema::new(vec![
                    Field::new("b", Boolean, true),
                    Field::new("i8", Int8, true),
                    Field::new("i16", Int16, true),
                    Field::new("i32", Int32, true),
                    Field::new("i64", Int64, true),
                    Field::new("u8", UInt8, true),
                    Field::new("u16", UInt16, true),
                    Field::new("u32", UInt32, true),
                    Field::new("u64", UInt64, true),
                    Field::new("f16", Float16, true),
                    Field::new("f32", Float32, true),
                    Field::new("f64", Float64, true),
                    Field::new("null", Null, true),
                ]),
            ),
            (
                "strings and binaries",
                Schema::new(vec![
                    Field::new("s", Utf8, true),
                    Field::new("ls", LargeUtf8, true),
                    Field::new("sv", Utf8View, true),
                    Field::new("b", Binary, true),
                    Field::new("lb", LargeBinary, true),
                    Field::new("bv", BinaryView, true),
                    Field::new("fsb", FixedSizeBinary(16), true),
                ]),
            ),
            (
                "times",
                Schema::new(vec![
                    Field::new("ts", ts(None), true),
                    Field::new("ts_utc", ts(Some("+00:00")), true),
                    Field::new("ts_named", ts(Some("UTC")), true),
                    Field::new(
                        "ts_ms",
                        Timestamp(TimeUnit::Millisecond, Some("+00:00".into())),
                        true,
                    ),
                    Field::new("d32", Date32, true),
                    Field::new("d64", Date64, true),
                    Field::new("t32", Time32(TimeUnit::Second), true),
                    Field::new("t64", Time64(TimeUnit::Microsecond), true),
                    Field::new("dur", Duration(TimeUnit::Nanosecond), true),
                    Field::new("iym", Interval(IntervalUnit::YearMonth), true),
                    Field::new("idt", Interval(IntervalUnit::DayTime), true),
                    Field::new("imdn", Interval(IntervalUnit::MonthDayNano), true),
                ]),
            ),
            (
                "decimals",
                Schema::new(vec![
                    Field::new("d32", Decimal32(9, 2), true),
                    Field::new("d64", Decimal64(18, 4), true),
                    Field::new("d128", Decimal128(38, 10), true),
                    Field::new("d256", Decimal256(76, 0), true),
                ]),
            ),
            (
                "dictionaries",
                Schema::new(vec![
                    Field::new("du", dict(Utf8), true),
                    Field::new("db", dict(Binary), true),
                    Field::new("d16", Dictionary(Box::new(Int16), Box::new(Utf8)), true),
                    Field::new(
                        "du64",
                        Dictionary(Box::new(UInt64), Box::new(LargeUtf8)),
                        true,
                    ),
                ]),
            ),
            (
                "nested lists",
                one("l", List(item(List(item(List(item(Int64))))))),
            ),
            (
                "list kinds",
                Schema::new(vec![
                    Field::new("ll", LargeList(item(Utf8)), true),
                    Field::new("lv", ListView(item(Int32)), true),
                    Field::new("llv", LargeListView(item(Int32)), true),
                    Field::new("fsl", FixedSizeList(item(Float32), 3), true),
                ]),
            ),
            (
                "properties",
                Schema::new(vec![
                    Field::new(
                        "props",
                        List(Arc::new(Field::new("Property", property.clone(), false))),
                        true,
                    ),
                    Field::new(
                        "dict_props",
                        dict(List(Arc::new(Field::new(
                            "Property",
                            property.clone(),
                            false,
                        )))),
                        true,
                    ),
                ]),
            ),
            (
                "struct",
                one(
                    "s",
                    Struct(Fields::from(vec![
                        Field::new("a", Int64, true),
                        Field::new(
                            "b",
                            Struct(Fields::from(vec![Field::new("c", dict(Utf8), true)])),
                            true,
                        ),
                    ])),
                ),
            ),
            (
                "map",
                Schema::new(vec![
                    Field::new(
                        "m",
                        Map(
                            Arc::new(Field::new(
                                "entries",
                                Struct(Fields::from(vec![
                                    Field::new("key", Utf8, false),
                                    Field::new("value", Int64, true),
                                ])),
                                false,
                            )),
                            false,
                        ),
                        true,
                    ),
                    Field::new(
                        "ms",
                        Map(
                            Arc::new(Field::new(
                                "entries",
                                Struct(Fields::from(vec![
                                    Field::new("k", Utf8, false),
                                    Field::new("v", Utf8, true),
                                ])),
                                false,
                            )),
                            true,
                        ),
                        true,
                    ),
                ]),
            ),
            (
                "run end and union",
                Schema::new(vec![
                    Field::new(
                        "ree",
                        RunEndEncoded(
                            Arc::new(Field::new("run_ends", Int32, false)),
                            Arc::new(Field::new("values", Utf8, true)),
                        ),
                        true,
                    ),
                    Field::new(
                        "u",
                        Union(
                            [
                                (0i8, Arc::new(Field::new("i", Int32, true))),
                                (3i8, Arc::new(Field::new("s", Utf8, true))),
                            ]
                            .into_iter()
                            .collect(),
                            UnionMode::Dense,
                        ),
                        true,
                    ),
                    Field::new(
                        "us",
                        Union(
                            [(1i8, Arc::new(Field::new("f", Float64, true)))]
                                .into_iter()
                                .collect(),
                            UnionMode::Sparse,
                        ),
                        true,
                    ),
                ]),
            ),
            (
                "names that need escaping",
                Schema::new(vec![
                    Field::new("processes.exe", Utf8, true),
                    Field::new("quote\"d", Utf8, true),
                    Field::new("ünï cödé", Utf8, true),
                    Field::new("", Int8, true),
                ]),
            ),
        ]
    }

    #[test]
    fn hashes_of_a_broad_set_of_schemas_are_pinned() {
        // A change here changes the stored hash of every partition of a
        // schema like it: never update these values; add a new encoding
        // version instead. Nullability and list item names do not count,
        // so every schema is also hashed with them flipped.
        let pinned: &[(&str, &str)] = &[
            ("empty", "0ebb89ba3461a407"),
            ("primitives", "145cacd4648c5c25"),
            ("strings and binaries", "d5487cafc1d54302"),
            ("times", "68ac3520e0c898e7"),
            ("decimals", "28b69f9bfcb69036"),
            ("dictionaries", "35393b28c71752b1"),
            ("nested lists", "b95ab7be85aaff13"),
            ("list kinds", "e3252d31a7870647"),
            ("properties", "03b253f3638c325e"),
            ("struct", "3fdfe2dbb237016b"),
            ("map", "371642332cc99eeb"),
            ("run end and union", "7525040f594c4d1b"),
            ("names that need escaping", "883946e15a762bdc"),
        ];
        let schemas = pinned_schemas();
        assert_eq!(schemas.len(), pinned.len());
        for ((name, schema), (pinned_name, hash)) in schemas.iter().zip(pinned) {
            assert_eq!(name, pinned_name);
            assert_eq!(&format!("{:016x}", schema_hash(schema)), hash, "{name}");
            let flipped = Schema::new(
                schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(!f.is_nullable()))
                    .collect::<Vec<_>>(),
            );
            assert_eq!(
                &format!("{:016x}", schema_hash(&flipped)),
                hash,
                "{name}, nullability flipped"
            );
        }
    }

    #[test]
    fn a_declared_length_is_checked_before_anything_is_allocated() {
        // Found by the schema_ipc fuzz target: four bytes whose length
        // prefix made arrow's StreamReader allocate and zero ~1.7 GB.
        use base64::Engine;
        let bytes = include_bytes!("../../fuzz/regressions/schema_ipc/oom-declared-length");
        assert_eq!(bytes.len(), 4);
        let e =
            from_ipc_base64(&base64::engine::general_purpose::STANDARD.encode(&bytes)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidSchema);
        assert_eq!(
            e.detail.as_deref(),
            Some("the message declares 1729167362 bytes of metadata, but 0 follow")
        );
        let e = from_ipc_base64("AAA=").unwrap_err();
        assert_eq!(
            e.detail.as_deref(),
            Some("the stream is 2 bytes long, too short for a message")
        );
        // A length beyond the bytes present is refused by the same check.
        let mut claim = vec![0xff, 0xff, 0xff, 0xff];
        claim.extend_from_slice(&i32::MAX.to_le_bytes());
        claim.extend_from_slice(&[0; 16]);
        let e =
            from_ipc_base64(&base64::engine::general_purpose::STANDARD.encode(&claim)).unwrap_err();
        assert_eq!(
            e.detail.as_deref(),
            Some("the message declares 2147483647 bytes of metadata, but 16 follow")
        );
    }

    #[test]
    fn a_type_that_does_not_read_back_from_json_is_refused() {
        // Found by the schema_ipc fuzz target: a time zone with a quote in it
        // prints as a type string arrow's parser reads differently.
        let odd = Schema::new(vec![Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("\"00:00".into())),
            true,
        )]);
        let e = parse_any(&to_ipc_base64(&odd).unwrap()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidSchema);
        assert_eq!(
            e.message,
            "type of field \"time\" does not read back from its stored form"
        );
        // Ordinary time zones read back.
        for tz in ["+00:00", "UTC", "America/Montreal", "-05:30"] {
            let ok = Schema::new(vec![Field::new(
                "time",
                DataType::Timestamp(TimeUnit::Nanosecond, Some(tz.into())),
                true,
            )]);
            assert!(parse_any(&to_ipc_base64(&ok).unwrap()).is_ok(), "{tz}");
        }
    }
}
