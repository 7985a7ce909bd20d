//! The REST endpoint over real HTTP (reqwest) against a real PostgreSQL
//! with the extension (`MMV_TEST_DSN`; scripts/test.sh sets it): every
//! route, every error code, auth, request ids, a database that is down.

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use base64::Engine;
use micromegas_views_server::{app, pool, ApiKey, Config, KeyFile};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::NoTls;

const ADMIN_KEY: &str = "admin-key-0123456789abcdef";
const READER_KEY: &str = "reader-key-0123456789abcdef";

fn dsn() -> String {
    std::env::var("MMV_TEST_DSN").expect("MMV_TEST_DSN must name a database with micromegas_views")
}

async fn psql(sql: &str) {
    let (client, connection) = tokio_postgres::connect(&dsn(), NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute(sql).await.unwrap();
}

/// Starts the service on an ephemeral port; returns its base URL.
async fn serve(dsn: &str, keys: Option<KeyFile>, body_limit: usize) -> String {
    let router = app(
        pool(dsn, 4).unwrap(),
        Config {
            namespace: vec!["micromegas".into()],
            keys,
            statement_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            body_limit,
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{address}")
}

fn keys() -> KeyFile {
    KeyFile {
        keys: vec![
            ApiKey {
                name: "ci-admin".into(),
                key: ADMIN_KEY.into(),
                role: "mmv_http_admin".into(),
                claims: Default::default(),
            },
            ApiKey {
                name: "dashboards".into(),
                key: READER_KEY.into(),
                role: "mmv_http_reader".into(),
                claims: Default::default(),
            },
        ],
    }
}

/// The schema `SELECT time, process_id, level FROM log_entries` produces.
fn expected_schema(level: DataType) -> String {
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
        Field::new("level", level, false),
    ]);
    let mut buffer = Vec::new();
    {
        let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut buffer, &schema).unwrap();
        writer.finish().unwrap();
    }
    base64::engine::general_purpose::STANDARD.encode(buffer)
}

fn ddl(name: &str) -> String {
    format!(
        "CREATE MATERIALIZED VIEW {name} WITH (
           extract_query = 'SELECT time, process_id, level FROM log_entries',
           count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''',
           merge_partitions_query = 'SELECT time, process_id, level FROM {{source}}',
           update_group = 4000, time_column = 'time')"
    )
}

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    async fn post(&self, key: Option<&str>, path: &str, body: Value) -> (u16, Value, String) {
        let mut request = self.http.post(format!("{}{path}", self.base)).json(&body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        Self::read(request.send().await.unwrap()).await
    }

    async fn get(&self, key: Option<&str>, path: &str) -> (u16, Value, String) {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        Self::read(request.send().await.unwrap()).await
    }

    async fn read(response: reqwest::Response) -> (u16, Value, String) {
        let status = response.status().as_u16();
        let id = response
            .headers()
            .get("x-request-id")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = response.json::<Value>().await.unwrap_or(Value::Null);
        (status, body, id)
    }
}

/// An ErrorResponse with this status and code, whose instance is the request id.
fn assert_error(got: &(u16, Value, String), status: u16, code: i64, mentions: &str) {
    let (s, body, id) = got;
    assert_eq!(*s, status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert!(body["type"].is_string(), "{body}");
    assert_eq!(body["instance"].as_str().unwrap(), id, "{body}");
    let text = format!("{} {}", body["error"], body["detail"]);
    assert!(text.contains(mentions), "{mentions:?} not in {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_over_http() {
    psql(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mmv_http_admin') THEN
             CREATE ROLE mmv_http_admin IN ROLE micromegas_admin; END IF;
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mmv_http_reader') THEN
             CREATE ROLE mmv_http_reader IN ROLE micromegas_reader; END IF;
         END $$;
         DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'http\\_%';
         DELETE FROM micromegas.jobs WHERE view_set_name LIKE 'http\\_%';",
    )
    .await;
    let api = Api {
        base: serve(&dsn(), Some(keys()), 64 * 1024).await,
        http: reqwest::Client::new(),
    };
    let admin = Some(ADMIN_KEY);
    let reader = Some(READER_KEY);

    // Health (the background probe's answer: ok once it has run), and
    // authentication.
    let mut health = api.get(None, "/healthz").await;
    for _ in 0..50 {
        if health.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        health = api.get(None, "/healthz").await;
    }
    assert_eq!((health.0, health.1), (200, json!({"status": "ok"})));
    let create_body = |name: &str, schema: String| {
        json!({"kind": "query", "source_query": ddl(name), "output_schema": schema,
               "with_no_data": false, "context": {"ticket": "OPS-1"}})
    };
    let got = api
        .post(
            None,
            "/v1/materialized_view/http_a/create",
            create_body("http_a", expected_schema(DataType::Int32)),
        )
        .await;
    assert_error(&got, 401, 16, "missing credentials");
    // The spec's body identity stands for the headers' credentials: a wrong
    // key there is refused like one in a header.
    let mut with_identity = create_body("http_a", expected_schema(DataType::Int32));
    with_identity["identity"] = json!({"api_key": "not-a-key-0123456789"});
    let got = api
        .post(None, "/v1/materialized_view/http_a/create", with_identity)
        .await;
    assert_error(&got, 401, 16, "invalid API key");
    // auth_token is the other form of the same credential: a wrong one is
    // refused; a reader's, alone in the body, authenticates as the reader.
    let mut with_token = create_body("http_a", expected_schema(DataType::Int32));
    with_token["identity"] = json!({"auth_token": "not-a-token-0123456789"});
    let got = api
        .post(
            None,
            "/v1/materialized_view/http_a/create",
            with_token.clone(),
        )
        .await;
    assert_error(&got, 401, 16, "invalid API key");
    with_token["identity"] = json!({"auth_token": READER_KEY});
    let got = api
        .post(None, "/v1/materialized_view/http_a/create", with_token)
        .await;
    assert_error(&got, 403, 15, "permission denied");
    let got = api
        .post(
            Some("wrong-key-0123456789"),
            "/v1/materialized_view/http_a/create",
            json!({}),
        )
        .await;
    assert_error(&got, 401, 16, "invalid API key");

    // Create: 201 with the commit version and the refresh job; the schema
    // the client built with arrow-rs matches the inferred one.
    let (status, body, _) = api
        .post(
            admin,
            "/v1/materialized_view/micromegas$http_a/create",
            create_body("http_a", expected_schema(DataType::Int32)),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert!(body["version"].as_i64().unwrap() > 0);
    let job_id = body["job_id"].as_str().unwrap().to_string();
    assert_eq!(body["context"], json!({"ticket": "OPS-1"}));
    // The key's name is the actor; the role is the key's.
    psql("SELECT 1").await;
    let (client, connection) = tokio_postgres::connect(&dsn(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT updated_by, updated_by_role FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'http_a'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "ci-admin");

    // Create refused: exists (409), wrong field type (400 naming it; nothing
    // created), another kind (Unsupported), another namespace, a statement
    // for another name, a query that does not plan (the Postgres message).
    let got = api
        .post(
            admin,
            "/v1/materialized_view/http_a/create",
            create_body("http_a", expected_schema(DataType::Int32)),
        )
        .await;
    assert_error(&got, 409, 5, "already exists");
    let got = api
        .post(
            admin,
            "/v1/materialized_view/http_b/create",
            create_body("http_b", expected_schema(DataType::Int64)),
        )
        .await;
    assert_error(
        &got,
        400,
        20,
        "field \\\"level\\\": output_schema has type Int64, the view produces Int32",
    );
    let got = api
        .post(admin, "/v1/materialized_view/http_b/describe", json!({}))
        .await;
    assert_error(&got, 404, 4, "does not exist");
    let mut udtf = create_body("http_b", expected_schema(DataType::Int32));
    udtf["kind"] = json!("udtf");
    let got = api
        .post(admin, "/v1/materialized_view/http_b/create", udtf)
        .await;
    assert_error(&got, 400, 0, "\\\"udtf\\\" is not supported");
    let got = api
        .post(
            admin,
            "/v1/materialized_view/lance$http_b/create",
            create_body("http_b", expected_schema(DataType::Int32)),
        )
        .await;
    assert_error(&got, 404, 1, "namespace \\\"lance\\\" does not exist");
    let got = api
        .post(
            admin,
            "/v1/materialized_view/http_c/create",
            create_body("http_b", expected_schema(DataType::Int32)),
        )
        .await;
    assert_error(&got, 400, 13, "creates \\\"http_b\\\"");
    let mut bad = create_body("http_b", expected_schema(DataType::Int32));
    bad["source_query"] =
        json!(ddl("http_b").replace("level FROM log_entries", "nope FROM log_entries"));
    let got = api
        .post(admin, "/v1/materialized_view/http_b/create", bad)
        .await;
    assert_error(&got, 400, 13, "nope");
    // The body's id compared part by part with the route (0.1.4 compared
    // only the last part); a udtf_spec on a query view.
    let mut bad = create_body("http_b", expected_schema(DataType::Int32));
    bad["id"] = json!(["lance", "http_b"]);
    let got = api
        .post(admin, "/v1/materialized_view/http_b/create", bad)
        .await;
    assert_error(&got, 400, 13, "does not name the view of the path");
    let mut bad = create_body("http_b", expected_schema(DataType::Int32));
    bad["udtf_spec"] = json!({"kind": "udtf", "udtf": "f", "udtf_sha": "0", "udtf_name": "f", "udtf_version": "1"});
    let got = api
        .post(admin, "/v1/materialized_view/http_b/create", bad)
        .await;
    assert_error(&got, 400, 13, "udtf_spec is valid only");
    let mut bad = create_body("http_b", expected_schema(DataType::Int32));
    bad["output_schema"] = json!("not base64 at all!");
    let got = api
        .post(admin, "/v1/materialized_view/http_b/create", bad)
        .await;
    assert_error(&got, 400, 13, "invalid Arrow IPC schema");
    let got = api
        .post(
            admin,
            "/v1/materialized_view/http_b/create",
            json!({"kind": "query"}),
        )
        .await;
    assert_error(&got, 400, 13, "missing required field \\\"source_query\\\"");

    // The JSON form of source_query; a reader may not create (403).
    let options = json!({
        "extract_query": "SELECT time, process_id, level FROM log_entries",
        "count_src_query": "SELECT count(*) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'",
        "merge_partitions_query": "SELECT time, process_id, level FROM {source}",
        "update_group": 4000, "time_column": "time", "merge_sort_order": "time"
    });
    let json_body = json!({"kind": "query", "source_query": options.to_string(),
                           "output_schema": expected_schema(DataType::Int32), "auto_refresh": true});
    let got = api
        .post(
            reader,
            "/v1/materialized_view/http_b/create",
            json_body.clone(),
        )
        .await;
    assert_error(&got, 403, 15, "permission denied");
    let (status, body, _) = api
        .post(admin, "/v1/materialized_view/http_b/create", json_body)
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["job_id"], Value::Null);

    // Describe (a reader may): the stored statement, the schema as base64
    // IPC, the version, auto_refresh, the load status.
    let (status, body, _) = api
        .post(reader, "/v1/materialized_view/http_b/describe", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], json!(["micromegas", "http_b"]));
    assert_eq!(body["auto_refresh"], true);
    assert_eq!(body["load_status"], "ok");
    assert!(body["source_query"]
        .as_str()
        .unwrap()
        .contains("merge_sort_order"));
    assert_eq!(
        body["output_schema"],
        json!(expected_schema(DataType::Int32))
    );
    assert_eq!(body["properties"]["warnings"], "[]");
    // A view that misses an author obligation: its findings are in the
    // properties (a JSON array as a string, like every Lance property).
    psql(
        "SET client_min_messages = error;
         SELECT micromegas.mm_create_view($$CREATE MATERIALIZED VIEW http_w WITH (
           extract_query = 'SELECT time, process_id, count(*) AS count FROM log_entries WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}'' GROUP BY 1, 2',
           count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
           merge_partitions_query = 'SELECT time, process_id, count(*) AS count FROM {source} GROUP BY 1, 2',
           update_group = 4000, time_column = 'time')$$);",
    )
    .await;
    let (status, body, _) = api
        .post(reader, "/v1/materialized_view/http_w/describe", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let warnings: Value =
        serde_json::from_str(body["properties"]["warnings"].as_str().unwrap()).unwrap();
    assert_eq!(warnings[0]["check"], "non_composable_merge", "{warnings}");
    assert_eq!(warnings[0]["sqlstate"], "01M01", "{warnings}");
    psql("SELECT micromegas.mm_drop_view('http_w')").await;

    // List with stable paging.

    for name in ["http_c", "http_d"] {
        let (status, body, _) = api
            .post(
                admin,
                &format!("/v1/materialized_view/{name}/create"),
                create_body(name, expected_schema(DataType::Int32)),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let (status, body, _) = api
            .get(
                reader,
                &format!(
                    "/v1/namespace/micromegas/materialized_view/list?limit=2&page_token={token}"
                ),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        for v in body["views"].as_array().unwrap() {
            seen.push(v.as_str().unwrap().to_string());
        }
        match body["page_token"].as_str() {
            Some(t) => token = t.to_string(),
            None => break,
        }
    }
    let mine: Vec<&String> = seen.iter().filter(|v| v.starts_with("http_")).collect();
    assert_eq!(mine, ["http_a", "http_b", "http_c", "http_d"]);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted);
    let got = api
        .get(reader, "/v1/namespace/elsewhere/materialized_view/list")
        .await;
    assert_error(&got, 404, 1, "elsewhere");
    let got = api
        .get(reader, "/v1/namespace/$/materialized_view/list?limit=0")
        .await;
    assert_error(&got, 400, 13, "limit");

    // Jobs: the create's refresh is in progress; a refresh request (202)
    // folds into it; cancel; a failed job's record; unknown and malformed ids.
    let (status, body, _) = api
        .post(reader, "/v1/jobs/describe", json!({"job_id": job_id}))
        .await;
    assert_eq!(
        (status, body["job_state"].clone()),
        (200, json!("IN_PROGRESS"))
    );
    // A refresh with only what a Lance client sends besides the worker
    // fields (its id, identity credentials, context): nothing to store, so
    // it folds into the create's queued refresh (equal, empty parameters).
    let (status, body, _) = api
        .post(
            admin,
            "/v1/materialized_view/http_a/refresh",
            json!({"id": ["micromegas", "http_a"], "identity": {"api_key": "secret-key-in-body", "auth_token": "secret-token-in-body"},
                   "context": {"ticket": "OPS-2"}, "src_version": null, "output_limit": null, "manifest": null}),
        )
        .await;
    assert_eq!(
        (status, body["job_id"].clone()),
        (202, json!(job_id)),
        "{body}"
    );
    let (status, body, _) = api
        .post(
            admin,
            "/v1/materialized_view/http_a/refresh",
            json!({"concurrency": 4, "src_version": 7, "cluster": "c1",
                   "identity": {"api_key": "secret-key-in-body"}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    // Other parameters than the queued refresh's: a job of its own (0.1.5
    // folds only requests with equal parameters) carrying only the worker
    // fields.
    assert_ne!(body["job_id"], json!(job_id));
    let stored = client
        .query_one(
            "SELECT params::text, (SELECT count(*) FROM micromegas.jobs WHERE params::text LIKE '%secret%')
               FROM micromegas.jobs WHERE job_id = $1::text::uuid",
            &[&body["job_id"].as_str().unwrap()],
        )
        .await
        .unwrap();
    assert_eq!(
        (stored.get::<_, String>(0), stored.get::<_, i64>(1)),
        (
            r#"{"cluster": "c1", "concurrency": 4, "src_version": 7}"#.to_string(),
            0
        )
    );
    // Refused per the spec: output_limit on a query view, a manifest
    // override, a bad integer, a body id naming another namespace.
    for (request, code, needle) in [
        (
            json!({"output_limit": 10}),
            13,
            "output_limit is valid only for chunker",
        ),
        (
            json!({"manifest": "{}"}),
            0,
            "manifest overrides are not supported",
        ),
        (
            json!({"concurrency": 0}),
            13,
            "concurrency must be at least 1",
        ),
        (
            json!({"src_version": "7"}),
            13,
            "not valid JSON for this operation",
        ),
        (
            json!({"id": ["elsewhere", "http_a"]}),
            13,
            "does not name the view of the path",
        ),
        (
            json!({"id": ["micromegas", "http_b"]}),
            13,
            "does not name the view of the path",
        ),
    ] {
        let got = api
            .post(admin, "/v1/materialized_view/http_a/refresh", request)
            .await;
        assert_error(&got, 400, code, needle);
    }
    let got = api
        .post(reader, "/v1/materialized_view/http_a/refresh", json!({}))
        .await;
    assert_error(&got, 403, 15, "permission denied");
    let (status, body, _) = api
        .post(admin, "/v1/jobs/cancel", json!({"job_id": job_id}))
        .await;
    assert_eq!(
        (status, body["job_state"].clone()),
        (200, json!("CANCELLED"))
    );
    let got = api
        .post(admin, "/v1/jobs/cancel", json!({"job_id": job_id}))
        .await;
    assert_error(&got, 409, 19, "already cancelled");
    let (_, body, _) = api
        .post(admin, "/v1/materialized_view/http_c/refresh", json!({}))
        .await;
    let failing = body["job_id"].as_str().unwrap().to_string();
    client
        .batch_execute(&format!(
            "SELECT micromegas.mm_finish_job(job_id, lease_token, false, 'extract', 'object store timed out', true)
               FROM micromegas.mm_claim_job('w') WHERE job_id = '{failing}';
             SELECT micromegas.mm_finish_job(job_id, lease_token, false, 'extract', 'object store timed out', true)
               FROM micromegas.mm_claim_job('w') WHERE job_id = '{failing}';
             SELECT micromegas.mm_finish_job(job_id, lease_token, false, 'extract', 'object store timed out', true)
               FROM micromegas.mm_claim_job('w') WHERE job_id = '{failing}';"
        ))
        .await
        .unwrap();
    let (status, body, _) = api
        .post(reader, "/v1/jobs/describe", json!({"job_id": failing}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["job_state"], "FAILED");
    assert_eq!(
        body["failure"],
        json!({"phase": "extract", "message": "object store timed out", "retryable": true})
    );
    let (status, body, _) = api
        .post(
            reader,
            "/v1/jobs/list",
            json!({"id": ["micromegas", "http_c"], "job_state": "FAILED"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(body["jobs"][0]["job_id"], json!(failing));
    let got = api
        .post(
            reader,
            "/v1/jobs/describe",
            json!({"job_id": "00000000-0000-0000-0000-000000000000"}),
        )
        .await;
    assert_error(&got, 404, 4, "does not exist");
    let got = api
        .post(reader, "/v1/jobs/describe", json!({"job_id": "nope"}))
        .await;
    assert_error(&got, 400, 13, "uuid");
    let got = api
        .post(reader, "/v1/jobs/list", json!({"job_state": "SOMETIMES"}))
        .await;
    assert_error(&got, 400, 13, "SOMETIMES");

    // A drop refused because another view reads this one (2BP01) is 409
    // InvalidTableState naming the dependent; nothing is dropped.
    psql(&format!(
        "SELECT micromegas.mm_create_view($q${}$q$)",
        ddl("http_dep")
            .replace("FROM log_entries", "FROM http_d")
            .replace("update_group = 4000", "update_group = 5000")
    ))
    .await;
    let got = api
        .post(admin, "/v1/materialized_view/http_d/drop", json!({}))
        .await;
    assert_error(&got, 409, 19, "http_dep");
    assert!(
        got.1["detail"].as_str().unwrap().contains("2BP01"),
        "{}",
        got.1
    );
    psql("SELECT micromegas.mm_drop_view('http_dep')").await;

    // Drop: 200; again: 404. A body that is not JSON, one too large, an
    // unknown route: all ErrorResponses.
    let (status, body, _) = api
        .post(admin, "/v1/materialized_view/http_d/drop", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let got = api
        .post(admin, "/v1/materialized_view/http_d/drop", json!({}))
        .await;
    assert_error(&got, 404, 4, "does not exist");
    let response = api
        .http
        .post(format!("{}/v1/jobs/describe", api.base))
        .bearer_auth(READER_KEY)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_error(&Api::read(response).await, 400, 13, "not valid JSON");
    let big = json!({"kind": "query", "source_query": "x".repeat(100_000), "output_schema": ""});
    let got = api
        .post(admin, "/v1/materialized_view/http_e/create", big)
        .await;
    assert_error(&got, 413, 13, "");
    let got = api.post(admin, "/v1/tables/list", json!({})).await;
    assert_error(&got, 404, 0, "no operation");

    // A database that is down: 503 ServiceUnavailable, for health and routes.
    let down = Api {
        base: serve(
            "host=127.0.0.1 port=1 user=postgres dbname=postgres connect_timeout=2",
            Some(keys()),
            1024,
        )
        .await,
        http: reqwest::Client::new(),
    };
    let (status, body, _) = down.get(None, "/healthz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], 17);
    let got = down
        .post(reader, "/v1/materialized_view/http_a/describe", json!({}))
        .await;
    assert_error(&got, 503, 17, "unreachable");

    // A database that only reads (a hot standby, here a primary whose
    // sessions are read-only): reads work, a write is 503 ServiceUnavailable
    // with the database's message, never a 500.
    let read_only = Api {
        base: serve(
            &format!("{} options='-c default_transaction_read_only=on'", dsn()),
            Some(keys()),
            1024 * 1024,
        )
        .await,
        http: reqwest::Client::new(),
    };
    let (status, body, _) = read_only
        .post(reader, "/v1/materialized_view/http_a/describe", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let got = read_only
        .post(admin, "/v1/materialized_view/http_a/drop", json!({}))
        .await;
    assert_error(&got, 503, 17, "read-only transaction");

    psql(
        "DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'http\\_%';
         DELETE FROM micromegas.jobs WHERE view_set_name LIKE 'http\\_%';",
    )
    .await;
}
