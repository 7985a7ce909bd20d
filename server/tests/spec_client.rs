//! The server as the Lance Namespace spec's own generated Rust client
//! (`lance-namespace-reqwest-client` 0.13.0) sees it: every operation the
//! server implements, through the client's functions and models, and the
//! error codes they answer with (MMV_TEST_DSN; scripts/test.sh sets it).

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use base64::Engine;
use lance_namespace_reqwest_client::apis::configuration::{ApiKey as ClientKey, Configuration};
use lance_namespace_reqwest_client::apis::{
    materialized_view_api, namespace_api, table_api, Error,
};
use lance_namespace_reqwest_client::models;
use micromegas_views_server::{app, pool, ApiKey, Config, KeyFile};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::NoTls;

const ADMIN_KEY: &str = "spec-admin-key-0123456789";
const READER_KEY: &str = "spec-reader-key-0123456789";

fn dsn() -> String {
    std::env::var("MMV_TEST_DSN").expect("MMV_TEST_DSN must name a database with micromegas_views")
}

async fn psql(sql: &str) {
    let (client, connection) = tokio_postgres::connect(&dsn(), NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute(sql).await.unwrap();
}

async fn serve(request_timeout: Duration, body_limit: usize) -> String {
    let keys = KeyFile {
        keys: vec![
            ApiKey {
                name: "spec-admin".into(),
                key: ADMIN_KEY.into(),
                role: "mmv_spec_admin".into(),
                claims: Default::default(),
            },
            ApiKey {
                name: "spec-reader".into(),
                key: READER_KEY.into(),
                role: "mmv_spec_reader".into(),
                claims: Default::default(),
            },
        ],
    };
    let router = app(
        pool(&dsn(), 4).unwrap(),
        Config {
            namespace: vec!["micromegas".into()],
            keys: Some(keys),
            statement_timeout: Duration::from_secs(10),
            request_timeout,
            body_limit,
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{address}")
}

/// A client configuration: the key as the spec's x-api-key header, or as a
/// bearer token, or none.
fn client(base: &str, key: Option<&str>, bearer: bool) -> Configuration {
    let mut c = Configuration::new();
    c.base_path = base.to_string();
    match (key, bearer) {
        (Some(k), true) => c.bearer_access_token = Some(k.to_string()),
        (Some(k), false) => {
            c.api_key = Some(ClientKey {
                prefix: None,
                key: k.to_string(),
            })
        }
        (None, _) => {}
    }
    c
}

/// The status and the spec's ErrorResponse of a failed call.
fn failure<T: std::fmt::Debug>(
    result: Result<impl std::fmt::Debug, Error<T>>,
) -> (u16, models::ErrorResponse) {
    match result {
        Err(Error::ResponseError(r)) => {
            let parsed: models::ErrorResponse = serde_json::from_str(&r.content)
                .unwrap_or_else(|e| panic!("not an ErrorResponse ({e}): {}", r.content));
            assert!(!r.content.contains("\"detail\":null"), "{}", r.content);
            assert!(
                parsed.instance.as_deref().is_some_and(|i| !i.is_empty()),
                "{}",
                r.content
            );
            (r.status.as_u16(), parsed)
        }
        other => panic!("expected an error response, got {other:?}"),
    }
}

fn schema_ipc() -> String {
    let schema = Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, Some(Arc::from("+00:00"))),
            false,
        ),
        Field::new(
            "process_id",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            false,
        ),
        Field::new("level", DataType::Int32, false),
    ]);
    let mut buffer = Vec::new();
    {
        let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut buffer, &schema).unwrap();
        writer.finish().unwrap();
    }
    base64::engine::general_purpose::STANDARD.encode(buffer)
}

fn ddl(name: &str, filter: &str) -> String {
    format!(
        "CREATE OR REPLACE MATERIALIZED VIEW {name} WITH (
           extract_query = 'SELECT time, process_id, level FROM log_entries{filter}',
           count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''',
           merge_partitions_query = 'SELECT time, process_id, level FROM {{source}}',
           update_group = 4000, time_column = 'time')"
    )
}

fn create_request(name: &str, filter: &str) -> models::CreateMaterializedViewRequest {
    models::CreateMaterializedViewRequest::new(
        models::create_materialized_view_request::Kind::Query,
        ddl(name, filter),
        schema_ipc(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_client_walks_every_operation() {
    psql(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mmv_spec_admin') THEN
             CREATE ROLE mmv_spec_admin IN ROLE micromegas_admin; END IF;
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mmv_spec_reader') THEN
             CREATE ROLE mmv_spec_reader IN ROLE micromegas_reader; END IF;
         END $$;
         DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'spec\\_%';
         DELETE FROM micromegas.jobs WHERE view_set_name LIKE 'spec\\_%';",
    )
    .await;
    let base = serve(Duration::from_secs(2), 64 * 1024).await;
    let admin = client(&base, Some(ADMIN_KEY), false);
    let admin_bearer = client(&base, Some(ADMIN_KEY), true);
    let reader = client(&base, Some(READER_KEY), false);
    let nobody = client(&base, None, false);

    // The namespace: listed under the root, exists, described; another
    // does not exist (NamespaceNotFound).
    let listed = namespace_api::list_namespaces(&reader, "$", None, None, None)
        .await
        .unwrap();
    assert_eq!(listed.namespaces, ["micromegas"]);
    let listed = namespace_api::list_namespaces(&reader, "micromegas", None, None, None)
        .await
        .unwrap();
    assert!(listed.namespaces.is_empty());
    namespace_api::namespace_exists(
        &reader,
        "micromegas",
        models::NamespaceExistsRequest::new(),
        None,
    )
    .await
    .unwrap();
    let (status, e) = failure(
        namespace_api::namespace_exists(
            &reader,
            "elsewhere",
            models::NamespaceExistsRequest::new(),
            None,
        )
        .await,
    );
    assert_eq!((status, e.code), (404, 1));
    let described = namespace_api::describe_namespace(
        &reader,
        "micromegas",
        models::DescribeNamespaceRequest::new(),
        None,
    )
    .await
    .unwrap();
    assert!(described
        .properties
        .unwrap()
        .contains_key("micromegas.catalog_version"));

    // CreateMaterializedView: with the key as a bearer token; with the
    // key only in the body's identity; refused without credentials, for a
    // reader, for a body id naming another namespace.
    let mut request = create_request("spec_a", "");
    request.context = Some([("ticket".to_string(), "LNS-1".to_string())].into());
    let created = materialized_view_api::create_materialized_view(
        &admin_bearer,
        "micromegas$spec_a",
        request,
        None,
    )
    .await
    .unwrap();
    assert!(created.version > 0);
    assert_eq!(created.job_id, Some(None));
    assert_eq!(created.context.unwrap()["ticket"], "LNS-1");
    let mut request = create_request("spec_b", "");
    request.identity = Some(Box::new(models::Identity {
        api_key: Some(ADMIN_KEY.into()),
        auth_token: None,
    }));
    materialized_view_api::create_materialized_view(&nobody, "spec_b", request, None)
        .await
        .unwrap();
    let (status, e) = failure(
        materialized_view_api::create_materialized_view(
            &nobody,
            "spec_c",
            create_request("spec_c", ""),
            None,
        )
        .await,
    );
    assert_eq!((status, e.code), (401, 16));
    let (status, e) = failure(
        materialized_view_api::create_materialized_view(
            &reader,
            "spec_c",
            create_request("spec_c", ""),
            None,
        )
        .await,
    );
    assert_eq!((status, e.code), (403, 15));
    let mut request = create_request("spec_c", "");
    request.id = Some(vec!["lance".into(), "spec_c".into()]);
    let (status, e) = failure(
        materialized_view_api::create_materialized_view(&admin, "spec_c", request, None).await,
    );
    assert_eq!((status, e.code), (400, 13));

    // ListTables, paged by one.
    let first = table_api::list_tables(&reader, "micromegas", None, None, Some(1), None)
        .await
        .unwrap();
    let mut names = first.tables.clone();
    let mut token = first.page_token.clone();
    while let Some(t) = token {
        let page = table_api::list_tables(&reader, "micromegas", None, Some(&t), Some(1), None)
            .await
            .unwrap();
        assert!(page.tables.len() <= 1);
        names.extend(page.tables);
        token = page.page_token;
    }
    assert!(
        names.contains(&"spec_a".to_string()) && names.contains(&"spec_b".to_string()),
        "{names:?}"
    );
    // From the root: the namespace's tables as full identifiers.
    let root = table_api::list_tables(&reader, "$", None, None, Some(1000), None)
        .await
        .unwrap();
    assert!(
        root.tables.contains(&"micromegas$spec_a".to_string()),
        "{:?}",
        root.tables
    );
    let (status, e) =
        failure(table_api::list_tables(&reader, "micromegas", None, None, Some(0), None).await);
    assert_eq!((status, e.code), (400, 13));
    // a limit above the largest page is clamped, not refused
    table_api::list_tables(&reader, "micromegas", None, None, Some(1_000_000), None)
        .await
        .unwrap();

    // DescribeTable: version, schema in the JSON Arrow form, properties.
    let described = table_api::describe_table(
        &reader,
        "micromegas$spec_a",
        models::DescribeTableRequest::new(),
        None,
        None,
        Some(true),
        None,
    )
    .await
    .unwrap();
    assert_eq!(described.table.as_deref(), Some("spec_a"));
    assert_eq!(described.namespace, Some(vec!["micromegas".to_string()]));
    assert_eq!(described.version, Some(created.version));
    let fields: Vec<(String, String, bool)> = described
        .schema
        .unwrap()
        .fields
        .into_iter()
        .map(|f| (f.name, f.r#type.r#type, f.nullable))
        .collect();
    assert_eq!(
        fields,
        [
            (
                "time".to_string(),
                "timestamp(ns,\"+00:00\")".to_string(),
                false
            ),
            (
                "process_id".to_string(),
                "dictionary(int32,utf8)".to_string(),
                false
            ),
            ("level".to_string(), "int32".to_string(), false),
        ]
    );
    let properties = described.properties.unwrap();
    assert_eq!(properties["micromegas.update_group"], "4000");
    assert_eq!(properties["micromegas.load_status"], "ok");
    assert_eq!(properties["micromegas.warnings"], "[]");
    assert!(properties["micromegas.definition_sql"].contains("spec_a"));

    // TableExists; a missing table (TableNotFound).
    table_api::table_exists(&reader, "spec_a", models::TableExistsRequest::new(), None)
        .await
        .unwrap();
    let (status, e) = failure(
        table_api::table_exists(&reader, "spec_zz", models::TableExistsRequest::new(), None).await,
    );
    assert_eq!((status, e.code), (404, 4));

    // RefreshMaterializedView: a job id; output_limit is for chunker views.
    let refreshed = materialized_view_api::refresh_materialized_view(
        &admin,
        "spec_a",
        None,
        Some(models::RefreshMaterializedViewRequest::new()),
    )
    .await
    .unwrap();
    assert_eq!(refreshed.job_id.len(), 36);
    let mut request = models::RefreshMaterializedViewRequest::new();
    request.output_limit = Some(Some(10));
    let (status, e) = failure(
        materialized_view_api::refresh_materialized_view(&admin, "spec_a", None, Some(request))
            .await,
    );
    assert_eq!((status, e.code), (400, 13));

    // The definition's history is the table's versions; RestoreTable.
    let replaced = materialized_view_api::create_materialized_view(
        &admin,
        "spec_a",
        create_request("spec_a", " WHERE level < 5"),
        None,
    )
    .await
    .unwrap();
    let versions =
        table_api::list_table_versions(&reader, "spec_a", None, None, None, None, Some(true))
            .await
            .unwrap();
    let numbers: Vec<i64> = versions.versions.iter().map(|v| v.version).collect();
    // latest first (an earlier run's spec_a left older versions below)
    assert_eq!(numbers[..2], [replaced.version, created.version]);
    assert_eq!(
        versions.versions[1].metadata.as_ref().unwrap()["micromegas.operation"],
        "create"
    );
    assert_eq!(
        versions.versions[0].metadata.as_ref().unwrap()["micromegas.operation"],
        "replace"
    );
    let mut request = models::DescribeTableVersionRequest::new();
    request.version = Some(created.version);
    let one = table_api::describe_table_version(&reader, "spec_a", request, None)
        .await
        .unwrap();
    assert_eq!(one.version.version, created.version);
    let mut request = models::DescribeTableVersionRequest::new();
    request.version = Some(1);
    let (status, e) =
        failure(table_api::describe_table_version(&reader, "spec_a", request, None).await);
    assert_eq!((status, e.code), (404, 11));
    table_api::restore_table(
        &admin,
        "spec_a",
        models::RestoreTableRequest::new(created.version),
        None,
    )
    .await
    .unwrap();
    let described = table_api::describe_table(
        &reader,
        "spec_a",
        models::DescribeTableRequest::new(),
        None,
        None,
        None,
        None,
    )
    .await
    .unwrap();
    assert!(!described.properties.unwrap()["micromegas.definition_sql"].contains("level < 5"));

    // An operation of the spec this namespace does not serve: Unsupported.
    let (status, e) = failure(
        table_api::count_table_rows(
            &reader,
            "spec_a",
            models::CountTableRowsRequest::new(),
            None,
        )
        .await,
    );
    assert_eq!((status, e.code), (406, 0));

    // DropTable: a reader may not; the admin may; then it does not exist.
    let (status, e) = failure(table_api::drop_table(&reader, "spec_b", None).await);
    assert_eq!((status, e.code), (403, 15));
    let dropped = table_api::drop_table(&admin, "micromegas$spec_b", None)
        .await
        .unwrap();
    assert_eq!(
        dropped.id,
        Some(vec!["micromegas".to_string(), "spec_b".to_string()])
    );
    let (status, e) = failure(
        table_api::table_exists(&reader, "spec_b", models::TableExistsRequest::new(), None).await,
    );
    assert_eq!((status, e.code), (404, 4));
    // A dropped table's versions are still listed (what RestoreTable can
    // bring back); a table that never was is TableNotFound, not a missing
    // version.
    let versions =
        table_api::list_table_versions(&reader, "spec_b", None, None, None, None, Some(true))
            .await
            .unwrap();
    assert_eq!(
        versions.versions[0].metadata.as_ref().unwrap()["micromegas.operation"],
        "drop"
    );
    table_api::describe_table_version(
        &reader,
        "spec_b",
        models::DescribeTableVersionRequest::new(),
        None,
    )
    .await
    .unwrap();
    let mut request = models::DescribeTableVersionRequest::new();
    request.version = Some(1);
    let (status, e) =
        failure(table_api::describe_table_version(&reader, "spec_never", request, None).await);
    assert_eq!((status, e.code), (404, 4));

    // Errors every route answers in the spec's shape: a wrong method (405),
    // a body over the limit (413), a request past the timeout (408, while
    // another session holds the catalog lock).
    let http = reqwest::Client::new();
    let response = http
        .get(format!("{base}/v1/table/spec_a/describe"))
        .header("x-api-key", READER_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 405);
    let body: models::ErrorResponse = response.json().await.unwrap();
    assert!(body.instance.is_some());
    let big = serde_json::json!({"id": ["spec_a"], "context": {"pad": "x".repeat(100_000)}});
    let response = http
        .post(format!("{base}/v1/table/spec_a/describe"))
        .header("x-api-key", READER_KEY)
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let body: models::ErrorResponse = response.json().await.unwrap();
    assert_eq!(body.code, 13);
    let (locker, connection) = tokio_postgres::connect(&dsn(), NoTls).await.unwrap();
    tokio::spawn(connection);
    locker
        .batch_execute("BEGIN; SELECT * FROM micromegas.catalog_state FOR UPDATE;")
        .await
        .unwrap();
    let (status, e) = failure(table_api::drop_table(&admin, "spec_a", None).await);
    assert_eq!((status, e.code), (408, 17));
    // The abandoned statement is cancelled, not left waiting on the lock.
    let mut waiting = 1;
    for _ in 0..50 {
        // (pg_stat_activity is a snapshot per transaction: the locker's
        // transaction asks for a fresh one each time)
        locker
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .unwrap();
        waiting = locker
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%mm_drop_view%' AND state = 'active' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0);
        if waiting == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(waiting, 0, "the timed-out DropTable still runs");
    locker.batch_execute("ROLLBACK").await.unwrap();
    table_api::table_exists(&reader, "spec_a", models::TableExistsRequest::new(), None)
        .await
        .unwrap();

    psql("DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'spec\\_%';").await;
}
