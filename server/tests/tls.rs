//! TLS to Postgres, honouring libpq's sslmode and sslrootcert, against the
//! TLS-only cluster scripts/tls_test.sh starts (MMV_TLS_PORT, MMV_TLS_CA,
//! MMV_TLS_WRONG_CA): through the client crate, and through the REST
//! server's pool. `#[ignore]`d unless that script runs it.

use micromegas_views_server::{app, pool, Config};
use std::time::Duration;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} must be set (scripts/tls_test.sh)"))
}

fn dsn(host: &str, extra: &str) -> String {
    format!(
        "host={host} port={} user=postgres dbname=mmv_tls {extra}",
        env("MMV_TLS_PORT")
    )
}

/// Connects; whether the session runs over TLS.
async fn over_tls(dsn: &str) -> Result<bool, String> {
    let client = micromegas_views_client::connect(dsn)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the TLS-only cluster of scripts/tls_test.sh"]
async fn sslmode_is_honoured() {
    let (ca, wrong) = (env("MMV_TLS_CA"), env("MMV_TLS_WRONG_CA"));
    // verify-full: the right CA, the certificate's name.
    assert_eq!(
        over_tls(&dsn(
            "localhost",
            &format!("sslmode=verify-full sslrootcert={ca}")
        ))
        .await,
        Ok(true)
    );
    // ... a URL says the same
    let url = format!(
        "postgresql://postgres@localhost:{}/mmv_tls?sslmode=verify-full&sslrootcert={ca}",
        env("MMV_TLS_PORT")
    );
    assert_eq!(over_tls(&url).await, Ok(true));
    // verify-full: another CA is refused.
    let refused = over_tls(&dsn(
        "localhost",
        &format!("sslmode=verify-full sslrootcert={wrong}"),
    ))
    .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("UnknownIssuer") || e.contains("certificate")),
        "{refused:?}"
    );
    // verify-full to an address the certificate does not name: refused;
    // verify-ca (the chain only) connects.
    let refused = over_tls(&dsn(
        "127.0.0.1",
        &format!("sslmode=verify-full sslrootcert={ca}"),
    ))
    .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("NotValidForName")),
        "{refused:?}"
    );
    assert_eq!(
        over_tls(&dsn(
            "127.0.0.1",
            &format!("sslmode=verify-ca sslrootcert={ca}")
        ))
        .await,
        Ok(true)
    );
    // verify-ca with a root file that cannot be read: refused, saying so.
    let refused = over_tls(&dsn(
        "localhost",
        "sslmode=verify-ca sslrootcert=/nonexistent/root.crt",
    ))
    .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("/nonexistent/root.crt")),
        "{refused:?}"
    );
    // require: TLS without a CA (no ~/.postgresql/root.crt here).
    assert_eq!(
        over_tls(&dsn("127.0.0.1", "sslmode=require")).await,
        Ok(true)
    );
    // prefer (the default): TLS, since the server offers it.
    assert_eq!(over_tls(&dsn("127.0.0.1", "")).await, Ok(true));
    // disable: the server accepts TLS connections only.
    let refused = over_tls(&dsn("127.0.0.1", "sslmode=disable")).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("no encryption") || e.contains("pg_hba")),
        "{refused:?}"
    );
    // PGSSLMODE / PGSSLROOTCERT apply when the string says nothing.
    std::env::set_var("PGSSLMODE", "verify-full");
    std::env::set_var("PGSSLROOTCERT", &wrong);
    let refused = over_tls(&dsn("localhost", "")).await;
    assert!(refused.is_err(), "{refused:?}");
    std::env::remove_var("PGSSLMODE");
    std::env::remove_var("PGSSLROOTCERT");

    // The REST server's pool: verify-full; its requests run over TLS (the
    // cluster refuses anything else).
    let router = app(
        pool(
            &dsn(
                "localhost",
                &format!("sslmode=verify-full sslrootcert={ca}"),
            ),
            2,
        )
        .unwrap(),
        Config {
            namespace: vec!["micromegas".into()],
            keys: None,
            statement_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            body_limit: 1024 * 1024,
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let response = reqwest::Client::new()
        .get(format!(
            "http://{address}/v1/namespace/micromegas/table/list"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(
        body["tables"]
            .as_array()
            .unwrap()
            .contains(&"log_stats".into()),
        "{body}"
    );
    let check = micromegas_views_client::connect(&dsn(
        "localhost",
        &format!("sslmode=verify-full sslrootcert={ca}"),
    ))
    .await
    .unwrap();
    let row = check
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
              WHERE a.application_name = 'micromegas-views-client' AND a.pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    let (tls, all): (i64, i64) = (row.get(0), row.get(1));
    assert!(
        all > 0 && tls == all,
        "{tls} of {all} server connections over TLS"
    );
}
