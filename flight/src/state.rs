//! The service's state: the key file, the live catalog, deny list and
//! audience grants, the Postgres pools, and how one statement is run —
//! denied or not, as DDL in Postgres, or planned and executed by
//! DataFusion on the query runtime with its own memory pool and deadline.

use crate::access::{is_admin_recovery, Caller};
use crate::functions::{self, Call, Ddl, Prefetched, ADMIN_FUNCTIONS, READER_FUNCTIONS};
use crate::tables::LakeSchema;
use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::SessionContext;
use datafusion::execution::context::SQLOptions;
use futures::FutureExt;
use futures::StreamExt;
use micromegas_views_client::keys::KeyFile;
use micromegas_views_client::{
    AudienceGrants, Config, Definitions, DenyList, DenyMatcher, Source, Watching,
};
use micromegas_views_lakehouse::catalog::{self, ViewSet};
use micromegas_views_lakehouse::lake::Lake;
use micromegas_views_lakehouse::meter::{self, Meter};
use micromegas_views_lakehouse::read::{self, CheckedFiles};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tonic::Status;

/// How the service runs.
pub struct Settings {
    pub lake: Lake,
    /// Writes (DDL, admin functions, deny hits): the primary.
    pub primary: deadpool_postgres::Pool,
    /// Reads of the catalog (may be a hot standby).
    pub catalog: deadpool_postgres::Pool,
    pub catalog_dsn: String,
    pub keys: KeyFile,
    /// Memory one query's operators may use (DataFusion's memory pool).
    pub query_memory_bytes: usize,
    /// A query is stopped past this, planning and streaming included.
    pub query_timeout: Duration,
    /// Postgres statements of a request are cancelled past this.
    pub statement_timeout: Duration,
    /// Queries planned or executing at once; the others wait their turn.
    pub max_concurrent_queries: usize,
    /// The longest statement taken, in bytes.
    pub max_statement_bytes: usize,
    /// The most tables and SELECT blocks a statement may hold.
    pub max_query_shape: micromegas_views_core::planner::QueryShape,
    /// Whether the definitions, deny list and grants are watched (a
    /// connection each: `LISTEN`, polling as a fallback). A query process
    /// does not watch: each call says which versions it must have reached,
    /// and it loads them then.
    pub watch: bool,
}

/// A value loaded once before serving, then kept current by a watcher
/// (`LISTEN`, polling as a fallback) or, without one, loaded again when a
/// later version is asked for ([`Live::reach`]).
pub struct Live<S: Source> {
    current: Arc<RwLock<Arc<S::Value>>>,
    _watching: Option<Watching<S>>,
}

impl<S: Source> Live<S> {
    /// `watch`: `Some(config)` to keep it current with a watcher of its
    /// own (one connection), `None` to load it again only when asked.
    pub async fn start(client: &tokio_postgres::Client, watch: Option<Config>) -> Result<Self, String> {
        let first = S::load(client)
            .await
            .map_err(|e| format!("cannot load the {}: {}", S::NAME, crate::describe_db_error(&e)))?;
        let current = Arc::new(RwLock::new(Arc::new(first)));
        let watching = watch.map(|config| {
            let watching = Watching::<S>::spawn(config);
            let mut receiver = watching.subscribe();
            let target = current.clone();
            tokio::spawn(async move {
                while receiver.changed().await.is_ok() {
                    let value = receiver.borrow_and_update().clone();
                    let mut current = target.write().expect("live lock");
                    if S::version_of(&value) >= S::version_of(&current) {
                        *current = value;
                    }
                }
            });
            watching
        });
        Ok(Live {
            current,
            _watching: watching,
        })
    }

    pub fn get(&self) -> Arc<S::Value> {
        self.current.read().expect("live lock").clone()
    }

    /// Waits (at most `limit`) until the value is at `version` or later.
    pub async fn wait_for(&self, version: i64, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if S::version_of(&self.get()) >= version {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Brings the value to `version` or later (at most `limit`): waits for
    /// the watcher, or, without one, loads it from `pool` until it is
    /// there (a hot standby may not have replayed it yet).
    pub async fn reach(&self, version: i64, pool: &deadpool_postgres::Pool, limit: Duration) -> bool {
        if self._watching.is_some() {
            return self.wait_for(version, limit).await;
        }
        let deadline = Instant::now() + limit;
        loop {
            if S::version_of(&self.get()) >= version {
                return true;
            }
            if let Ok(object) = pool.get().await {
                match S::load(&object).await {
                    Ok(value) => {
                        let mut current = self.current.write().expect("live lock");
                        if S::version_of(&value) >= S::version_of(&current) {
                            *current = Arc::new(value);
                        }
                    }
                    Err(e) => tracing::warn!("cannot load the {}: {}", S::NAME, crate::describe_db_error(&e)),
                }
            }
            if S::version_of(&self.get()) >= version {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub struct State {
    pub settings: Settings,
    /// Whether each key role is a member of micromegas_admin.
    pub admins: HashMap<String, bool>,
    pub definitions: Live<Definitions>,
    pub deny: Live<DenyList>,
    pub grants: Live<AudienceGrants>,
    matcher: Mutex<Option<Arc<DenyMatcher>>>,
    sets: Mutex<Option<(i64, Arc<Vec<ViewSet>>)>>,
    checked: CheckedFiles,
    permits: Arc<Semaphore>,
    /// DataFusion's work runs here, apart from the runtime that answers
    /// calls: a heavy query does not stall another client's metadata call.
    query_runtime: tokio::runtime::Handle,
}

/// A statement's answer: its schema and its batches as they come.
pub struct Answer {
    pub schema: SchemaRef,
    pub batches: mpsc::Receiver<Result<RecordBatch, Status>>,
    /// When the batches must have come, and what to answer past it.
    pub deadline: Option<(Instant, Status)>,
    /// Aborts the query's work when the answer is dropped.
    pub _task: Option<AbortOnDrop>,
}

impl State {
    pub async fn start(settings: Settings, query_runtime: tokio::runtime::Handle) -> Result<State, String> {
        let object = settings
            .primary
            .get()
            .await
            .map_err(|e| format!("cannot connect to the primary: {e}"))?;
        let mut admins = HashMap::new();
        for key in &settings.keys.keys {
            let row = object
                .query_one(
                    "SELECT pg_has_role($1::text::name, 'micromegas_admin', 'MEMBER'), \
                            pg_has_role(current_user, $1::text::name, 'MEMBER')",
                    &[&key.role],
                )
                .await
                .map_err(|e| format!("key \"{}\": role \"{}\": {}", key.name, key.role, crate::describe_db_error(&e)))?;
            let (admin, reachable): (bool, bool) = (row.get(0), row.get(1));
            if !reachable {
                return Err(format!(
                    "key \"{}\": the service's login role cannot SET ROLE to \"{}\" (GRANT \"{}\" TO the login role)",
                    key.name, key.role, key.role
                ));
            }
            if let Some(claimed) = key.claims.admin {
                if claimed != admin {
                    return Err(format!(
                        "key \"{}\": its claims say admin={claimed} but role \"{}\" is {}a member of micromegas_admin",
                        key.name,
                        key.role,
                        if admin { "" } else { "not " }
                    ));
                }
            }
            admins.insert(key.role.clone(), admin);
        }
        drop(object);
        let catalog = settings
            .catalog
            .get()
            .await
            .map_err(|e| format!("cannot connect to the catalog: {e}"))?;
        let config = settings.watch.then(|| Config::new(settings.catalog_dsn.clone()));
        let definitions = Live::start(&catalog, config.clone()).await?;
        let deny = Live::start(&catalog, config.clone()).await?;
        let grants = Live::start(&catalog, config).await?;
        drop(catalog);
        let permits = Arc::new(Semaphore::new(settings.max_concurrent_queries.max(1)));
        let state = State {
            settings,
            admins,
            definitions,
            deny,
            grants,
            matcher: Mutex::new(None),
            sets: Mutex::new(None),
            checked: CheckedFiles::default(),
            permits,
            query_runtime,
        };
        state.view_sets().await.map_err(|e| e.message().to_string())?;
        Ok(state)
    }

    /// The versions of the definitions, the deny list and the grants held.
    pub fn versions(&self) -> [i64; 3] {
        [
            self.definitions.get().version,
            self.deny.get().version,
            self.grants.get().version,
        ]
    }

    /// Brings the definitions, the deny list and the grants to `versions`
    /// or later (at most `limit` for each).
    pub async fn reach_versions(&self, versions: [i64; 3], limit: Duration) {
        let pool = &self.settings.catalog;
        self.definitions.reach(versions[0], pool, limit).await;
        self.deny.reach(versions[1], pool, limit).await;
        self.grants.reach(versions[2], pool, limit).await;
    }

    /// Every view set, from the live definitions and the built-ins.
    pub async fn view_sets(&self) -> Result<Arc<Vec<ViewSet>>, Status> {
        let snapshot = self.definitions.get();
        if let Some((version, sets)) = &*self.sets.lock().expect("sets lock") {
            if *version == snapshot.version {
                return Ok(sets.clone());
            }
        }
        let object = self.settings.catalog.get().await.map_err(pool_status)?;
        let builtins = catalog::builtins(&object).await.map_err(lake_status)?;
        let sets = Arc::new(catalog::combine(&snapshot.views, builtins).map_err(lake_status)?);
        *self.sets.lock().expect("sets lock") = Some((snapshot.version, sets.clone()));
        Ok(sets)
    }

    /// The compiled deny list, rebuilt when its version moves; a list that
    /// does not compile keeps the last good one.
    fn matcher(&self) -> Option<Arc<DenyMatcher>> {
        let snapshot = self.deny.get();
        let mut current = self.matcher.lock().expect("matcher lock");
        if current.as_ref().map(|m| m.version()) != Some(snapshot.version) {
            match DenyMatcher::new(&snapshot) {
                Ok(m) => *current = Some(Arc::new(m)),
                Err(e) => tracing::error!(version = snapshot.version, "the deny list does not compile, keeping the last good one: {e}"),
            }
        }
        current.clone()
    }

    /// Refuses a statement a deny rule matches (RESOURCE_EXHAUSTED, naming
    /// the rule and its reason) and records the hit; an admin's recovery
    /// statements pass.
    pub fn check_denied(&self, caller: &Caller, sql: &str) -> Result<(), Status> {
        if is_admin_recovery(caller, sql) {
            return Ok(());
        }
        let Some(matcher) = self.matcher() else {
            return Ok(());
        };
        let mut attributes = caller.attributes.clone();
        attributes.sql_hash = micromegas_views_core::deny::sql_hash(sql).ok();
        attributes.sql = Some(sql.to_string());
        let rule = match matcher.first_denial(&attributes) {
            Ok(Some(rule)) => rule.clone(),
            Ok(None) => return Ok(()),
            // Not checked is not allowed: the statement is refused.
            Err(e) => return Err(Status::invalid_argument(format!("the statement could not be checked against the deny list: {e}"))),
        };
        let pool = self.settings.primary.clone();
        let id = rule.rule_id.clone();
        tokio::spawn(async move {
            let recorded = async {
                let object = pool.get().await.map_err(|e| e.to_string())?;
                object
                    .execute(
                        "SELECT micromegas.mm_record_query_denial_hits($1::text[]::uuid[], now())",
                        &[&vec![id.clone()]],
                    )
                    .await
                    .map_err(|e| crate::describe_db_error(&e))
            };
            if let Err(e) = recorded.await {
                tracing::warn!(rule = %id, "cannot record a deny hit: {e}");
            }
        });
        tracing::info!(rule = %rule.rule_id, key = %caller.key.name, "query denied");
        Err(Status::resource_exhausted(format!(
            "query denied by rule {}: {}",
            rule.rule_id, rule.reason
        )))
    }

    /// A transaction on the primary as the caller: its key's role, its
    /// key's name as the actor, the service's statement timeout.
    async fn as_caller<'a>(
        &self,
        object: &'a mut deadpool_postgres::Object,
        caller: &Caller,
    ) -> Result<deadpool_postgres::Transaction<'a>, Status> {
        let tx = object.transaction().await.map_err(|e| db_status(&e))?;
        let timeout = format!("{}ms", self.settings.statement_timeout.as_millis());
        tx.execute(
            "SELECT set_config('micromegas_views.actor', $1, true), set_config('statement_timeout', $2, true), \
                    set_config('standard_conforming_strings', 'on', true), set_config('role', $3, true)",
            &[&caller.key.name, &timeout, &caller.key.role],
        )
        .await
        .map_err(|e| db_status(&e))?;
        Ok(tx)
    }

    /// Runs a DDL statement with the extension's function under the
    /// caller's role and answers its one row; once committed, waits (up to
    /// two seconds) for the live catalog to hold it, so that the caller's
    /// next query sees it.
    pub async fn run_ddl(&self, caller: &Caller, kind: Ddl, sql: &str) -> Result<RecordBatch, Status> {
        let function = match kind {
            Ddl::Create => "mm_create_view",
            Ddl::Drop => "mm_drop_view",
        };
        let mut object = self.settings.primary.get().await.map_err(pool_status)?;
        let tx = self.as_caller(&mut object, caller).await?;
        let row = tx
            .query_one(
                &format!("SELECT view_set_name::text, status::text, version FROM micromegas.{function}($1)"),
                &[&sql],
            )
            .await
            .map_err(|e| db_status(&e))?;
        tx.commit().await.map_err(|e| db_status(&e))?;
        let (name, status, version): (Option<String>, Option<String>, Option<i64>) =
            (row.get(0), row.get(1), row.get(2));
        if let Some(v) = version {
            self.definitions.wait_for(v, Duration::from_secs(2)).await;
        }
        RecordBatch::try_new(
            functions::ddl_schema(),
            vec![
                Arc::new(StringArray::from(vec![name])),
                Arc::new(StringArray::from(vec![status])),
            ],
        )
        .map_err(|e| Status::internal(e.to_string()))
    }

    /// The table functions a caller has, with the calls `sql` makes run
    /// (`execute`) or only described, in one transaction as the caller.
    async fn table_functions(
        &self,
        caller: &Caller,
        sql: &str,
        execute: bool,
    ) -> Result<Vec<Prefetched>, Status> {
        let mut names: Vec<&str> = READER_FUNCTIONS.to_vec();
        if caller.admin {
            names.extend(ADMIN_FUNCTIONS);
        }
        let calls: Vec<Call> = functions::calls(sql, &names).map_err(Status::invalid_argument)?;
        let mut out: Vec<Prefetched> = names
            .iter()
            .map(|n| Prefetched {
                name: n.to_string(),
                tables: HashMap::new(),
            })
            .collect();
        if calls.is_empty() {
            return Ok(out);
        }
        let mut object = self.settings.primary.get().await.map_err(pool_status)?;
        let tx = self.as_caller(&mut object, caller).await?;
        for call in calls {
            let (select, schema) = functions::describe(&tx, &call.postgres_sql())
                .await
                .map_err(|e| db_status(&e))?;
            let batches = if execute {
                let rows = tx.query(&select, &[]).await.map_err(|e| db_status(&e))?;
                vec![functions::to_batch(&schema, &rows).map_err(|e| Status::internal(e.to_string()))?]
            } else {
                vec![]
            };
            let table = MemTable::try_new(schema, vec![batches]).map_err(df_status)?;
            let f = out.iter_mut().find(|f| f.name == call.name).expect("a known function");
            f.tables.insert(call.args, Arc::new(table));
        }
        tx.commit().await.map_err(|e| db_status(&e))?;
        Ok(out)
    }

    /// A session for one statement of `caller`, its plans metered by
    /// `meter`: the query may hold `--query-memory-mb` in all, of which its
    /// operators' buffers (sorts, joins, aggregations) may take half in
    /// DataFusion's pool before they spill or fail.
    async fn session(&self, caller: &Caller, sql: &str, execute: bool, meter: &Arc<Meter>) -> Result<SessionContext, Status> {
        let sets = self.view_sets().await?;
        let readable = caller
            .readable_audiences(&self.grants.get())
            .map(Arc::new);
        let cap = self.settings.query_memory_bytes;
        let ctx = read::new_metered_context(cap, meter.clone());
        self.settings.lake.register(&ctx);
        let inner = read::context_with(ctx.copied_config(), ctx.runtime_env(), cap, Some(meter.clone()));
        let schema = LakeSchema::new(
            self.settings.lake.clone(),
            self.settings.catalog.clone(),
            sets,
            self.checked.clone(),
            readable,
            inner,
        );
        ctx.catalog("datafusion")
            .expect("the default catalog")
            .register_schema("public", Arc::new(schema))
            .map_err(df_status)?;
        for f in self.table_functions(caller, sql, execute).await? {
            ctx.register_udtf(&f.name.clone(), Arc::new(f));
        }
        Ok(ctx)
    }

    /// What every statement goes through first: its size, the deny list,
    /// then (a query) the parse checks of the extension's planner — one
    /// query, read-only (no EXPLAIN, SET, COPY or DDL of DataFusion's), not
    /// nested past its limits.
    pub fn admit(&self, caller: &Caller, sql: &str) -> Result<Option<Ddl>, Status> {
        if sql.len() > self.settings.max_statement_bytes {
            return Err(Status::invalid_argument(format!(
                "the statement is {} bytes; this service takes at most {} bytes",
                sql.len(),
                self.settings.max_statement_bytes
            )));
        }
        self.check_denied(caller, sql)?;
        if let Some(kind) = functions::ddl_kind(sql) {
            return Ok(Some(kind));
        }
        let query = micromegas_views_core::planner::parse_query("the statement", sql).map_err(|e| {
            let mut message = e.message.clone();
            if e.kind == micromegas_views_core::ErrorKind::TooComplex {
                if let Some(d) = &e.detail {
                    message.push_str(&format!(" ({d})"));
                }
            }
            Status::invalid_argument(message)
        })?;
        // Planning cannot be stopped part way: its size is bounded first.
        let shape = micromegas_views_core::planner::query_shape(&query);
        let max = self.settings.max_query_shape;
        for (what, count, limit, flag) in [
            ("tables", shape.tables, max.tables, "--max-query-tables"),
            ("SELECT and VALUES blocks", shape.selects, max.selects, "--max-query-selects"),
            ("expressions", shape.expressions, max.expressions, "--max-query-expressions"),
        ] {
            if count > limit {
                return Err(Status::invalid_argument(format!(
                    "the statement has {count} {what}; this service plans at most {limit} ({flag}): \
                     split it, or aggregate in a materialized view"
                )));
            }
        }
        Ok(None)
    }

    /// The schema a statement answers with (nothing is run: a DDL
    /// statement's fixed schema, a query planned with its table functions
    /// described).
    pub async fn describe_statement(self: &Arc<Self>, caller: &Caller, sql: &str, deadline: Instant) -> Result<SchemaRef, Status> {
        if self.admit(caller, sql)?.is_some() {
            return Ok(functions::ddl_schema());
        }
        let permit = self.acquire(deadline).await?;
        let state = self.clone();
        let caller = caller.clone();
        let sql = sql.to_string();
        let meter = self.meter();
        let stop = meter.clone();
        let task = self.query_runtime.spawn(meter::run(meter.clone(), async move {
            // The slot is the task's: planning that outlives its deadline
            // (it cannot be stopped mid-way) still counts against the limit.
            let _permit = permit;
            let ctx = state.session(&caller, &sql, false, &meter).await?;
            let df = ctx.sql_with_options(&sql, sql_options()).await.map_err(df_status)?;
            let plan = df.create_physical_plan().await.map_err(df_status)?;
            Ok(wire_schema(&plan.schema()))
        }));
        let abort = AbortOnDrop(task.abort_handle(), stop);
        let answer = tokio::time::timeout_at(deadline, task).await;
        drop(abort);
        match answer {
            Err(_) => Err(timeout_status(self.settings.query_timeout)),
            Ok(Err(e)) => Err(Status::internal(format!("the query failed: {e}"))),
            Ok(Ok(result)) => result,
        }
    }

    /// Runs a statement: DDL in Postgres, a query on the query runtime,
    /// until `deadline`. The deadline and the slot are kept here, on the
    /// runtime that answers calls (a busy query runtime cannot delay them);
    /// the query's task is aborted at the deadline, on an error, or when the
    /// caller goes away.
    pub async fn execute(self: &Arc<Self>, caller: &Caller, sql: &str, deadline: Instant) -> Result<Answer, Status> {
        if let Some(kind) = self.admit(caller, sql)? {
            let batch = self.run_ddl(caller, kind, sql).await?;
            let (sender, batches) = mpsc::channel(1);
            let schema = batch.schema();
            sender.send(Ok(batch)).await.ok();
            return Ok(Answer {
                schema,
                batches,
                deadline: None,
                _task: None,
            });
        }
        let permit = self.acquire(deadline).await?;
        let state = self.clone();
        let caller = caller.clone();
        let sql = sql.to_string();
        let (sender, batches) = mpsc::channel::<Result<RecordBatch, Status>>(2);
        let (schema_sender, schema) = oneshot::channel::<Result<SchemaRef, Status>>();
        let meter = self.meter();
        let stop = meter.clone();
        // A panic in the query's work (DataFusion's, or a task it spawned)
        // ends the answer with an error: without it the channel would just
        // close, which reads as the end of a complete answer.
        let on_panic = sender.clone();
        let work = async move {
            let _permit = permit;
            let started = async {
                let ctx = state.session(&caller, &sql, true, &meter).await?;
                let df = ctx.sql_with_options(&sql, sql_options()).await.map_err(df_status)?;
                df.execute_stream().await.map_err(df_status)
            };
            let mut stream: SendableRecordBatchStream = match started.await {
                Ok(s) => s,
                Err(e) => {
                    schema_sender.send(Err(e)).ok();
                    return;
                }
            };
            let schema = wire_schema(&stream.schema());
            if schema_sender.send(Ok(schema.clone())).is_err() {
                return;
            }
            while let Some(next) = stream.next().await {
                let item = next
                    .map_err(df_status)
                    .and_then(|b| relabel(&schema, b));
                let stop = item.is_err();
                if sender.send(item).await.is_err() || stop {
                    return;
                }
            }
        };
        let task = self.query_runtime.spawn(meter::run(stop.clone(), async move {
            if let Err(panic) = std::panic::AssertUnwindSafe(work).catch_unwind().await {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(panic = %what, "a query's work panicked");
                on_panic
                    .send(Err(Status::internal(format!("the query failed: the query engine panicked: {what}"))))
                    .await
                    .ok();
            }
        }));
        let task = AbortOnDrop(task.abort_handle(), stop);
        let schema = match tokio::time::timeout_at(deadline, schema).await {
            Err(_) => return Err(timeout_status(self.settings.query_timeout)),
            Ok(Err(_)) => return Err(Status::internal("the query ended before it answered")),
            Ok(Ok(schema)) => schema?,
        };
        Ok(Answer {
            schema,
            batches,
            deadline: Some((deadline, timeout_status(self.settings.query_timeout))),
            _task: Some(task),
        })
    }

    /// The meter of one statement: what it holds, counted at every
    /// allocation, may not pass `--query-memory-mb`.
    fn meter(&self) -> Arc<Meter> {
        let meter = Meter::new(self.settings.query_memory_bytes as u64);
        if !meter.counted() && meter::installed() {
            tracing::warn!("no memory meter left for a query: it runs bounded by its pool only");
        }
        meter
    }

    /// A query slot, waited for until `deadline`.
    async fn acquire(&self, deadline: Instant) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        acquire(&self.permits, deadline).await
    }
}

/// Stops a query and aborts its task when dropped: the answer's stream
/// ended, failed, passed its deadline or was dropped by a caller who went
/// away. The meter is stopped first, from here: an aborted task ends only
/// when its current poll returns, and a poll computing one batch of an
/// operator returns at the next check of the query's meter
/// (`micromegas_views_core::meter`).
pub struct AbortOnDrop(tokio::task::AbortHandle, Arc<Meter>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.1.stop();
        self.0.abort();
    }
}

/// The schema a statement is announced and sent with: the executed plan's
/// types with every column nullable. DataFusion's logical and physical
/// plans may disagree on a column's nullability, and a client compares the
/// announced schema with the streamed one.
fn wire_schema(schema: &SchemaRef) -> SchemaRef {
    Arc::new(Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    ))
}

fn relabel(schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch, Status> {
    RecordBatch::try_new_with_options(
        schema.clone(),
        batch.columns().to_vec(),
        &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(|e| Status::internal(format!("the answer does not fit its schema: {e}")))
}

async fn acquire(
    permits: &Arc<Semaphore>,
    deadline: Instant,
) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
    tokio::time::timeout_at(deadline, permits.clone().acquire_owned())
        .await
        .map_err(|_| Status::resource_exhausted("too many queries running: none finished before this one's deadline"))?
        .map_err(|_| Status::unavailable("the service is stopping"))
}

/// What a statement past the service's query timeout answers.
pub fn timeout_status(timeout: Duration) -> Status {
    Status::deadline_exceeded(format!(
        "the query ran past the service's query timeout ({} s)",
        timeout.as_secs_f64()
    ))
}

/// Queries only: no DDL, no DML, no SET or other statement of DataFusion's
/// own (the catalog's DDL is recognised before planning).
fn sql_options() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
}

/// A DataFusion error as a gRPC status: what the caller wrote wrong is
/// INVALID_ARGUMENT, memory past the pool RESOURCE_EXHAUSTED.
pub fn df_status(e: DataFusionError) -> Status {
    let root = e.find_root();
    match root {
        DataFusionError::ResourcesExhausted(m) => Status::resource_exhausted(format!("the query needs more memory than a query may use: {m}")),
        DataFusionError::Plan(_)
        | DataFusionError::SQL(..)
        | DataFusionError::SchemaError(..)
        | DataFusionError::NotImplemented(_)
        | DataFusionError::ArrowError(..) => Status::invalid_argument(root.to_string()),
        _ => Status::internal(e.to_string()),
    }
}

fn lake_status(e: micromegas_views_lakehouse::Error) -> Status {
    Status::internal(e.message)
}

fn pool_status(e: deadpool_postgres::PoolError) -> Status {
    Status::unavailable(format!("the database is unavailable: {e}"))
}

/// A Postgres error as a gRPC status, by SQLSTATE class, with the
/// extension's message (and its DETAIL and HINT).
pub fn db_status(e: &tokio_postgres::Error) -> Status {
    let Some(db) = e.as_db_error() else {
        return Status::unavailable(format!("the database is unavailable: {e}"));
    };
    let message = crate::describe_db_error(e);
    let code = db.code().code();
    match code {
        "42501" => Status::permission_denied(message),
        "42704" | "P0002" => Status::not_found(message),
        "42710" | "23505" | "42P07" => Status::already_exists(message),
        "57014" => Status::deadline_exceeded(message),
        "40001" | "40P01" | "55P03" => Status::aborted(message),
        c if c.starts_with("53") || c.starts_with("54") => Status::resource_exhausted(message),
        c if c.starts_with("22") || c.starts_with("42") => Status::invalid_argument(message),
        c if c.starts_with("08") || c.starts_with("57") => Status::unavailable(message),
        _ => Status::internal(message),
    }
}
