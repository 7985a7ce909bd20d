//! The scalar functions whose output can be many times the size of their
//! input (`repeat('x', 1e9)`, `lpad(s, 1e9)`, `range(0, 1e12)`, …), and a
//! wrapper that bounds what one call may produce.
//!
//! A query's memory pool counts what its operators hold (sorts, joins,
//! aggregations), not what an expression allocates while it computes a
//! batch: one `repeat(msg, 100000)` over a batch of log entries would
//! allocate gigabytes before any operator sees it. Wrapped, such a call
//! first estimates the bytes its output would take (an upper bound, from
//! its arguments' lengths and counts), and refuses past the limit with
//! `ResourcesExhausted`, the error a query past its memory gets. The
//! services (the daemon and the FlightSQL service) register the wrapped
//! functions in every session; a deny rule may not call them at all
//! (the deny list's `compile`), as it is evaluated on every query.
//!
//! The `||` operator is planned as such a call too ([`BoundConcatOperator`]),
//! and every aggregate's accumulators check the query's meter at each step
//! ([`checked_aggregate`]): a window aggregate whose frame grows with each
//! row makes output that grows with the square of its rows within one batch.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Int16Type, Int32Type, Int64Type, Int8Type, IntervalDayTimeType,
    IntervalMonthDayNanoType, IntervalYearMonthType, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, BooleanArray};
use arrow_schema::{DataType, FieldRef, TimeUnit};
use datafusion_common::config::ConfigOptions;
use datafusion_common::{DataFusionError, Result, ScalarValue};
use datafusion_expr::expr::{AggregateFunction, AggregateFunctionParams, WindowFunctionParams};
use datafusion_expr::function::{
    AccumulatorArgs, AggregateFunctionSimplification, ExpressionArgs, PartitionEvaluatorArgs, StateFieldsArgs,
    WindowFunctionSimplification, WindowUDFFieldArgs,
};
use datafusion_expr::window_state::WindowAggState;
use datafusion_expr::{LimitEffect, PartitionEvaluator, ReversedUDWF, WindowUDF, WindowUDFImpl};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_expr::udf_eq::UdfEq;
use datafusion_expr::utils::AggregateOrderSensitivity;
use datafusion_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Documentation, EmitTo, GroupsAccumulator,
    ReturnFieldArgs, ReversedUDAF, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, SetMonotonicity, Signature,
    StatisticsArgs,
};
use std::sync::Arc;

/// The functions whose output can be many times their input, by their
/// DataFusion names (aliases follow the function).
pub const AMPLIFYING_FUNCTIONS: &[&str] = &[
    "repeat",
    "lpad",
    "rpad",
    "replace",
    "regexp_replace",
    "array_repeat",
    "array_resize",
    "range",
    "generate_series",
    "concat",
    "concat_ws",
    "array_concat",
];

/// Whether `name` (a function's name or alias) is one of
/// [`AMPLIFYING_FUNCTIONS`].
pub fn is_amplifying(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    AMPLIFYING_FUNCTIONS.contains(&name.as_str())
        || matches!(name.as_str(), "list_repeat" | "list_resize" | "list_concat" | "array_cat" | "list_cat")
}

/// The functions whose time grows faster than their input: `levenshtein`
/// compares every character of one string with every character of the
/// other. A row of it is bounded by [`MAX_COMPARISONS`] rather than by its
/// output (the strings' lengths may be anything a query may hold), and a
/// call runs in slices of its rows with a check of its query between them
/// (no check can stop a slice once it runs).
pub const COSTLY_FUNCTIONS: &[&str] = &["levenshtein"];

/// Whether `name` is one of [`COSTLY_FUNCTIONS`].
pub fn is_costly(name: &str) -> bool {
    COSTLY_FUNCTIONS.contains(&name.to_ascii_lowercase().as_str())
}

/// The character comparisons one row of a [`COSTLY_FUNCTIONS`] call may
/// make (a tenth of a second of work in a release build).
pub const MAX_COMPARISONS: u64 = 100_000_000;

/// The comparisons a call runs between two checks of its query: a call is
/// run over slices of its rows, each of at most this many comparisons (or
/// one row), so that a stopped query ends within one slice.
const COMPARISONS_PER_SLICE: u64 = 2_000_000;

/// `udf` bounded to `limit` bytes of output per call, if it is one of the
/// amplifying functions, or to [`MAX_COMPARISONS`], if it is a costly one.
pub fn bounded(udf: &ScalarUDF, limit: usize) -> Option<ScalarUDF> {
    (is_amplifying(udf.name()) || is_costly(udf.name())).then(|| {
        ScalarUDF::new_from_impl(Bounded {
            inner: Arc::clone(udf.inner()).into(),
            limit,
        })
    })
}

/// An amplifying function that refuses a call whose output would pass
/// `limit` bytes.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: UdfEq<Arc<dyn ScalarUDFImpl>>,
    limit: usize,
}

impl Bounded {
    fn check(&self, args: &ScalarFunctionArgs) -> Result<()> {
        if self.costly() {
            // Bounded per row here; run in slices by `invoke_with_args`.
            return step_allowed(self.inner.name());
        }
        let Some(bytes) = output_bound(self.inner.name(), &args.args, args.number_rows) else {
            return Ok(());
        };
        if bytes == u64::MAX {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{}() was given a count it cannot produce (negative, or too large)",
                self.inner.name()
            )));
        }
        within_limit(&format!("{}()", self.inner.name()), bytes, args.number_rows, self.limit)
    }
}

/// Refuses a call (`what`: `repeat()`, `||`) whose output may take `bytes`
/// for `rows` rows: past `limit`, or past what the query it works for may
/// still hold (the meter's count plus these bytes).
fn within_limit(what: &str, bytes: u64, rows: usize, limit: usize) -> Result<()> {
    if bytes > limit as u64 {
        return Err(DataFusionError::ResourcesExhausted(format!(
            "{what} would produce up to {bytes} bytes for {rows} rows, more than the {limit} bytes one call may produce \
             (the query's memory limit)"
        )));
    }
    crate::meter::check_current(bytes).map_err(|m| DataFusionError::ResourcesExhausted(format!("{what}: {m}")))
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn schema_name(&self, args: &[datafusion_expr::Expr]) -> Result<String> {
        self.inner.schema_name(args)
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn is_nullable(&self, args: &[datafusion_expr::Expr], schema: &dyn datafusion_common::ExprSchema) -> bool {
        #[allow(deprecated)]
        self.inner.is_nullable(args, schema)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let updated = self.inner.with_updated_config(config)?;
        bounded(&updated, self.limit)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.check(&args)?;
        if self.costly() {
            return self.in_slices(args);
        }
        self.inner.invoke_with_args(args)
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

impl Bounded {
    fn costly(&self) -> bool {
        is_costly(self.inner.name())
    }

    /// A call of a costly function: refused when one of its rows would make
    /// more than [`MAX_COMPARISONS`] comparisons, otherwise run over slices
    /// of its rows of at most [`COMPARISONS_PER_SLICE`], the query checked
    /// before each (its time is bounded by its deadline only if a stop can
    /// reach it).
    fn in_slices(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.inner.name();
        let rows = args.number_rows;
        let lengths = args.args.iter().take(2).map(length).collect::<Option<Vec<_>>>();
        let Some(lengths) = lengths.filter(|l| l.len() == 2) else {
            return self.inner.invoke_with_args(args);
        };
        let cost = |row: usize| match (lengths[0].at(row), lengths[1].at(row)) {
            (Some(a), Some(b)) => u64::try_from(a.saturating_mul(b)).unwrap_or(u64::MAX),
            _ => 0,
        };
        let per_row: Vec<u64> = (0..rows.max(1)).map(cost).collect();
        if let Some((row, worst)) = per_row.iter().enumerate().max_by_key(|(_, c)| **c).filter(|(_, c)| **c > MAX_COMPARISONS) {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{name}() would compare {worst} pairs of characters in row {}, more than the {MAX_COMPARISONS} one row may compare",
                row + 1
            )));
        }
        if args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
            return self.inner.invoke_with_args(args);
        }
        let mut pieces: Vec<ArrayRef> = Vec::new();
        let mut start = 0;
        while start < rows {
            let mut end = start + 1;
            let mut spent = per_row[start];
            while end < rows && spent.saturating_add(per_row[end]) <= COMPARISONS_PER_SLICE {
                spent += per_row[end];
                end += 1;
            }
            step_allowed(name)?;
            let sliced = args
                .args
                .iter()
                .map(|a| match a {
                    ColumnarValue::Array(a) => ColumnarValue::Array(a.slice(start, end - start)),
                    scalar => scalar.clone(),
                })
                .collect();
            let piece = self.inner.invoke_with_args(ScalarFunctionArgs {
                args: sliced,
                arg_fields: args.arg_fields.clone(),
                number_rows: end - start,
                return_field: args.return_field.clone(),
                config_options: args.config_options.clone(),
            })?;
            pieces.push(piece.into_array(end - start)?);
            start = end;
        }
        if pieces.len() == 1 {
            return Ok(ColumnarValue::Array(pieces.remove(0)));
        }
        let refs: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
        Ok(ColumnarValue::Array(datafusion_common::arrow::compute::concat(&refs)?))
    }
}

/// One argument measured per row: a length or a number (None: null, so
/// the row's output is null).
enum Measure {
    Scalar(Option<i128>),
    Rows(Vec<Option<i128>>),
}

impl Measure {
    fn at(&self, row: usize) -> Option<i128> {
        match self {
            Measure::Scalar(v) => *v,
            Measure::Rows(v) => v.get(row).copied().flatten(),
        }
    }
    fn is_scalar(&self) -> bool {
        matches!(self, Measure::Scalar(_))
    }
}

fn rows_of(array: &ArrayRef, f: impl Fn(&ArrayRef, usize) -> Option<i128>) -> Measure {
    Measure::Rows((0..array.len()).map(|i| if array.is_null(i) { None } else { f(array, i) }).collect())
}

/// The byte length of a string or binary argument.
fn length(arg: &ColumnarValue) -> Option<Measure> {
    match arg {
        ColumnarValue::Scalar(v) => Some(Measure::Scalar(match v {
            ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s) => s.as_ref().map(|s| s.len() as i128),
            ScalarValue::Binary(b) | ScalarValue::LargeBinary(b) | ScalarValue::BinaryView(b) => b.as_ref().map(|b| b.len() as i128),
            ScalarValue::Null => None,
            _ => return None,
        })),
        ColumnarValue::Array(a) => Some(match a.data_type() {
            DataType::Utf8 => rows_of(a, |a, i| Some(a.as_string::<i32>().value(i).len() as i128)),
            DataType::LargeUtf8 => rows_of(a, |a, i| Some(a.as_string::<i64>().value(i).len() as i128)),
            DataType::Utf8View => rows_of(a, |a, i| Some(a.as_string_view().value(i).len() as i128)),
            DataType::Binary => rows_of(a, |a, i| Some(a.as_binary::<i32>().value(i).len() as i128)),
            DataType::LargeBinary => rows_of(a, |a, i| Some(a.as_binary::<i64>().value(i).len() as i128)),
            DataType::BinaryView => rows_of(a, |a, i| Some(a.as_binary_view().value(i).len() as i128)),
            _ => return None,
        }),
    }
}

/// An integer argument, a date or timestamp in nanoseconds, or an interval
/// in nanoseconds (a month as 31 days: an upper bound of its length).
fn number(arg: &ColumnarValue) -> Option<Measure> {
    const DAY: i128 = 86_400_000_000_000;
    match arg {
        ColumnarValue::Scalar(v) => Some(Measure::Scalar(match v {
            ScalarValue::Null => None,
            ScalarValue::Int8(x) => x.map(i128::from),
            ScalarValue::Int16(x) => x.map(i128::from),
            ScalarValue::Int32(x) => x.map(i128::from),
            ScalarValue::Int64(x) => x.map(i128::from),
            ScalarValue::UInt8(x) => x.map(i128::from),
            ScalarValue::UInt16(x) => x.map(i128::from),
            ScalarValue::UInt32(x) => x.map(i128::from),
            ScalarValue::UInt64(x) => x.map(i128::from),
            ScalarValue::Date32(x) => x.map(|d| i128::from(d) * DAY),
            ScalarValue::Date64(x) => x.map(|d| i128::from(d) * 1_000_000),
            ScalarValue::TimestampSecond(x, _) => x.map(|t| i128::from(t) * 1_000_000_000),
            ScalarValue::TimestampMillisecond(x, _) => x.map(|t| i128::from(t) * 1_000_000),
            ScalarValue::TimestampMicrosecond(x, _) => x.map(|t| i128::from(t) * 1_000),
            ScalarValue::TimestampNanosecond(x, _) => x.map(i128::from),
            ScalarValue::IntervalYearMonth(x) => x.map(|m| i128::from(m) * 31 * DAY),
            ScalarValue::IntervalDayTime(x) => {
                x.map(|v| i128::from(v.days) * DAY + i128::from(v.milliseconds) * 1_000_000)
            }
            ScalarValue::IntervalMonthDayNano(x) => x.map(|v| {
                i128::from(v.months) * 31 * DAY + i128::from(v.days) * DAY + i128::from(v.nanoseconds)
            }),
            _ => return None,
        })),
        ColumnarValue::Array(a) => Some(match a.data_type() {
            DataType::Int8 => rows_of(a, |a, i| Some(a.as_primitive::<Int8Type>().value(i).into())),
            DataType::Int16 => rows_of(a, |a, i| Some(a.as_primitive::<Int16Type>().value(i).into())),
            DataType::Int32 => rows_of(a, |a, i| Some(a.as_primitive::<Int32Type>().value(i).into())),
            DataType::Int64 => rows_of(a, |a, i| Some(a.as_primitive::<Int64Type>().value(i).into())),
            DataType::UInt8 => rows_of(a, |a, i| Some(a.as_primitive::<UInt8Type>().value(i).into())),
            DataType::UInt16 => rows_of(a, |a, i| Some(a.as_primitive::<UInt16Type>().value(i).into())),
            DataType::UInt32 => rows_of(a, |a, i| Some(a.as_primitive::<UInt32Type>().value(i).into())),
            DataType::UInt64 => rows_of(a, |a, i| Some(a.as_primitive::<UInt64Type>().value(i).into())),
            DataType::Date32 => rows_of(a, |a, i| Some(i128::from(a.as_primitive::<Date32Type>().value(i)) * DAY)),
            DataType::Date64 => rows_of(a, |a, i| Some(i128::from(a.as_primitive::<Date64Type>().value(i)) * 1_000_000)),
            DataType::Timestamp(TimeUnit::Second, _) => {
                rows_of(a, |a, i| Some(i128::from(a.as_primitive::<TimestampSecondType>().value(i)) * 1_000_000_000))
            }
            DataType::Timestamp(TimeUnit::Millisecond, _) => {
                rows_of(a, |a, i| Some(i128::from(a.as_primitive::<TimestampMillisecondType>().value(i)) * 1_000_000))
            }
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                rows_of(a, |a, i| Some(i128::from(a.as_primitive::<TimestampMicrosecondType>().value(i)) * 1_000))
            }
            DataType::Timestamp(TimeUnit::Nanosecond, _) => {
                rows_of(a, |a, i| Some(i128::from(a.as_primitive::<TimestampNanosecondType>().value(i))))
            }
            DataType::Interval(arrow_schema::IntervalUnit::YearMonth) => {
                rows_of(a, |a, i| Some(i128::from(a.as_primitive::<IntervalYearMonthType>().value(i)) * 31 * DAY))
            }
            DataType::Interval(arrow_schema::IntervalUnit::DayTime) => rows_of(a, |a, i| {
                let v = a.as_primitive::<IntervalDayTimeType>().value(i);
                Some(i128::from(v.days) * DAY + i128::from(v.milliseconds) * 1_000_000)
            }),
            DataType::Interval(arrow_schema::IntervalUnit::MonthDayNano) => rows_of(a, |a, i| {
                let v = a.as_primitive::<IntervalMonthDayNanoType>().value(i);
                Some(i128::from(v.months) * 31 * DAY + i128::from(v.days) * DAY + i128::from(v.nanoseconds))
            }),
            _ => return None,
        }),
    }
}

/// The bytes each row of an element argument takes: a string's or a
/// binary's own length (plus its offset and view), a fixed-width value's
/// width; for other types (lists, structs) the batch's average per row.
fn element_bytes(arg: &ColumnarValue, rows: usize) -> Measure {
    if let Some(Measure::Rows(lengths)) = length(arg) {
        return Measure::Rows(lengths.into_iter().map(|l| Some(l.unwrap_or(0) + 16)).collect());
    }
    match arg {
        ColumnarValue::Scalar(v) => Measure::Scalar(Some(v.size() as i128)),
        ColumnarValue::Array(a) => Measure::Scalar(Some(match a.data_type().primitive_width() {
            Some(width) => width as i128,
            None => (a.get_array_memory_size() / rows.max(1)).max(1) as i128,
        })),
    }
}

/// The bytes an argument holds for the whole batch (a scalar once per row).
fn batch_bytes(arg: &ColumnarValue, rows: usize) -> i128 {
    match arg {
        ColumnarValue::Scalar(v) => (v.size() as i128).saturating_mul(rows.max(1) as i128),
        ColumnarValue::Array(a) => a.get_array_memory_size() as i128,
    }
}

/// Σ over the rows of `f` of the measures (a row with a null measure
/// produces a null: nothing). Measures that are all scalars are computed
/// once and multiplied by the rows.
fn total(rows: usize, measures: &[Measure], f: impl Fn(&[i128]) -> i128) -> u64 {
    let mut values = vec![0i128; measures.len()];
    let at = |row: usize, values: &mut Vec<i128>| {
        for (slot, m) in values.iter_mut().zip(measures) {
            match m.at(row) {
                Some(v) => *slot = v,
                None => return 0,
            }
        }
        f(values).max(0)
    };
    let sum: i128 = if measures.iter().all(Measure::is_scalar) {
        at(0, &mut values).saturating_mul(rows.max(1) as i128)
    } else {
        (0..rows).fold(0i128, |acc, row| acc.saturating_add(at(row, &mut values)))
    };
    u64::try_from(sum).unwrap_or(u64::MAX)
}

/// An upper bound of the bytes `name`'s output takes for these arguments,
/// or None when the arguments are of a kind not measured here.
pub fn output_bound(name: &str, args: &[ColumnarValue], rows: usize) -> Option<u64> {
    let name = name.to_ascii_lowercase();
    let arg = |i: usize| args.get(i);
    Some(match name.as_str() {
        // The string repeated n times.
        "repeat" => total(rows, &[length(arg(0)?)?, number(arg(1)?)?], |v| v[0].saturating_mul(v[1].max(0))),
        // n characters of up to four bytes each. DataFusion 55 reserves
        // the sum of the lengths as unsigned, so a negative one (given per
        // row) reserves more than can be addressed and aborts the call:
        // it is counted as such.
        "lpad" | "rpad" => total(rows, &[number(arg(1)?)?], |v| {
            if v[0] < 0 { i128::MAX } else { v[0].saturating_mul(4) }
        }),
        // Every occurrence of `from` (every character boundary when it is
        // empty) replaced by `to`.
        "replace" => total(rows, &[length(arg(0)?)?, length(arg(1)?)?, length(arg(2)?)?], |v| {
            let occurrences = if v[1] == 0 { v[0] + 1 } else { v[0] / v[1] };
            v[0].saturating_add(occurrences.saturating_mul(v[2]))
        }),
        // Up to one match per character boundary, each replaced by the
        // replacement, whose group references (two bytes each at least)
        // copy at most the whole input each.
        "regexp_replace" => total(rows, &[length(arg(0)?)?, length(arg(2)?)?], |v| {
            v[0].saturating_add((v[0] + 1).saturating_mul(v[1]))
                .saturating_add((v[1] / 2).saturating_mul(v[0]))
        }),
        // The element n times.
        "array_repeat" | "list_repeat" => total(rows, &[element_bytes(arg(0)?, rows), number(arg(1)?)?], |v| {
            v[1].max(0).saturating_mul(v[0])
        }),
        // n elements of the list (or of the given value).
        "array_resize" | "list_resize" => {
            let element = match arg(2) {
                Some(value) => element_bytes(value, rows),
                None => Measure::Scalar(Some(16)),
            };
            total(rows, &[element, number(arg(1)?)?], |v| v[1].max(0).saturating_mul(v[0].max(16)))
        }
        // Everything its arguments hold, joined (a separator once between
        // each two).
        "concat" | "concat_ws" | "array_concat" | "list_concat" | "array_cat" | "list_cat" => {
            let joined = args.iter().fold(0i128, |acc, a| acc.saturating_add(batch_bytes(a, rows)));
            let separators = if name == "concat_ws" {
                args.first().map_or(0, |s| batch_bytes(s, rows)).saturating_mul(args.len() as i128)
            } else {
                0
            };
            u64::try_from(joined.saturating_add(separators).max(0)).unwrap_or(u64::MAX)
        }
        // One 8-byte value per step from start to stop.
        "range" | "generate_series" => {
            let steps = |v: &[i128]| -> i128 {
                let (start, stop, step) = match v.len() {
                    1 => (0, v[0], 1),
                    2 => (v[0], v[1], 1),
                    _ => (v[0], v[1], v[2]),
                };
                ((stop - start).abs() / step.abs().max(1) + 1).saturating_mul(8)
            };
            let measures = args.iter().map(number).collect::<Option<Vec<_>>>()?;
            total(rows, &measures, steps)
        }
        _ => return None,
    })
}

/// The `||` of two strings (or binaries), as a call whose output is bounded
/// like the amplifying functions': `a || a || a …` over a batch makes each
/// step's output the sum of its inputs, so a chain of them grows with the
/// statement's length where no function is called. [`BoundConcatOperator`]
/// rewrites every `||` that DataFusion would run as an operator into this
/// call; its result is the operator's (NULL when either side is).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ConcatOperator {
    signature: Signature,
    limit: usize,
}

impl ConcatOperator {
    pub fn new(limit: usize) -> ConcatOperator {
        ConcatOperator { signature: Signature::any(2, datafusion_expr::Volatility::Immutable), limit }
    }
}

fn concatenable(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    )
}

impl ScalarUDFImpl for ConcatOperator {
    fn name(&self) -> &str {
        "||"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn schema_name(&self, args: &[datafusion_expr::Expr]) -> Result<String> {
        Ok(format!("{} || {}", args[0].schema_name(), args[1].schema_name()))
    }
    fn return_type(&self, t: &[DataType]) -> Result<DataType> {
        Ok(match (&t[0], &t[1]) {
            (a, b) if a == b && concatenable(a) => a.clone(),
            _ if t.contains(&DataType::LargeUtf8) => DataType::LargeUtf8,
            _ if t.contains(&DataType::Utf8View) => DataType::Utf8View,
            _ => DataType::Utf8,
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let bytes = args.args.iter().fold(0i128, |acc, a| acc.saturating_add(batch_bytes(a, rows)));
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        within_limit("||", bytes, rows, self.limit)?;
        let scalar = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let target = args.return_field.data_type().clone();
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let cast = |a: &ArrayRef| datafusion_common::arrow::compute::cast(a, &target);
        let out = datafusion_common::arrow::compute::kernels::concat_elements::concat_elements_dyn(
            &cast(&arrays[0])?,
            &cast(&arrays[1])?,
        )?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// The optimizer rule that turns each `||` DataFusion would run as an
/// operator into a [`ConcatOperator`] call (the names the plan shows are
/// kept). `||` between arrays is already planned as `array_concat`, which
/// is bounded as an amplifying function.
#[derive(Debug)]
pub struct BoundConcatOperator {
    udf: Arc<ScalarUDF>,
}

impl BoundConcatOperator {
    pub fn new(limit: usize) -> BoundConcatOperator {
        BoundConcatOperator { udf: Arc::new(ScalarUDF::new_from_impl(ConcatOperator::new(limit))) }
    }
}

impl datafusion_optimizer::OptimizerRule for BoundConcatOperator {
    fn name(&self) -> &str {
        "bound_concat_operator"
    }

    fn apply_order(&self) -> Option<datafusion_optimizer::ApplyOrder> {
        Some(datafusion_optimizer::ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: datafusion_expr::LogicalPlan,
        _config: &dyn datafusion_optimizer::OptimizerConfig,
    ) -> Result<datafusion_common::tree_node::Transformed<datafusion_expr::LogicalPlan>> {
        use datafusion_common::tree_node::{Transformed, TreeNode};
        use datafusion_expr::{expr::ScalarFunction, BinaryExpr, Expr, Operator};
        let preserver = datafusion_expr::expr_rewriter::NamePreserver::new(&plan);
        plan.map_expressions(|e| {
            let saved = preserver.save(&e);
            let rewritten = e.transform_up(|x| match x {
                Expr::BinaryExpr(BinaryExpr { left, op: Operator::StringConcat, right }) => Ok(Transformed::yes(
                    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(&self.udf), vec![*left, *right])),
                )),
                x => Ok(Transformed::no(x)),
            })?;
            Ok(if rewritten.transformed { rewritten.update_data(|e| saved.restore(e)) } else { rewritten })
        })
    }
}

/// `udaf` with every step of its accumulators checked against the query
/// its work is for ([`crate::meter::check_current`]): refused once the query
/// holds more than its cap, or once it is stopped.
///
/// An aggregate evaluated over a window frame that grows with each row
/// (`string_agg(msg, ',') OVER (ORDER BY time)`) produces, for one batch,
/// output that grows with the square of the batch's rows, all of it made
/// within one poll of the window operator: the check after each batch comes
/// too late. Checked at each row's update and evaluation, it is refused at
/// its cap plus one row's output. The answers are the function's own.
pub fn checked_aggregate(udaf: &AggregateUDF) -> AggregateUDF {
    AggregateUDF::new_from_shared_impl(checked_impl(Arc::clone(udaf.inner())))
}

fn checked_impl(inner: Arc<dyn AggregateUDFImpl>) -> Arc<dyn AggregateUDFImpl> {
    if inner.as_ref().is::<CheckedAggregate>() {
        return inner;
    }
    let name = inner.name().into();
    Arc::new(CheckedAggregate { inner: inner.into(), name })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedAggregate {
    inner: UdfEq<Arc<dyn AggregateUDFImpl>>,
    /// The name its accumulators' refusals give (shared by them all, not
    /// copied for each group's accumulator).
    name: Arc<str>,
}

/// The refusal of an aggregate's step, naming the aggregate.
fn step_allowed(name: &str) -> Result<()> {
    crate::meter::check_current(0).map_err(|m| DataFusionError::ResourcesExhausted(format!("{name}(): {m}")))
}

impl AggregateUDFImpl for CheckedAggregate {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.schema_name(params)
    }
    fn human_display(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.human_display(params)
    }
    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.inner.window_function_schema_name(params)
    }
    fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.display_name(params)
    }
    fn window_function_display_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.inner.window_function_display_name(params)
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.inner.return_field(arg_fields)
    }
    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(CheckedAccumulator::new(&self.name, self.inner.accumulator(acc_args)?)))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(CheckedGroupsAccumulator {
            name: Arc::clone(&self.name),
            inner: self.inner.create_groups_accumulator(args)?,
        }))
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(CheckedAccumulator::new(&self.name, self.inner.create_sliding_accumulator(args)?)))
    }
    fn with_beneficial_ordering(self: Arc<Self>, beneficial_ordering: bool) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        let inner: Arc<dyn AggregateUDFImpl> = Arc::clone(&self.inner);
        Ok(inner.with_beneficial_ordering(beneficial_ordering)?.map(checked_impl))
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }
    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        self.inner.simplify()
    }
    fn simplify_expr_op_literal(
        &self,
        agg_function: &AggregateFunction,
        arg: &datafusion_expr::Expr,
        op: datafusion_expr::Operator,
        lit: &datafusion_expr::Expr,
        arg_is_left: bool,
    ) -> Result<Option<datafusion_expr::Expr>> {
        self.inner.simplify_expr_op_literal(agg_function, arg, op, lit, arg_is_left)
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        match self.inner.reverse_expr() {
            ReversedUDAF::Reversed(udaf) => ReversedUDAF::Reversed(Arc::new(checked_aggregate(&udaf))),
            other => other,
        }
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }
    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.value_from_stats(statistics_args)
    }
    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }
    fn supports_null_handling_clause(&self) -> bool {
        self.inner.supports_null_handling_clause()
    }
    fn supports_within_group_clause(&self) -> bool {
        self.inner.supports_within_group_clause()
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
}

/// An accumulator whose every step is first checked ([`step_allowed`]).
///
/// In a window operator ([`crate::meter::in_window`]) the value an
/// evaluation answers is copied to every row whose frame it is: a frame
/// covering the whole partition is updated with all of its rows and
/// evaluated once, then copied to each of them, in one step DataFusion makes
/// after the evaluation. So there the value's size times the rows the
/// accumulator took since its last evaluation (one per row for a frame that
/// grows or slides, the partition's rows for a whole one) is checked before
/// the value is handed over.
#[derive(Debug)]
struct CheckedAccumulator {
    name: Arc<str>,
    inner: Box<dyn Accumulator>,
    rows_since_evaluation: u64,
}

impl CheckedAccumulator {
    fn new(name: &Arc<str>, inner: Box<dyn Accumulator>) -> CheckedAccumulator {
        CheckedAccumulator { name: Arc::clone(name), inner, rows_since_evaluation: 0 }
    }
}

impl Accumulator for CheckedAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        step_allowed(&self.name)?;
        self.rows_since_evaluation += values.first().map_or(0, |v| v.len() as u64);
        self.inner.update_batch(values)
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        step_allowed(&self.name)?;
        let value = self.inner.evaluate()?;
        let copies = std::mem::take(&mut self.rows_since_evaluation);
        if copies > 1 && crate::meter::in_window() {
            let bytes = copy_bytes(&value)?.saturating_mul(copies);
            crate::meter::check_current(bytes).map_err(|m| {
                DataFusionError::ResourcesExhausted(format!(
                    "{}(): its value, copied to the {copies} rows of its window frame: {m}",
                    self.name
                ))
            })?;
        }
        Ok(value)
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        step_allowed(&self.name)?;
        self.inner.state()
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        step_allowed(&self.name)?;
        self.inner.merge_batch(states)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        step_allowed(&self.name)?;
        self.inner.retract_batch(values)
    }
    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

/// The bytes one copy of `value` takes in an array: its slice of an
/// array's buffers (8 for an Int64, a string's length and offset, a list's
/// elements), not the scalar's own size or the buffers it was cut from.
fn copy_bytes(value: &ScalarValue) -> Result<u64> {
    Ok(value.to_array_of_size(1)?.to_data().get_slice_memory_size()? as u64)
}

/// A groups accumulator whose every step is first checked ([`step_allowed`]).
struct CheckedGroupsAccumulator {
    name: Arc<str>,
    inner: Box<dyn GroupsAccumulator>,
}

impl GroupsAccumulator for CheckedGroupsAccumulator {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        step_allowed(&self.name)?;
        self.inner.update_batch(values, group_indices, opt_filter, total_num_groups)
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        step_allowed(&self.name)?;
        self.inner.evaluate(emit_to)
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        step_allowed(&self.name)?;
        self.inner.state(emit_to)
    }
    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        step_allowed(&self.name)?;
        self.inner.merge_batch(values, group_indices, total_num_groups)
    }
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        step_allowed(&self.name)?;
        self.inner.convert_to_state(values, opt_filter)
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
}

/// `udwf` with every evaluation of its partition evaluators checked against
/// the query its work is for, as [`checked_aggregate`] does for aggregates:
/// `first_value`, `last_value` and `nth_value` copy a value of their frame
/// to each row, one evaluation per row, all within one poll of the window
/// operator (a large value copied to every row of a batch, or a frame over
/// a whole partition evaluated row by row for minutes). Checked at each, a
/// query is refused at its cap plus one row's value, and a stopped one ends
/// at its next row. The answers are the function's own.
pub fn checked_window(udwf: &WindowUDF) -> WindowUDF {
    if udwf.inner().as_ref().is::<CheckedWindow>() {
        return udwf.clone();
    }
    WindowUDF::new_from_impl(CheckedWindow { inner: Arc::clone(udwf.inner()).into() })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedWindow {
    inner: UdfEq<Arc<dyn WindowUDFImpl>>,
}

impl WindowUDFImpl for CheckedWindow {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn expressions(&self, expr_args: ExpressionArgs) -> Vec<Arc<dyn PhysicalExpr>> {
        self.inner.expressions(expr_args)
    }
    fn partition_evaluator(&self, args: PartitionEvaluatorArgs) -> Result<Box<dyn PartitionEvaluator>> {
        Ok(Box::new(CheckedEvaluator { name: self.inner.name().into(), inner: self.inner.partition_evaluator(args)? }))
    }
    fn simplify(&self) -> Option<WindowFunctionSimplification> {
        self.inner.simplify()
    }
    fn field(&self, field_args: WindowUDFFieldArgs) -> Result<FieldRef> {
        self.inner.field(field_args)
    }
    fn sort_options(&self) -> Option<arrow_schema::SortOptions> {
        self.inner.sort_options()
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn reverse_expr(&self) -> ReversedUDWF {
        match self.inner.reverse_expr() {
            ReversedUDWF::Reversed(udwf) => ReversedUDWF::Reversed(Arc::new(checked_window(&udwf))),
            other => other,
        }
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
    fn limit_effect(&self, args: &[Arc<dyn PhysicalExpr>]) -> LimitEffect {
        self.inner.limit_effect(args)
    }
}

/// A partition evaluator whose every evaluation is first checked
/// ([`step_allowed`]).
#[derive(Debug)]
struct CheckedEvaluator {
    name: Arc<str>,
    inner: Box<dyn PartitionEvaluator>,
}

impl PartitionEvaluator for CheckedEvaluator {
    fn memoize(&mut self, state: &mut WindowAggState) -> Result<()> {
        self.inner.memoize(state)
    }
    fn get_range(&self, idx: usize, n_rows: usize) -> Result<std::ops::Range<usize>> {
        self.inner.get_range(idx, n_rows)
    }
    fn is_causal(&self) -> bool {
        self.inner.is_causal()
    }
    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> Result<ArrayRef> {
        step_allowed(&self.name)?;
        self.inner.evaluate_all(values, num_rows)
    }
    fn evaluate(&mut self, values: &[ArrayRef], range: &std::ops::Range<usize>) -> Result<ScalarValue> {
        step_allowed(&self.name)?;
        self.inner.evaluate(values, range)
    }
    fn evaluate_all_with_rank(&self, num_rows: usize, ranks_in_partition: &[std::ops::Range<usize>]) -> Result<ArrayRef> {
        step_allowed(&self.name)?;
        self.inner.evaluate_all_with_rank(num_rows, ranks_in_partition)
    }
    fn supports_bounded_execution(&self) -> bool {
        self.inner.supports_bounded_execution()
    }
    fn uses_window_frame(&self) -> bool {
        self.inner.uses_window_frame()
    }
    fn include_rank(&self) -> bool {
        self.inner.include_rank()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::Field;

    /// `udf` called on `args` (as DataFusion would, for `rows` rows).
    fn call(udf: &ScalarUDF, args: Vec<ColumnarValue>, rows: usize) -> Result<ColumnarValue> {
        let arg_fields: Vec<FieldRef> = args
            .iter()
            .map(|a| Arc::new(Field::new("a", a.data_type(), true)))
            .collect();
        let types: Vec<DataType> = args.iter().map(ColumnarValue::data_type).collect();
        let return_type = udf.return_type(&types)?;
        udf.invoke_with_args(ScalarFunctionArgs {
            args,
            arg_fields,
            number_rows: rows,
            return_field: Arc::new(Field::new("r", return_type, true)),
            config_options: Arc::new(ConfigOptions::default()),
        })
    }

    /// The bytes an output actually holds: its string bytes, or its list
    /// values at 8 bytes each (what the bound counts).
    fn produced(out: &ColumnarValue, rows: usize) -> u64 {
        let array = out.to_array(rows).unwrap();
        match array.data_type() {
            DataType::Utf8 => array.as_string::<i32>().values().len() as u64,
            DataType::LargeUtf8 => array.as_string::<i64>().values().len() as u64,
            DataType::Utf8View => {
                let v = array.as_string_view();
                (0..v.len()).map(|i| v.value(i).len() as u64).sum()
            }
            DataType::List(_) => child_bytes(array.as_list::<i32>().values()),
            DataType::LargeList(_) => child_bytes(array.as_list::<i64>().values()),
            other => panic!("unexpected output {other}"),
        }
    }

    /// A list's values: their string bytes and offsets, or 8 bytes each.
    fn child_bytes(values: &ArrayRef) -> u64 {
        match values.data_type() {
            DataType::Utf8 => values.as_string::<i32>().values().len() as u64 + 4 * values.len() as u64,
            _ => values.len() as u64 * 8,
        }
    }

    fn strings(values: &[Option<&str>]) -> ColumnarValue {
        ColumnarValue::Array(Arc::new(StringArray::from(values.to_vec())))
    }
    fn ints(values: &[Option<i64>]) -> ColumnarValue {
        ColumnarValue::Array(Arc::new(Int64Array::from(values.to_vec())))
    }
    fn text(s: &str) -> ColumnarValue {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(s.to_string())))
    }
    fn int(n: i64) -> ColumnarValue {
        ColumnarValue::Scalar(ScalarValue::Int64(Some(n)))
    }

    /// For each function, on arrays, scalars, nulls, empty and multi-byte
    /// input: what the real function produces never exceeds the bound.
    #[test]
    fn the_bound_is_never_below_what_the_function_produces() {
        let words = || strings(&[Some("ab"), None, Some("é日本"), Some(""), Some("xyzxyzxyz")]);
        let counts = || ints(&[Some(3), Some(2), Some(0), Some(7), Some(-1)]);
        let cases: Vec<(ScalarUDF, Vec<ColumnarValue>, usize)> = vec![
            (datafusion_functions::string::repeat().as_ref().clone(), vec![words(), counts()], 5),
            (datafusion_functions::string::repeat().as_ref().clone(), vec![text("abc"), int(1000)], 3),
            (datafusion_functions::unicode::lpad().as_ref().clone(), vec![words(), ints(&[Some(3), Some(2), Some(0), Some(7), None])], 5),
            (datafusion_functions::unicode::lpad().as_ref().clone(), vec![words(), int(9), text("日")], 5),
            (datafusion_functions::unicode::rpad().as_ref().clone(), vec![words(), ints(&[Some(1), Some(12), None, Some(0), Some(4)]), text("ü")], 5),
            (datafusion_functions::string::replace().as_ref().clone(), vec![words(), text("x"), text("[longer]")], 5),
            (datafusion_functions::string::replace().as_ref().clone(), vec![words(), text(""), text("--")], 5),
            (datafusion_functions::regex::regexp_replace().as_ref().clone(), vec![words(), text("(.)"), text("\\1\\1\\1"), text("g")], 5),
            (datafusion_functions::regex::regexp_replace().as_ref().clone(), vec![words(), text("x*"), text("<>"), text("g")], 5),
            (datafusion_functions_nested::range::range_udf().as_ref().clone(), vec![int(0), int(1000), int(7)], 2),
            (datafusion_functions_nested::range::range_udf().as_ref().clone(), vec![ints(&[Some(5), None, Some(-40)]), ints(&[Some(50), Some(1), Some(40)]), int(3)], 3),
            (datafusion_functions_nested::range::gen_series_udf().as_ref().clone(), vec![int(-10), int(10)], 4),
            (datafusion_functions_nested::repeat::array_repeat_udf().as_ref().clone(), vec![ints(&[Some(1), Some(2), None]), ints(&[Some(4), Some(0), Some(9)])], 3),
            // One long string repeated, among short ones repeated zero times:
            // the long one's own length counts, not the batch's average.
            (datafusion_functions_nested::repeat::array_repeat_udf().as_ref().clone(),
             vec![strings(&[Some(&"x".repeat(5000)), Some("a"), Some("b"), Some("c")]), ints(&[Some(30), Some(0), Some(0), Some(0)])], 4),
            (datafusion_functions::string::concat().as_ref().clone(), vec![words(), text("--"), words(), words()], 5),
            (datafusion_functions::string::concat_ws().as_ref().clone(), vec![text("::"), words(), words()], 5),
        ];
        for (udf, args, rows) in cases {
            let name = udf.name().to_string();
            let bound = output_bound(&name, &args, rows).unwrap_or_else(|| panic!("{name}: no bound"));
            let out = call(&udf, args, rows).unwrap_or_else(|e| panic!("{name}: {e}"));
            let made = produced(&out, rows);
            assert!(made <= bound, "{name}: produced {made} bytes, bound {bound}");
        }
    }

    /// Bounded, a call under the limit answers what the function answers;
    /// past it, ResourcesExhausted naming the function, before computing.
    #[test]
    fn a_bounded_call_past_its_limit_is_refused_before_it_runs() {
        let repeat = datafusion_functions::string::repeat();
        let capped = bounded(&repeat, 1 << 20).expect("repeat is amplifying");
        let small = vec![strings(&[Some("ab"), Some("c")]), int(100)];
        let want = call(&repeat, small.clone(), 2).unwrap().to_array(2).unwrap();
        let got = call(&capped, small, 2).unwrap().to_array(2).unwrap();
        assert_eq!(got.as_ref(), want.as_ref());

        // A billion copies of one byte, over 8,192 rows.
        let rows = 8192;
        let huge = vec![text("x"), int(1_000_000_000)];
        match call(&capped, huge, rows) {
            Err(DataFusionError::ResourcesExhausted(m)) => {
                assert!(m.contains("repeat()") && m.contains("8192000000000 bytes"), "{m}")
            }
            other => panic!("not refused: {other:?}"),
        }
        // A timestamp range with a one-nanosecond step.
        let range = datafusion_functions_nested::range::range_udf();
        let capped = bounded(&range, 1 << 20).unwrap();
        let year = |y: i64| ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(Some((y - 1970) * 31_556_952_000_000_000), None));
        let step = ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(Some(
            arrow_array::types::IntervalMonthDayNano::new(0, 0, 1),
        )));
        assert!(matches!(
            call(&capped, vec![year(2000), year(2001), step], 1),
            Err(DataFusionError::ResourcesExhausted(_))
        ));
        // A negative length given per row: DataFusion's own lpad would
        // reserve more than can be addressed and abort.
        let lpad = bounded(&datafusion_functions::unicode::lpad(), 1 << 20).unwrap();
        match call(&lpad, vec![strings(&[Some("a"), Some("b")]), ints(&[Some(3), Some(-1)])], 2) {
            Err(DataFusionError::ResourcesExhausted(m)) => assert!(m.contains("lpad() was given a count"), "{m}"),
            other => panic!("not refused: {other:?}"),
        }
        assert!(bounded(&datafusion_functions::string::upper(), 1 << 20).is_none());
        assert!(is_amplifying("LIST_REPEAT") && is_amplifying("concat") && !is_amplifying("upper"));
    }
}
