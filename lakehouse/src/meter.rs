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

pub use micromegas_views_core::meter::{installed, MeteredAllocator, QueryMeter as Meter};

/// Runs `work` with every poll attributed to `meter`'s query.
pub async fn run<F: Future>(meter: Arc<QueryMeter>, work: F) -> F::Output {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(move |cx| {
        let _in = meter.enter();
        work.as_mut().poll(cx)
    })
    .await
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
        let inner = {
            let _in = self.meter.enter();
            self.input.execute(partition, context)?
        };
        Ok(Box::pin(MeteredStream { inner, meter: self.meter.clone() }))
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
}

impl Stream for MeteredStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = {
            let _in = self.meter.enter();
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
