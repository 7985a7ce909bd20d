//! The tables a query sees: every view set of the catalog by name, each
//! resolved only when a query names it (a view as its merge query over its
//! partitions of the current schema hash, a source over its files), and,
//! for a caller who is not an admin, wrapped in the audience filter. The
//! filter is part of the table itself, so every reference to a view — in a
//! subquery, a join, a CTE, a UNION — reads the filtered rows; the raw
//! registrations live in a session the caller's SQL never reaches.

use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::{Column, DataFusionError};
use datafusion::datasource::{provider_as_source, ViewTable};
use datafusion::logical_expr::{cast, in_subquery, lit, Expr, LogicalPlan, LogicalPlanBuilder};
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

    /// The rows of `set` a caller who reads `audiences` may see.
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
        // every source stamped with both columns.
        let mut plan: Option<LogicalPlan> = None;
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
            let part = LogicalPlanBuilder::scan(source.name.as_str(), provider_as_source(table), None)?
                .filter(text(AUDIENCE).in_list(allowed(), false))?
                .project(vec![text(PROCESS_ID).alias(PROCESS_ID)])?
                .distinct()?
                .build()?;
            plan = Some(match plan {
                None => part,
                Some(p) => LogicalPlanBuilder::from(p).union_distinct(part)?.build()?,
            });
        }
        Ok(match plan {
            None => lit(false),
            Some(p) => in_subquery(text(PROCESS_ID), Arc::new(p)),
        })
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
            Some(audiences) => {
                let filter = self.filter(set, audiences).await?;
                let plan = LogicalPlanBuilder::scan(name, provider_as_source(raw), None)?
                    .filter(filter)?
                    .build()?;
                Arc::new(ViewTable::new(plan, None))
            }
        };
        resolved.insert(name.to_string(), table.clone());
        Ok(Some(table))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.set(name).is_some()
    }
}
