//! The server binary's start-up rules, run as an operator runs it: no key
//! file means no service unless `--insecure-no-auth` says so, and a key
//! file with a weak, duplicate or missing key is refused before anything
//! listens. Needs no database.

use std::process::{Command, Output, Stdio};

fn server(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_micromegas-views-server"));
    command
        .args(args)
        .env_remove("MICROMEGAS_VIEWS_SERVER_KEYS")
        .stdin(Stdio::null());
    command
}

fn run(args: &[&str]) -> Output {
    server(args).output().expect("the server binary runs")
}

fn refused(output: &Output, mentions: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "started: {stderr}");
    assert!(stderr.contains(mentions), "{mentions:?} not in {stderr}");
}

fn key_file(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("mmv-startup-{}-{name}.json", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn refuses_to_serve_without_authentication() {
    let output = run(&["--dsn", "host=127.0.0.1 port=1", "--listen", "127.0.0.1:0"]);
    refused(
        &output,
        "refusing to serve without authentication unless --insecure-no-auth",
    );
}

#[test]
fn refuses_a_bad_key_file() {
    let cases = [
        (
            "short",
            r#"{"keys": [{"name": "a", "key": "fifteen-chars-x", "role": "r"}]}"#,
            "at least 16 characters",
        ),
        (
            "noname",
            r#"{"keys": [{"name": " ", "key": "sixteen-chars-xx", "role": "r"}]}"#,
            "every key needs a name",
        ),
        (
            "norole",
            r#"{"keys": [{"name": "a", "key": "sixteen-chars-xx", "role": ""}]}"#,
            "a role",
        ),
        (
            "dupsecret",
            r#"{"keys": [{"name": "a", "key": "sixteen-chars-xx", "role": "r"}, {"name": "b", "key": "sixteen-chars-xx", "role": "r"}]}"#,
            r#"keys "a" and "b" have the same secret"#,
        ),
        (
            "dupname",
            r#"{"keys": [{"name": "a", "key": "sixteen-chars-xx", "role": "r"}, {"name": "a", "key": "sixteen-chars-yy", "role": "r"}]}"#,
            r#"two keys are named "a""#,
        ),
        ("empty", r#"{"keys": []}"#, "has no key"),
        ("unknown", r#"{"keys": [], "admin": true}"#, "is not valid"),
        ("notjson", "keys", "is not valid"),
    ];
    for (name, text, mentions) in cases {
        let path = key_file(name, text);
        let output = run(&[
            "--dsn",
            "host=127.0.0.1 port=1",
            "--listen",
            "127.0.0.1:0",
            "--keys",
            &path,
        ]);
        refused(&output, mentions);
        // The message names the file, never a secret.
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&path), "{stderr}");
        assert!(
            !stderr.contains("sixteen-chars") && !stderr.contains("fifteen-chars"),
            "{stderr}"
        );
        std::fs::remove_file(&path).unwrap();
    }
    let output = run(&[
        "--dsn",
        "host=127.0.0.1 port=1",
        "--keys",
        "/nonexistent/keys.json",
    ]);
    refused(&output, "cannot read key file /nonexistent/keys.json");
}

/// With `--insecure-no-auth` it serves, and a request without credentials
/// is not refused as unauthenticated: it reaches the (here unreachable)
/// database and is answered 503.
#[tokio::test]
async fn serves_without_keys_only_when_told() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = server(&[
        "--dsn",
        "host=127.0.0.1 port=1 connect_timeout=2",
        "--listen",
        &listen,
        "--insecure-no-auth",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let http = reqwest::Client::new();
    let mut answer = None;
    for _ in 0..100 {
        if let Ok(response) = http
            .post(format!("http://{listen}/v1/table/micromegas$v/describe"))
            .json(&serde_json::json!({}))
            .send()
            .await
        {
            answer = Some((
                response.status().as_u16(),
                response.json::<serde_json::Value>().await.unwrap(),
            ));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (status, body) = answer.expect("the server answered");
    assert_eq!(
        (status, &body["code"]),
        (503, &serde_json::json!(17)),
        "{body}"
    );
}
