//! The functions the planner knows: DataFusion's defaults (scalar, nested,
//! aggregate, window, higher-order) plus the micromegas extension functions
//! with their signatures. Nothing here is ever executed — the micromegas
//! functions are signature-only stand-ins so that real queries plan.
//!
//! The registry never changes, so it is built once per process (per backend).

use arrow_schema::{DataType, Field, FieldRef, Fields};
use datafusion_common::{not_impl_err, Result as DfResult};
use datafusion_expr::function::AccumulatorArgs;
use datafusion_expr::planner::ExprPlanner;
use datafusion_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, HigherOrderUDF, ReturnFieldArgs,
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
    let mut all: Vec<Arc<ScalarUDF>> = datafusion_functions::all_default_functions()
        .into_iter()
        .map(|f| {
            if NULL_PROPAGATING.contains(&f.name()) {
                Arc::new(ScalarUDF::new_from_impl(NullPropagating(f)))
            } else {
                f
            }
        })
        .collect();
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

/// Functions whose result is NULL only when an argument is NULL, but whose
/// DataFusion 55 declaration marks every result nullable. micromegas infers
/// `date_bin(…)` over non-null columns as non-null (e.g. log_stats'
/// `time_bin`), so the planner propagates the arguments' nullability.
const NULL_PROPAGATING: &[&str] = &["date_bin"];

/// A DataFusion function whose result is nullable only when an argument is.
#[derive(Debug, PartialEq, Eq, Hash)]
struct NullPropagating(Arc<ScalarUDF>);

impl ScalarUDFImpl for NullPropagating {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn aliases(&self) -> &[String] {
        self.0.aliases()
    }
    fn schema_name(&self, args: &[datafusion_expr::Expr]) -> DfResult<String> {
        self.0.schema_name(args)
    }
    fn signature(&self) -> &Signature {
        self.0.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.0.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        let field = self.0.return_field_from_args(args)?;
        Ok(Arc::new(field.as_ref().clone().with_nullable(nullable)))
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.0.coerce_types(arg_types)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.0.invoke_with_args(args)
    }
}

/// A scalar function known by its signature only.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SignatureOnly {
    name: &'static str,
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
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.returns.clone())
    }
    fn accumulator(&self, _acc_args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        not_impl_err!("{} is only planned here, never executed", self.name)
    }
}

fn scalar(name: &'static str, args: usize, returns: DataType) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(SignatureOnly {
        name,
        signature: Signature::any(args, Volatility::Immutable),
        returns,
    }))
}

fn micromegas_scalars() -> Vec<Arc<ScalarUDF>> {
    vec![
        scalar("property_get", 2, dict_utf8()),
        scalar(
            "properties_to_dict",
            1,
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(property_list())),
        ),
        scalar("properties_to_jsonb", 1, DataType::Binary),
        scalar("properties_to_array", 1, property_list()),
        scalar("properties_length", 1, DataType::Int32),
        scalar("jsonb_parse", 1, DataType::Binary),
        scalar("jsonb_format_json", 1, DataType::Utf8),
        scalar("jsonb_get", 2, DataType::Binary),
        scalar("jsonb_as_string", 1, DataType::Utf8),
        scalar("jsonb_as_f64", 1, DataType::Float64),
        scalar("jsonb_as_i64", 1, DataType::Int64),
        scalar("jsonb_array_length", 1, DataType::Int64),
        scalar(
            "jsonb_object_keys",
            1,
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        ),
        scalar("jsonb_path_query_first", 2, DataType::Binary),
        scalar(
            "jsonb_path_query",
            2,
            DataType::List(Arc::new(Field::new("item", DataType::Binary, true))),
        ),
        scalar("quantile_from_histogram", 2, DataType::Float64),
        scalar("variance_from_histogram", 1, DataType::Float64),
        scalar("count_from_histogram", 1, DataType::UInt64),
        scalar("sum_from_histogram", 1, DataType::Float64),
    ]
}

fn micromegas_aggregates() -> Vec<Arc<AggregateUDF>> {
    vec![
        Arc::new(AggregateUDF::new_from_impl(AggregateSignatureOnly {
            name: "make_histogram",
            signature: Signature::any(4, Volatility::Immutable),
            returns: histogram_type(),
        })),
        Arc::new(AggregateUDF::new_from_impl(AggregateSignatureOnly {
            name: "sum_histograms",
            signature: Signature::any(1, Volatility::Immutable),
            returns: histogram_type(),
        })),
    ]
}
