//! The tables a query sees: every view set of the catalog by name, each
//! resolved only when a query names it (a view as its merge query over its
//! partitions of the current schema hash, a source over its files), and,
//! for a caller who is not an admin, wrapped in the audience filter. The
//! filter is part of the table itself, so every reference to a view — in a
//! subquery, a join, a CTE, a UNION — reads the filtered rows; the raw
//! registrations live in a session the caller's SQL never reaches.
//!
//! The filtered table is a barrier to the optimizer: it accepts no filter
//! pushed into it and its plan node lets no predicate through, so the
//! caller's own predicates are evaluated only on rows it may see (a
//! predicate evaluated first on every row could fail on a hidden one and
//! quote its value in the error).

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{Column, DFSchema, DataFusionError};
use datafusion::datasource::provider_as_source;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{cast, lit, Expr, LogicalPlanBuilder, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion::prelude::SessionContext;
use micromegas_views_lakehouse::catalog::ViewSet;
use micromegas_views_lakehouse::lake::Lake;
use micromegas_views_lakehouse::read::{self, CheckedFiles};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

type DfResult<T> = datafusion::error::Result<T>;

/// The columns that decide who may read a row: `audience` where a table
/// has one, else `process_id` (a process's audience is the one its rows
/// in the audience-stamped sources carry).
pub const AUDIENCE: &str = "audience";
pub const PROCESS_ID: &str = "process_id";

pub struct LakeSchema {
    lake: Lake,
    pool: deadpool_postgres::Pool,
    sets: Arc<Vec<ViewSet>>,
    checked: CheckedFiles,
    /// `None`: every row (an admin).
    readable: Option<Arc<BTreeSet<String>>>,
    /// Where the raw registrations live: never the caller's session.
    inner: SessionContext,
    resolved: tokio::sync::Mutex<HashMap<String, Arc<dyn TableProvider>>>,
}

impl std::fmt::Debug for LakeSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LakeSchema").field("sets", &self.sets.len()).finish()
    }
}

fn external(e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::External(e.to_string().into())
}

impl LakeSchema {
    pub fn new(
        lake: Lake,
        pool: deadpool_postgres::Pool,
        sets: Arc<Vec<ViewSet>>,
        checked: CheckedFiles,
        readable: Option<Arc<BTreeSet<String>>>,
        inner: SessionContext,
    ) -> Self {
        LakeSchema {
            lake,
            pool,
            sets,
            checked,
            readable,
            inner,
            resolved: Default::default(),
        }
    }

    fn set(&self, name: &str) -> Option<&ViewSet> {
        self.sets.iter().find(|s| s.name == name)
    }

    /// The raw table `name` (registered once in the inner session).
    async fn raw(&self, set: &ViewSet) -> DfResult<Arc<dyn TableProvider>> {
        if !self.inner.table_exist(set.name.as_str())? {
            let object = self.pool.get().await.map_err(external)?;
            let client: &tokio_postgres::Client = &object;
            read::register_set(&self.inner, &self.lake, client, set, None, &self.checked)
                .await
                .map_err(external)?;
        }
        self.inner.table_provider(set.name.as_str()).await
    }

    /// The rows of `set` a caller who reads `audiences` may see, as a
    /// predicate over the set's columns.
    async fn filter(&self, set: &ViewSet, audiences: &BTreeSet<String>) -> DfResult<Expr> {
        let schema = &set.schema;
        let text = |c: &str| cast(Expr::Column(Column::new_unqualified(c)), DataType::Utf8);
        let allowed = || audiences.iter().map(|a| lit(a.as_str())).collect::<Vec<_>>();
        if schema.field_with_name(AUDIENCE).is_ok() {
            if audiences.is_empty() {
                return Ok(lit(false));
            }
            return Ok(text(AUDIENCE).in_list(allowed(), false));
        }
        if schema.field_with_name(PROCESS_ID).is_err() || audiences.is_empty() {
            return Ok(lit(false));
        }
        // The processes whose rows carry an audience the caller reads, in
        // every source stamped with both columns, found before the
        // caller's query runs.
        let mut processes: BTreeSet<String> = BTreeSet::new();
        let stamped: Vec<ViewSet> = self
            .sets
            .iter()
            .filter(|s| {
                s.queries.is_none()
                    && s.schema.field_with_name(AUDIENCE).is_ok()
                    && s.schema.field_with_name(PROCESS_ID).is_ok()
            })
            .cloned()
            .collect();
        for source in &stamped {
            let table = self.raw(source).await?;
            let plan = LogicalPlanBuilder::scan(source.name.as_str(), provider_as_source(table), None)?
                .filter(text(AUDIENCE).in_list(allowed(), false))?
                .project(vec![text(PROCESS_ID).alias(PROCESS_ID)])?
                .distinct()?
                .build()?;
            let batches = self.inner.execute_logical_plan(plan).await?.collect().await?;
            for batch in &batches {
                let ids = cast_to_utf8(batch.column(0))?;
                let ids = ids.as_string::<i32>();
                processes.extend(ids.iter().flatten().map(str::to_string));
            }
        }
        if processes.is_empty() {
            return Ok(lit(false));
        }
        Ok(text(PROCESS_ID).in_list(processes.iter().map(|p| lit(p.as_str())).collect(), false))
    }
}

fn cast_to_utf8(array: &datafusion::arrow::array::ArrayRef) -> DfResult<datafusion::arrow::array::ArrayRef> {
    Ok(datafusion::arrow::compute::cast(array, &DataType::Utf8)?)
}

/// A table whose rows are those of `inner` that `predicate` keeps, and
/// nothing of the caller's query below that.
#[derive(Debug)]
struct Guarded {
    inner: Arc<dyn TableProvider>,
    predicate: Expr,
}

#[async_trait::async_trait]
impl TableProvider for Guarded {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let schema = self.inner.schema();
        // What the caller asked for, and what the predicate reads.
        let wanted: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..schema.fields().len()).collect(),
        };
        let mut read = wanted.clone();
        for c in self.predicate.column_refs() {
            let i = schema.index_of(&c.name)?;
            if !read.contains(&i) {
                read.push(i);
            }
        }
        let scan = self.inner.scan(state, Some(&read), &[], None).await?;
        let scanned = scan.schema();
        let df_schema = DFSchema::try_from(scanned.as_ref().clone())?;
        let predicate = state.create_physical_expr(self.predicate.clone(), &df_schema)?;
        let filtered: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(predicate, scan)?);
        let columns: Vec<(Arc<dyn PhysicalExpr>, String)> = wanted
            .iter()
            .enumerate()
            .map(|(position, &i)| {
                let name = schema.field(i).name().clone();
                (Arc::new(PhysicalColumn::new(&name, position)) as Arc<dyn PhysicalExpr>, name)
            })
            .collect();
        let projected: Arc<dyn ExecutionPlan> = Arc::new(ProjectionExec::try_new(columns, filtered)?);
        Ok(Arc::new(Barrier { input: projected }))
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Unsupported; filters.len()])
    }
}

/// The audience filter's plan node: it passes its input through and, like
/// any node that does not say otherwise, lets no predicate of the plan
/// above be pushed below it.
#[derive(Debug)]
struct Barrier {
    input: Arc<dyn ExecutionPlan>,
}

impl DisplayAs for Barrier {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "AudienceFilter")
    }
}

impl ExecutionPlan for Barrier {
    fn name(&self) -> &str {
        "AudienceFilter"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Barrier {
            input: children.into_iter().next().expect("one child"),
        }))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}

#[async_trait::async_trait]
impl SchemaProvider for LakeSchema {
    fn table_names(&self) -> Vec<String> {
        self.sets.iter().map(|s| s.name.clone()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(set) = self.set(name) else {
            return Ok(None);
        };
        let mut resolved = self.resolved.lock().await;
        if let Some(t) = resolved.get(name) {
            return Ok(Some(t.clone()));
        }
        let raw = self.raw(set).await?;
        let table: Arc<dyn TableProvider> = match &self.readable {
            None => raw,
            Some(audiences) => Arc::new(Guarded {
                inner: raw,
                predicate: self.filter(set, audiences).await?,
            }),
        };
        resolved.insert(name.to_string(), table.clone());
        Ok(Some(table))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.set(name).is_some()
    }
}
