//! The functions the planner knows: DataFusion's defaults (scalar, nested,
//! aggregate, window, higher-order) plus the micromegas extension functions
//! with their signatures. Nothing here is ever executed — the micromegas
//! functions are signature-only stand-ins so that real queries plan.
//!
//! The registry never changes, so it is built once per process (per backend).

use arrow_schema::{DataType, Field, Fields};
use datafusion_common::DFSchema;
use datafusion_common::{not_impl_err, plan_err, DataFusionError, Result as DfResult};
use datafusion_expr::function::AccumulatorArgs;
use datafusion_expr::planner::{
    ExprPlanner, PlannerResult, RawAggregateExpr, RawBinaryExpr, RawFieldAccessExpr, RawWindowExpr,
};
use datafusion_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Expr, HigherOrderUDF,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, WindowUDF,
};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Micromegas admin and per-instance functions a stored definition may never call.
pub const DENIED_FUNCTIONS: &[&str] = &[
    "retire_partitions",
    "materialize_partitions",
    "regenerate_partitions",
    "deny_queries",
    "view_instance",
    "process_spans",
    "perfetto_trace_chunks",
    "retire_partition_by_metadata",
    "retire_partition_by_file",
    "remove_query_denial",
];

pub struct FunctionRegistry {
    pub scalars: HashMap<String, Arc<ScalarUDF>>,
    pub higher_order: HashMap<String, Arc<HigherOrderUDF>>,
    pub aggregates: HashMap<String, Arc<AggregateUDF>>,
    pub windows: HashMap<String, Arc<WindowUDF>>,
    pub expr_planners: Vec<Arc<dyn ExprPlanner>>,
    /// Table functions: name → output columns.
    pub table_functions: HashMap<String, Vec<Field>>,
}

/// The process-wide registry, built on first use.
pub fn registry() -> &'static FunctionRegistry {
    static REGISTRY: OnceLock<FunctionRegistry> = OnceLock::new();
    REGISTRY.get_or_init(build)
}

/// Indexes functions by their name and every alias.
fn by_name<T>(
    functions: Vec<Arc<T>>,
    names: impl Fn(&T) -> (&str, &[String]),
) -> HashMap<String, Arc<T>> {
    let mut map = HashMap::new();
    for f in functions {
        let (name, aliases) = names(&f);
        for n in std::iter::once(name.to_string()).chain(aliases.iter().cloned()) {
            map.insert(n, Arc::clone(&f));
        }
    }
    map
}

fn build() -> FunctionRegistry {
    // DataFusion's own declarations, nullability included: micromegas
    // plans with them (e.g. date_bin(…) is nullable, so log_stats'
    // time_bin is).
    let mut all: Vec<Arc<ScalarUDF>> = datafusion_functions::all_default_functions();
    all.extend(datafusion_functions_nested::all_default_nested_functions());
    all.extend(micromegas_scalars());
    let scalars = by_name(all, |f| (f.name(), f.aliases()));
    let higher_order = by_name(
        datafusion_functions_nested::all_default_higher_order_functions(),
        |f| (f.name(), f.aliases()),
    );
    let mut all = datafusion_functions_aggregate::all_default_aggregate_functions();
    all.extend(micromegas_aggregates());
    let aggregates = by_name(all, |f| (f.name(), f.aliases()));
    let windows = by_name(
        datafusion_functions_window::all_default_window_functions(),
        |f| (f.name(), f.aliases()),
    );
    let expr_planners: Vec<Arc<dyn ExprPlanner>> = vec![
        // First: a checkpoint at every operator, field access, literal list,
        // aggregate and window DataFusion plans.
        Arc::new(Checkpoint),
        Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
        Arc::new(datafusion_functions_nested::planner::NestedFunctionPlanner),
        Arc::new(datafusion_functions_nested::planner::FieldAccessPlanner),
        Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
        Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
        Arc::new(datafusion_functions_aggregate::planner::AggregateFunctionPlanner),
        Arc::new(datafusion_functions_window::planner::WindowFunctionPlanner),
    ];
    let table_functions = HashMap::from([
        (
            "expand_histogram".to_string(),
            vec![
                Field::new("bin_center", DataType::Float64, false),
                Field::new("count", DataType::UInt64, false),
            ],
        ),
        (
            "jsonb_each".to_string(),
            vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Binary, true),
            ],
        ),
        (
            "jsonb_array_elements".to_string(),
            vec![Field::new("value", DataType::Binary, true)],
        ),
    ]);
    FunctionRegistry {
        scalars,
        higher_order,
        aggregates,
        windows,
        expr_planners,
        table_functions,
    }
}

fn dict_utf8() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

fn property_list() -> DataType {
    DataType::List(Arc::new(Field::new(
        "Property",
        DataType::Struct(Fields::from(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Utf8, false),
        ])),
        false,
    )))
}

/// The struct `make_histogram` and `sum_histograms` produce.
pub fn histogram_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("start", DataType::Float64, false),
        Field::new("end", DataType::Float64, false),
        Field::new("min", DataType::Float64, false),
        Field::new("max", DataType::Float64, false),
        Field::new("sum", DataType::Float64, false),
        Field::new("sum_sq", DataType::Float64, false),
        Field::new("count", DataType::UInt64, false),
        Field::new(
            "bins",
            DataType::List(Arc::new(Field::new("item", DataType::UInt64, false))),
            false,
        ),
    ]))
}

/// What a micromegas function takes in one argument position. micromegas
/// declares these functions with `Signature::any`, so a wrong argument only
/// fails when a partition is materialized; the stand-ins here refuse it at
/// CREATE instead, leniently (any width of string, binary or list, and
/// dictionaries of them, and NULL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Arg {
    /// A string (the key, the JSON text, the path).
    Str,
    /// A jsonb value: binary.
    Jsonb,
    /// A property set: a list of key/value structs, or jsonb.
    Properties,
    /// A histogram (the struct make_histogram produces).
    Histogram,
    /// A number.
    Number,
    /// Anything (the position is not constrained here).
    Any,
}

impl Arg {
    fn accepts(self, t: &DataType) -> bool {
        use DataType::*;
        let inner = match t {
            Dictionary(_, value) => value.as_ref(),
            other => other,
        };
        if matches!(inner, Null) {
            return true;
        }
        let binary = matches!(
            inner,
            Binary | LargeBinary | BinaryView | FixedSizeBinary(_)
        );
        match self {
            Arg::Str => matches!(inner, Utf8 | LargeUtf8 | Utf8View),
            Arg::Jsonb => binary,
            Arg::Properties => binary || matches!(inner, List(_) | LargeList(_) | ListView(_)),
            Arg::Histogram => matches!(inner, Struct(_)),
            Arg::Number => inner.is_numeric(),
            Arg::Any => true,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Arg::Str => "a string",
            Arg::Jsonb => "a jsonb value (binary)",
            Arg::Properties => "a property set (a list of key/value pairs, or jsonb)",
            Arg::Histogram => "a histogram (as make_histogram produces)",
            Arg::Number => "a number",
            Arg::Any => "any value",
        }
    }
}

thread_local! {
    /// The last argument problem found while planning on this thread:
    /// DataFusion wraps a coercion error in its own words, so the planner
    /// reports this message instead (and DataFusion's in DETAIL).
    static ARG_PROBLEM: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Takes (and clears) the last argument problem of this thread.
pub fn take_arg_problem() -> Option<String> {
    ARG_PROBLEM.with(|p| p.borrow_mut().take())
}

/// The argument check of a micromegas function: the count, then each kind.
fn check_args(name: &str, kinds: &[Arg], arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
    let problem = if arg_types.len() != kinds.len() {
        Some(format!(
            "{name}() takes {} argument{}, not {}",
            kinds.len(),
            if kinds.len() == 1 { "" } else { "s" },
            arg_types.len()
        ))
    } else {
        kinds
            .iter()
            .zip(arg_types)
            .enumerate()
            .find(|(_, (kind, t))| !kind.accepts(t))
            .map(|(i, (kind, t))| {
                format!(
                    "{name}() argument {} must be {}, not {t}",
                    i + 1,
                    kind.describe()
                )
            })
    };
    match problem {
        Some(message) => {
            ARG_PROBLEM.with(|p| *p.borrow_mut() = Some(message.clone()));
            plan_err!("{message}")
        }
        None => Ok(arg_types.to_vec()),
    }
}

/// A scalar function known by its signature only.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SignatureOnly {
    name: &'static str,
    args: &'static [Arg],
    signature: Signature,
    returns: DataType,
}

impl ScalarUDFImpl for SignatureOnly {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        check_args(self.name, self.args, arg_types)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.returns.clone())
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        not_impl_err!("{} is only planned here, never executed", self.name)
    }
}

/// An aggregate function known by its signature only.
#[derive(Debug, PartialEq, Eq, Hash)]
struct AggregateSignatureOnly {
    name: &'static str,
    args: &'static [Arg],
    signature: Signature,
    returns: DataType,
}

impl AggregateUDFImpl for AggregateSignatureOnly {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        check_args(self.name, self.args, arg_types)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.returns.clone())
    }
    fn accumulator(&self, _acc_args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        not_impl_err!("{} is only planned here, never executed", self.name)
    }
}

fn scalar(name: &'static str, args: &'static [Arg], returns: DataType) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(SignatureOnly {
        name,
        args,
        signature: Signature::user_defined(Volatility::Immutable),
        returns,
    }))
}

fn micromegas_scalars() -> Vec<Arc<ScalarUDF>> {
    vec![
        scalar("property_get", &[Arg::Properties, Arg::Str], dict_utf8()),
        scalar(
            "properties_to_dict",
            &[Arg::Properties],
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(property_list())),
        ),
        scalar("properties_to_jsonb", &[Arg::Properties], DataType::Binary),
        scalar("properties_to_array", &[Arg::Properties], property_list()),
        scalar("properties_length", &[Arg::Properties], DataType::Int32),
        scalar("jsonb_parse", &[Arg::Str], DataType::Binary),
        scalar("jsonb_format_json", &[Arg::Jsonb], DataType::Utf8),
        scalar("jsonb_get", &[Arg::Jsonb, Arg::Any], DataType::Binary),
        scalar("jsonb_as_string", &[Arg::Jsonb], DataType::Utf8),
        scalar("jsonb_as_f64", &[Arg::Jsonb], DataType::Float64),
        scalar("jsonb_as_i64", &[Arg::Jsonb], DataType::Int64),
        scalar("jsonb_array_length", &[Arg::Jsonb], DataType::Int64),
        scalar(
            "jsonb_object_keys",
            &[Arg::Jsonb],
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        ),
        scalar(
            "jsonb_path_query_first",
            &[Arg::Jsonb, Arg::Str],
            DataType::Binary,
        ),
        scalar(
            "jsonb_path_query",
            &[Arg::Jsonb, Arg::Str],
            DataType::List(Arc::new(Field::new("item", DataType::Binary, true))),
        ),
        scalar(
            "quantile_from_histogram",
            &[Arg::Histogram, Arg::Number],
            DataType::Float64,
        ),
        scalar(
            "variance_from_histogram",
            &[Arg::Histogram],
            DataType::Float64,
        ),
        scalar("count_from_histogram", &[Arg::Histogram], DataType::UInt64),
        scalar("sum_from_histogram", &[Arg::Histogram], DataType::Float64),
    ]
}

fn micromegas_aggregates() -> Vec<Arc<AggregateUDF>> {
    vec![
        Arc::new(AggregateUDF::new_from_impl(AggregateSignatureOnly {
            name: "make_histogram",
            args: &[Arg::Number, Arg::Number, Arg::Number, Arg::Number],
            signature: Signature::user_defined(Volatility::Immutable),
            returns: histogram_type(),
        })),
        Arc::new(AggregateUDF::new_from_impl(AggregateSignatureOnly {
            name: "sum_histograms",
            args: &[Arg::Histogram],
            signature: Signature::user_defined(Volatility::Immutable),
            returns: histogram_type(),
        })),
    ]
}

/// An expression planner that plans nothing and checks the job's budget
/// each time DataFusion asks it (isolate.rs): DataFusion calls no other hook
/// of ours while it plans the expressions of a query, so an expression-heavy
/// query (thousands of ORDER BY items, each a long sum) would otherwise run
/// on, abandoned, long after its time limit.
#[derive(Debug)]
struct Checkpoint;

fn budget_left() -> DfResult<()> {
    crate::isolate::checkpoint().map_err(|e| DataFusionError::External(Box::new(e)))
}

impl ExprPlanner for Checkpoint {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        _schema: &DFSchema,
    ) -> DfResult<PlannerResult<RawBinaryExpr>> {
        budget_left()?;
        Ok(PlannerResult::Original(expr))
    }

    fn plan_field_access(
        &self,
        expr: RawFieldAccessExpr,
        _schema: &DFSchema,
    ) -> DfResult<PlannerResult<RawFieldAccessExpr>> {
        budget_left()?;
        Ok(PlannerResult::Original(expr))
    }

    fn plan_array_literal(
        &self,
        exprs: Vec<Expr>,
        _schema: &DFSchema,
    ) -> DfResult<PlannerResult<Vec<Expr>>> {
        budget_left()?;
        Ok(PlannerResult::Original(exprs))
    }

    fn plan_struct_literal(
        &self,
        args: Vec<Expr>,
        _is_named_struct: bool,
    ) -> DfResult<PlannerResult<Vec<Expr>>> {
        budget_left()?;
        Ok(PlannerResult::Original(args))
    }

    fn plan_aggregate(&self, expr: RawAggregateExpr) -> DfResult<PlannerResult<RawAggregateExpr>> {
        budget_left()?;
        Ok(PlannerResult::Original(expr))
    }

    fn plan_window(&self, expr: RawWindowExpr) -> DfResult<PlannerResult<RawWindowExpr>> {
        budget_left()?;
        Ok(PlannerResult::Original(expr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolate::{run_with, Budget};
    use std::time::Duration;

    /// DataFusion asks the registry's expression planners in order: the
    /// checkpoint is first, so an operator planned after the job's time ran
    /// out ends the planning (an expression-heavy query with no table or
    /// function look-up in between stops at its next operator).
    #[test]
    fn the_expression_planner_checkpoint_comes_first_and_stops_a_job() {
        assert_eq!(format!("{:?}", registry().expr_planners[0]), "Checkpoint");
        let raw = || RawBinaryExpr {
            op: sqlparser::ast::BinaryOperator::Plus,
            left: datafusion_expr::lit(1),
            right: datafusion_expr::lit(1),
        };
        let schema = DFSchema::empty();
        assert!(matches!(
            Checkpoint.plan_binary_op(raw(), &schema),
            Ok(PlannerResult::Original(_))
        ));
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = run_with(Budget::with_timeout(Duration::ZERO), move || {
            let planned = Checkpoint.plan_binary_op(raw(), &DFSchema::empty());
            tx.send(planned.err().map(|e| e.to_string())).unwrap();
            Ok(())
        });
        let error = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        assert!(
            error.as_deref().is_some_and(|e| e.contains("validation")),
            "{error:?}"
        );
    }
}
