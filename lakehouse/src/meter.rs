//! A query's memory, counted where its work runs and refused where an error
//! can be returned ([`micromegas_views_core::meter`] counts; this module
//! says which work is the query's).
//!
//! Every operator of a metered plan is wrapped in a [`MeteredExec`]: each
//! poll of its stream is attributed to the query, wherever it runs (the
//! tasks DataFusion spawns for a plan poll wrapped streams too), and each
//! batch it produces is followed by a check of what the query holds. The
//! work outside the streams (planning, the loop that reads the answer) is
//! attributed by [`run`].

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{CardinalityEffect, ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::{Stream, StreamExt};
use micromegas_views_core::meter::QueryMeter;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

pub use micromegas_views_core::meter::{end_process_past, installed, MeteredAllocator, QueryMeter as Meter};

/// Runs `work` with every poll attributed to `meter`'s query. When `work`
/// ends, or is dropped before it ends (its task aborted at a deadline or
/// when its caller goes away), the query is stopped
/// ([`QueryMeter::stop`]): what still runs for it elsewhere (an operator's
/// batch on another task) is refused at its next check.
pub async fn run<F: Future>(meter: Arc<QueryMeter>, work: F) -> F::Output {
    let stop = StopOnDrop(meter);
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(move |cx| {
        let _in = stop.0.enter();
        work.as_mut().poll(cx)
    })
    .await
}

/// Stops a query's meter when dropped.
struct StopOnDrop(Arc<QueryMeter>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Wraps every operator of `plan` in a [`MeteredExec`] for `meter` (an
/// operator already wrapped, as a view's plan built in an inner session
/// is, is left as it is).
pub fn meter_plan(plan: Arc<dyn ExecutionPlan>, meter: &Arc<QueryMeter>) -> Result<Arc<dyn ExecutionPlan>> {
    if (plan.as_ref() as &dyn Any).is::<MeteredExec>() {
        return Ok(plan);
    }
    let children = plan
        .children()
        .into_iter()
        .map(|c| meter_plan(c.clone(), meter))
        .collect::<Result<Vec<_>>>()?;
    let plan = if children.is_empty() {
        plan
    } else {
        plan.replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep))?
    };
    Ok(Arc::new(MeteredExec::new(plan, meter.clone())))
}

/// An operator whose work is attributed to a query, and whose every batch
/// is followed by a check of what that query holds.
#[derive(Debug)]
pub struct MeteredExec {
    input: Arc<dyn ExecutionPlan>,
    meter: Arc<QueryMeter>,
    properties: Arc<PlanProperties>,
}

impl MeteredExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, meter: Arc<QueryMeter>) -> MeteredExec {
        let properties = input.properties().clone();
        MeteredExec { input, meter, properties }
    }
}

impl DisplayAs for MeteredExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "MeteredExec")
    }
}

impl ExecutionPlan for MeteredExec {
    fn name(&self) -> &str {
        "MeteredExec"
    }

    // Invisible to whoever inspects the plan by type: it is its input.
    fn downcast_delegate(&self) -> Option<&dyn ExecutionPlan> {
        Some(self.input.as_ref())
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal("MeteredExec has one input".into()));
        }
        Ok(Arc::new(MeteredExec::new(children.remove(0), self.meter.clone())))
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let window = matches!(self.input.name(), "WindowAggExec" | "BoundedWindowAggExec");
        let inner = {
            let _in = self.meter.enter();
            let _op = micromegas_views_core::meter::polling_operator(window);
            self.input.execute(partition, context)?
        };
        Ok(Box::pin(MeteredStream { inner, meter: self.meter.clone(), window }))
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    fn statistics_from_inputs(&self, input_stats: &[Arc<Statistics>], _args: &StatisticsArgs) -> Result<Arc<Statistics>> {
        Ok(Arc::clone(&input_stats[0]))
    }

    fn supports_limit_pushdown(&self) -> bool {
        true
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        CardinalityEffect::Equal
    }
}

struct MeteredStream {
    inner: SendableRecordBatchStream,
    meter: Arc<QueryMeter>,
    /// Whether the operator is a window operator
    /// ([`micromegas_views_core::meter::polling_operator`]).
    window: bool,
}

impl Stream for MeteredStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = {
            let _in = self.meter.enter();
            let _op = micromegas_views_core::meter::polling_operator(self.window);
            self.inner.poll_next_unpin(cx)
        };
        match polled {
            Poll::Ready(Some(Ok(batch))) => match self.meter.check(0) {
                Ok(()) => Poll::Ready(Some(Ok(batch))),
                Err(m) => Poll::Ready(Some(Err(DataFusionError::ResourcesExhausted(m)))),
            },
            other => other,
        }
    }
}

impl RecordBatchStream for MeteredStream {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

/// The physical rule that meters a session's plans (the last one, after
/// the plan has its final shape).
#[derive(Debug)]
pub(crate) struct MeterEveryOperator(pub Arc<QueryMeter>);

impl datafusion::physical_optimizer::PhysicalOptimizerRule for MeterEveryOperator {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        meter_plan(plan, &self.0)
    }

    fn name(&self) -> &str {
        "MeterEveryOperator"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Float64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionConfig;

    /// A window aggregate over a frame that grows with each row computes
    /// all of one batch in one poll of its operator: here a median over
    /// 200,000 rows in one batch, 2·10¹⁰ values copied and selected (more
    /// than five minutes in a debug build). Stopped from another thread (as a query is when its task
    /// is aborted), the aggregate's next step refuses, and the query ends
    /// with the stop's error instead of an answer.
    #[test]
    fn a_stopped_query_ends_inside_its_batch() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let meter = QueryMeter::new(1 << 30);
        let config = SessionConfig::new().with_batch_size(1 << 20).with_target_partitions(1);
        let rt = datafusion::execution::runtime_env::RuntimeEnvBuilder::new().build_arc().unwrap();
        let ctx = crate::read::context_with(config, rt, 1 << 30, Some(meter.clone()));
        let rows = 200_000;
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Float64, false)]));
        let values = Float64Array::from_iter_values((0..rows).map(|i| ((i * 7919) % rows) as f64));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(values)]).unwrap();
        ctx.register_table("t", Arc::new(MemTable::try_new(schema, vec![vec![batch]]).unwrap())).unwrap();
        let sql = "SELECT max(m) AS m FROM (SELECT median(v) OVER (ROWS UNBOUNDED PRECEDING) AS m FROM t)";
        let stopper = {
            let meter = meter.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(500));
                meter.stop();
            })
        };
        let answer = runtime.block_on(run(meter.clone(), async { ctx.sql(sql).await?.collect().await }));
        stopper.join().unwrap();
        let e = answer.expect_err("the stopped query answered");
        assert!(e.to_string().contains("median(): the query was stopped"), "{e}");
    }
}
