//! The FlightSQL protocol over [`State`]: statements and prepared
//! statements (`GetFlightInfo` then `DoGet`; a ticket or handle carries the
//! statement, so any replica answers it and each call is authenticated and
//! checked again), DDL as an update, and the metadata a generic client
//! lists views with.

use crate::access::{identify, Caller};
use crate::processes::{self, QueryProcesses};
use crate::state::{Answer, State};
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt,
    SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage,
    SchemaAsIpc, Ticket,
};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use futures::{stream, Stream, StreamExt};
use prost::Message;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use tonic::{Request, Response, Status, Streaming};

/// The catalog and schema every view set is listed in (DataFusion's
/// defaults, so that `datafusion.public.<view>` names one too).
pub const CATALOG: &str = "datafusion";
pub const SCHEMA: &str = "public";

#[derive(Clone)]
pub struct FlightSql {
    pub state: Arc<State>,
    /// Where statements are executed (the front); `None`: here.
    pub queries: Option<Arc<QueryProcesses>>,
    /// Whether this is a query process, whose calls come from its front
    /// (which sets the caller's address and the versions to wait for).
    pub forwarded: bool,
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

fn sql_info() -> &'static SqlInfoData {
    static INFO: OnceLock<SqlInfoData> = OnceLock::new();
    INFO.get_or_init(|| {
        let mut b = SqlInfoDataBuilder::new();
        b.append(SqlInfo::FlightSqlServerName, "micromegas-views-flight");
        b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        b.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
        b.append(SqlInfo::FlightSqlServerReadOnly, false);
        b.append(SqlInfo::FlightSqlServerSql, true);
        b.append(SqlInfo::FlightSqlServerSubstrait, false);
        b.append(SqlInfo::FlightSqlServerTransaction, 0i32);
        b.append(SqlInfo::FlightSqlServerCancel, false);
        b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        b.append(SqlInfo::SqlDdlCatalog, false);
        b.append(SqlInfo::SqlDdlSchema, false);
        b.append(SqlInfo::SqlDdlTable, false);
        b.build().expect("static SqlInfo")
    })
}

/// What GetTableTypes answers: one column of type names.
fn table_types_schema() -> Schema {
    Schema::new(vec![datafusion::arrow::datatypes::Field::new(
        "table_type",
        datafusion::arrow::datatypes::DataType::Utf8,
        false,
    )])
}

fn statement_text(bytes: &[u8]) -> Result<String, Status> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| Status::invalid_argument("the statement handle is not UTF-8 text"))
}

fn encode(schema: Arc<Schema>, batches: impl Stream<Item = Result<RecordBatch, Status>> + Send + 'static) -> DoGetStream {
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        // Dictionaries stay dictionaries: the schema a FlightInfo states
        // is the schema the data comes in.
        .with_dictionary_handling(DictionaryHandling::Resend)
        .build(batches.map(|r| r.map_err(FlightError::from)))
        .map(|r| r.map_err(Status::from));
    Box::pin(stream)
}

fn one_batch<E: std::fmt::Display>(batch: Result<RecordBatch, E>) -> Result<Response<DoGetStream>, Status> {
    let batch = batch.map_err(|e| Status::internal(e.to_string()))?;
    let schema = batch.schema();
    Ok(Response::new(encode(schema, stream::once(async { Ok(batch) }))))
}

fn flight_info(schema: &Schema, ticket: Vec<u8>, descriptor: FlightDescriptor) -> Result<FlightInfo, Status> {
    Ok(FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("cannot encode the schema: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
        .with_descriptor(descriptor))
}

impl FlightSql {
    fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let remote = if self.forwarded {
            processes::peer_of(request.metadata())
        } else {
            request.remote_addr()
        };
        identify(&self.state.settings.keys, &self.state.admins, request.metadata(), remote)
    }

    /// A statement's answer: run in a query process when this service has
    /// them (but DDL, which runs in Postgres), here otherwise.
    async fn statement(&self, request: Request<Ticket>, sql: String) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(&request)?;
        if let Some(queries) = self.planner_elsewhere(&caller, &sql)? {
            return queries.do_get(request, self.state.versions(), self.deadline()).await;
        }
        let deadline = self.local_deadline(request.metadata()).await;
        self.answer(&caller, &sql, deadline).await
    }

    /// The query processes a statement is planned and run in, once it is
    /// admitted here (its size, the deny list, the parse checks: refused
    /// before it takes a process); `None` for DDL, which runs in Postgres
    /// from here, and in a query process itself.
    fn planner_elsewhere(&self, caller: &Caller, sql: &str) -> Result<Option<&Arc<QueryProcesses>>, Status> {
        let Some(queries) = &self.queries else {
            return Ok(None);
        };
        Ok(self.state.admit(caller, sql)?.is_none().then_some(queries))
    }

    /// A new statement's deadline.
    fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.state.settings.query_timeout
    }

    /// The deadline of a statement run here: in a query process, the one
    /// its front forwarded, after reaching the versions the front holds.
    async fn local_deadline(&self, metadata: &tonic::metadata::MetadataMap) -> tokio::time::Instant {
        let mut deadline = self.deadline();
        if self.forwarded {
            if let Some(left) = processes::time_left_of(metadata) {
                deadline = deadline.min(tokio::time::Instant::now() + left);
            }
            if let Some(versions) = processes::versions_of(metadata) {
                self.state.reach_versions(versions, std::time::Duration::from_secs(2)).await;
            }
        }
        deadline
    }

    /// A metadata command's FlightInfo: the caller checked, the builder's
    /// schema, the command itself as the ticket.
    fn metadata_info(
        &self,
        request: Request<FlightDescriptor>,
        schema: &Schema,
        command: Vec<u8>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        Ok(Response::new(flight_info(schema, command, request.into_inner())?))
    }

    async fn answer(&self, caller: &Caller, sql: &str, deadline: tokio::time::Instant) -> Result<Response<DoGetStream>, Status> {
        let answer = self.state.execute(caller, sql, deadline).await?;
        let schema = answer.schema.clone();
        Ok(Response::new(encode(schema, batches_of(answer))))
    }
}

/// The batches of an answer until it ends, fails or passes its deadline
/// (then one DEADLINE_EXCEEDED); dropping the stream drops the answer,
/// which aborts the query's work.
fn batches_of(answer: Answer) -> impl Stream<Item = Result<RecordBatch, Status>> + Send + 'static {
    stream::unfold(Some(answer), |state| async move {
        let mut answer = state?;
        let next = match &answer.deadline {
            Some((deadline, status)) => match tokio::time::timeout_at(*deadline, answer.batches.recv()).await {
                Ok(next) => next,
                Err(_) => Some(Err(status.clone())),
            },
            None => answer.batches.recv().await,
        };
        match next {
            None => None,
            Some(Err(e)) => Some((Err(e), None)),
            Some(Ok(batch)) => Some((Ok(batch), Some(answer))),
        }
    })
}

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    /// Basic credentials whose password is a key answer that key as the
    /// bearer token (what ADBC's username/password option expects); a
    /// bearer key is echoed back.
    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let token = match header.split_once(' ') {
            Some((scheme, encoded)) if scheme.eq_ignore_ascii_case("basic") => {
                use base64::Engine;
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .map_err(|_| Status::unauthenticated("the Basic credentials are not base64"))?;
                let text = String::from_utf8(decoded)
                    .map_err(|_| Status::unauthenticated("the Basic credentials are not text"))?;
                text.split_once(':').map(|(_, p)| p.to_string()).unwrap_or(text)
            }
            Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim().to_string(),
            _ => return Err(Status::unauthenticated("missing credentials: send authorization: Bearer <key>")),
        };
        self.state
            .settings
            .keys
            .find(&token)
            .ok_or_else(|| Status::unauthenticated("invalid API key"))?;
        let bearer = format!("Bearer {token}");
        let output = stream::iter(vec![Ok(HandshakeResponse {
            protocol_version: 0,
            payload: token.into_bytes().into(),
        })]);
        let mut response: Response<Pin<Box<dyn Stream<Item = _> + Send>>> = Response::new(Box::pin(output));
        response.metadata_mut().insert(
            "authorization",
            bearer.parse().map_err(|_| Status::unauthenticated("invalid API key"))?,
        );
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.caller(&request)?;
        if let Some(queries) = self.planner_elsewhere(&caller, &query.query)? {
            return queries.get_flight_info(request, self.state.versions(), self.deadline()).await;
        }
        let deadline = self.local_deadline(request.metadata()).await;
        let schema = self.state.describe_statement(&caller, &query.query, deadline).await?;
        let ticket = TicketStatementQuery {
            statement_handle: query.query.into_bytes().into(),
        };
        let info = flight_info(&schema, ticket.as_any().encode_to_vec(), request.into_inner())?;
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let sql = statement_text(&ticket.statement_handle)?;
        self.statement(request, sql).await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let caller = self.caller(&request)?;
        if let Some(queries) = self.planner_elsewhere(&caller, &query.query)? {
            let results = queries.do_action(request, self.state.versions(), self.deadline()).await?;
            let first = results
                .first()
                .ok_or_else(|| Status::internal("the query process answered no prepared statement"))?;
            return Any::decode(&*first.body)
                .ok()
                .and_then(|any| any.unpack::<ActionCreatePreparedStatementResult>().ok().flatten())
                .ok_or_else(|| Status::internal("the query process answered something else than a prepared statement"));
        }
        let deadline = self.local_deadline(request.metadata()).await;
        let schema = self.state.describe_statement(&caller, &query.query, deadline).await?;
        let options = IpcWriteOptions::default();
        let IpcMessage(dataset_schema) = SchemaAsIpc::new(&schema, &options)
            .try_into()
            .map_err(|e: datafusion::arrow::error::ArrowError| Status::internal(e.to_string()))?;
        let parameters = SchemaAsIpc::new(&Schema::empty(), &options)
            .try_into()
            .map(|IpcMessage(b)| b)
            .map_err(|e: datafusion::arrow::error::ArrowError| Status::internal(e.to_string()))?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: query.query.into_bytes().into(),
            dataset_schema,
            parameter_schema: parameters,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<(), Status> {
        // The handle is the statement itself: nothing is held to free.
        self.caller(&request)?;
        Ok(())
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.caller(&request)?;
        let sql = statement_text(&query.prepared_statement_handle)?;
        if let Some(queries) = self.planner_elsewhere(&caller, &sql)? {
            return queries.get_flight_info(request, self.state.versions(), self.deadline()).await;
        }
        let deadline = self.local_deadline(request.metadata()).await;
        let schema = self.state.describe_statement(&caller, &sql, deadline).await?;
        let info = flight_info(&schema, query.as_any().encode_to_vec(), request.into_inner())?;
        Ok(Response::new(info))
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let sql = statement_text(&query.prepared_statement_handle)?;
        self.statement(request, sql).await
    }

    /// Parameters are not supported: a statement carries its values.
    async fn do_put_prepared_statement_query(
        &self,
        _query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        self.caller(&request)?;
        Err(Status::unimplemented(
            "bound parameters are not supported: write the values into the statement",
        ))
    }

    /// `CREATE [OR REPLACE] MATERIALIZED VIEW` and `DROP MATERIALIZED VIEW`
    /// sent as an update: one row affected.
    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let caller = self.caller(&request)?;
        if crate::functions::ddl_kind(&command.query).is_none() {
            return Err(Status::invalid_argument(
                "only CREATE [OR REPLACE] MATERIALIZED VIEW and DROP MATERIALIZED VIEW are updates; send a query as a statement query",
            ));
        }
        let deadline = tokio::time::Instant::now() + self.state.settings.query_timeout;
        let mut answer = self.state.execute(&caller, &command.query, deadline).await?;
        while let Some(batch) = answer.batches.recv().await {
            batch?;
        }
        Ok(1)
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.metadata_info(request, &schema, query.as_any().encode_to_vec())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        let mut builder = query.into_builder();
        builder.append(CATALOG);
        one_batch(builder.build())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.metadata_info(request, &schema, query.as_any().encode_to_vec())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        let mut builder = query.into_builder();
        builder.append(CATALOG, SCHEMA);
        one_batch(builder.build())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.metadata_info(request, &schema, query.as_any().encode_to_vec())
    }

    /// Every view set a query can name, with its stored schema.
    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        let sets = self.state.view_sets().await?;
        let mut builder = query.into_builder();
        for set in sets.iter() {
            builder
                .append(CATALOG, SCHEMA, &set.name, "TABLE", &set.schema)
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.metadata_info(request, &table_types_schema(), query.as_any().encode_to_vec())
    }

    async fn do_get_table_types(
        &self,
        _query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        one_batch(RecordBatch::try_new(
            Arc::new(table_types_schema()),
            vec![Arc::new(datafusion::arrow::array::StringArray::from(vec!["TABLE"]))],
        ))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(sql_info()).schema();
        self.metadata_info(request, &schema, query.as_any().encode_to_vec())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        one_batch(query.into_builder(sql_info()).build())
    }

    async fn do_get_fallback(
        &self,
        request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        Err(Status::unimplemented(format!("unsupported ticket: {}", message.type_url)))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
