//! The view-sets-as-code workflow against a real PostgreSQL with the
//! extension (MMV_TEST_DSN, set by scripts/test.sh). Each test works in its
//! own database so they can run in parallel.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn base_dsn() -> String {
    std::env::var("MMV_TEST_DSN").expect("MMV_TEST_DSN must name a database with micromegas_views")
}

/// A fresh database with the extension, named after the test.
fn database(name: &str) -> String {
    let admin = base_dsn();
    let psql = |dsn: &str, sql: &str| {
        let out = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    psql(&admin, &format!("DROP DATABASE IF EXISTS {name}"));
    psql(&admin, &format!("CREATE DATABASE {name}"));
    let dsn = format!(
        "{} dbname={name}",
        admin.replace("dbname=", "olddbname_ignored=")
    );
    let dsn = dsn
        .split_whitespace()
        .filter(|p| !p.starts_with("olddbname_ignored="))
        .collect::<Vec<_>>()
        .join(" ");
    // As the README installs it: btree_gist in a schema of its own. The
    // roles an earlier install made (with the other suites' members) are
    // adopted, as the superuser running the suites does everywhere.
    psql(
        &dsn,
        "SET micromegas_views.adopt_existing_roles = on; \
         CREATE SCHEMA btree_gist; CREATE EXTENSION btree_gist SCHEMA btree_gist; \
         CREATE EXTENSION micromegas_views",
    );
    dsn
}

fn cli(dsn: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_micromegas-views"))
        .args(["--dsn", dsn, "--actor", "ci-bot"])
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn query(dsn: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-X", "-A", "-t", "-d", dsn, "-c", sql])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mmv-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn view(name: &str, source: &str, cols: &str, group: i32) -> String {
    format!(
        "CREATE MATERIALIZED VIEW {name} WITH (\n  extract_query = 'SELECT {cols} FROM {source}',\n  \
         count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''',\n  \
         merge_partitions_query = 'SELECT {cols} FROM {{source}}',\n  update_group = {group},\n  time_column = 'time'\n);\n"
    )
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(format!("{name}.sql")), text).unwrap();
}

#[test]
fn pull_edit_plan_apply_round_trip() {
    let dsn = database("mmv_cli_round_trip");
    let dir = workdir("round-trip");
    let out = cli(&dsn, &["pull", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pulled = std::fs::read_to_string(dir.join("log_stats.sql")).unwrap();
    assert_eq!(pulled, query(&dsn, "SELECT definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'"));

    // Nothing changed: exit 0.
    let out = cli(&dsn, &["plan", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("unchanged log_stats"));
    // Whitespace, line endings and a missing ';' are not changes.
    write(
        &dir,
        "log_stats",
        &format!(
            "\r\n{}\r\n",
            pulled
                .trim_end()
                .trim_end_matches(';')
                .replace('\n', "\r\n")
        ),
    );
    assert_eq!(
        cli(&dsn, &["plan", dir.to_str().unwrap()]).status.code(),
        Some(0)
    );

    // Edit one, add one: exit 2, and the plan names both.
    write(
        &dir,
        "log_stats",
        &pulled.replace("'1 minute'", "'5 minutes'"),
    );
    write(
        &dir,
        "errors",
        &view("errors", "log_entries", "time, process_id", 4000),
    );
    let out = cli(&dsn, &["plan", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("+ create errors"), "{text}");
    assert!(text.contains("~ replace log_stats"), "{text}");
    assert!(
        text.contains("- ") && text.contains("'1 minute'") && text.contains("'5 minutes'"),
        "{text}"
    );
    assert!(
        text.contains("Plan: 1 to create, 1 to replace, 0 to drop, 0 unchanged."),
        "{text}"
    );
    assert!(
        !text.contains("\x1b["),
        "no color when not attached to a terminal"
    );
    // plan changed nothing.
    assert_eq!(
        query(
            &dsn,
            "SELECT count(*) FROM micromegas.lakehouse_view_set_definitions"
        ),
        "1"
    );

    let out = cli(&dsn, &["apply", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout(&out).contains("Applied 2 change(s)"));
    assert_eq!(
        query(&dsn, "SELECT string_agg(view_set_name || ':' || updated_by, ',' ORDER BY 1) FROM micromegas.list_view_set_definitions()"),
        "errors:ci-bot,log_stats:ci-bot"
    );
    assert_eq!(
        cli(&dsn, &["plan", dir.to_str().unwrap()]).status.code(),
        Some(0)
    );

    let out = cli(&dsn, &["list"]);
    assert!(
        stdout(&out).contains("errors") && stdout(&out).contains("ok"),
        "{}",
        stdout(&out)
    );
    let out = cli(&dsn, &["show", "errors"]);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("-- schema_hash: ")
            && stdout(&out).contains("process_id: Dictionary(Int32, Utf8)"),
        "{}",
        stdout(&out)
    );
    assert_eq!(cli(&dsn, &["show", "nope"]).status.code(), Some(1));
}

#[test]
fn a_validation_error_shows_at_plan_time_and_changes_nothing() {
    let dsn = database("mmv_cli_invalid");
    let dir = workdir("invalid");
    write(
        &dir,
        "broken",
        &view("broken", "log_entries", "now() AS time, process_id", 4000),
    );
    write(
        &dir,
        "misnamed",
        &view("other_name", "log_entries", "time, process_id", 4000),
    );
    let version = query(&dsn, "SELECT micromegas.mm_catalog_version()");
    let out = cli(&dsn, &["plan", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("broken: 42P17: extract_query calls now(), which is not immutable"),
        "{text}"
    );
    assert!(
        text.contains("misnamed.sql defines \"other_name\""),
        "{text}"
    );
    let out = cli(&dsn, &["apply", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        query(&dsn, "SELECT micromegas.mm_catalog_version()"),
        version
    );
}

#[test]
fn prune_drops_what_has_no_file_and_refuses_an_empty_directory() {
    let dsn = database("mmv_cli_prune");
    let dir = workdir("prune");
    let empty = workdir("prune-empty");
    write(
        &dir,
        "keep",
        &view("keep", "log_entries", "time, process_id", 4000),
    );
    write(
        &dir,
        "leaf",
        &view("leaf", "keep", "time, process_id", 5000),
    );
    assert!(cli(&dsn, &["apply", dir.to_str().unwrap()])
        .status
        .success());
    std::fs::remove_file(dir.join("leaf.sql")).unwrap();
    // Without --prune, a definition with no file is left alone.
    assert_eq!(
        cli(&dsn, &["plan", dir.to_str().unwrap()]).status.code(),
        Some(0)
    );
    let out = cli(&dsn, &["plan", "--prune", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).contains("- drop leaf") && stdout(&out).contains("- drop log_stats"),
        "{}",
        stdout(&out)
    );
    assert!(cli(&dsn, &["apply", "--prune", dir.to_str().unwrap()])
        .status
        .success());
    assert_eq!(
        query(
            &dsn,
            "SELECT string_agg(view_set_name, ',') FROM micromegas.list_view_set_definitions()"
        ),
        "keep"
    );
    let out = cli(&dsn, &["apply", "--prune", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to --prune"));
    assert_eq!(
        query(
            &dsn,
            "SELECT count(*) FROM micromegas.list_view_set_definitions()"
        ),
        "1"
    );
}

#[test]
fn an_apply_that_fails_midway_leaves_the_database_unchanged() {
    let dsn = database("mmv_cli_midway");
    let dir = workdir("midway");
    write(
        &dir,
        "base",
        &view("base", "log_entries", "time, process_id, level", 4000),
    );
    assert!(cli(&dsn, &["apply", dir.to_str().unwrap()])
        .status
        .success());
    let version = query(&dsn, "SELECT micromegas.mm_catalog_version()");
    // Each change is valid on its own, but applied in order the replace
    // removes the column the new view reads: the plan's dry run of the whole
    // sequence shows it, and an apply fails at the second step.
    write(
        &dir,
        "base",
        &view("base", "log_entries", "time, process_id", 4000),
    );
    write(
        &dir,
        "reader",
        &view("reader", "base", "time, process_id, level", 5000),
    );
    let out = cli(&dsn, &["plan", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("reader: 42P17: extract_query does not plan"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        query(&dsn, "SELECT micromegas.mm_catalog_version()"),
        version
    );
    let out = cli(&dsn, &["apply", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reader") && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(
        query(&dsn, "SELECT micromegas.mm_catalog_version()"),
        version
    );
    assert_eq!(query(&dsn, "SELECT count(*) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'reader'"), "0");
    assert!(query(&dsn, "SELECT extract_query FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'base'").contains("level"));
}

#[test]
fn a_file_with_leading_comments_non_ascii_and_crlf_round_trips() {
    let dsn = database("mmv_cli_comments");
    let dir = workdir("comments");
    assert!(cli(&dsn, &["pull", dir.to_str().unwrap()]).status.success());
    let pulled = std::fs::read_to_string(dir.join("log_stats.sql")).unwrap();
    let annotated = |text: &str| {
        format!(
            "-- Owner: équipe données\r\n/* CREATE MATERIALIZED VIEW in a comment */\r\n{}",
            text.replace('\n', "\r\n")
        )
    };
    // A comment and CRLF line ends change no definition.
    write(&dir, "log_stats", &annotated(&pulled));
    let out = cli(&dsn, &["plan", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("unchanged log_stats"),
        "{}",
        stdout(&out)
    );
    // A real change in such a file plans and applies, and is stored as written.
    let edited = annotated(&pulled.replace("'1 minute'", "'5 minutes'"));
    write(&dir, "log_stats", &edited);
    let out = cli(&dsn, &["plan", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("~ replace log_stats"),
        "{}",
        stdout(&out)
    );
    let out = cli(&dsn, &["apply", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let stored = query(
        &dsn,
        "SELECT definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'",
    );
    assert!(stored.starts_with("-- Owner: équipe données"), "{stored}");
    assert!(
        stored.contains("CREATE OR REPLACE MATERIALIZED VIEW log_stats"),
        "{stored}"
    );
    assert!(stored.contains("'5 minutes'"), "{stored}");
    let out = cli(&dsn, &["plan", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn every_subcommand_has_help() {
    for sub in ["plan", "apply", "pull", "list", "show"] {
        let out = Command::new(env!("CARGO_BIN_EXE_micromegas-views"))
            .args([sub, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage: micromegas-views"),
            "{sub}"
        );
    }
}

#[test]
fn plan_prints_the_author_checks_findings_under_the_definition() {
    let dsn = database("mmv_cli_author_checks");
    let dir = workdir("author_checks");
    let counts = "CREATE MATERIALIZED VIEW merged_counts WITH (\n  \
        extract_query = 'SELECT time, process_id, count(*) AS count FROM log_entries WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}'' GROUP BY 1, 2',\n  \
        count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',\n  \
        merge_partitions_query = 'SELECT time, process_id, count(*) AS count FROM {source} GROUP BY 1, 2',\n  \
        update_group = 4000,\n  time_column = 'time'\n);\n";
    write(&dir, "merged_counts", counts);
    write(
        &dir,
        "clean",
        &view("clean", "log_entries", "time, process_id", 4000),
    );
    let out = cli(&dsn, &["plan", dir.to_str().unwrap()]);
    // A finding is a warning: the plan has no problem and can be applied.
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let text = stdout(&out);
    let warning = "    warning (non_composable_merge): merge_partitions_query computes count(*) (column \"count\") over partitions that are already aggregated";
    assert!(text.contains(warning), "{text}");
    assert_eq!(text.matches("warning (").count(), 1, "{text}");
    // Printed under its definition, before the next one.
    let at = text.find(warning).unwrap();
    assert!(text[..at].contains("+ create merged_counts"), "{text}");
    let out = cli(&dsn, &["apply", dir.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Colour only on a terminal, and never with NO_COLOR: `plan` runs under
/// `script` (util-linux), which gives it a pseudo-terminal. And without
/// `--actor` the change is recorded as the OS user ($USER), else as
/// `micromegas-views`.
#[test]
fn colour_follows_the_terminal_and_the_actor_defaults_to_the_os_user() {
    let dsn = database("mmv_cli_terminal");
    let dir = workdir("terminal");
    write(
        &dir,
        "a_view",
        &view("a_view", "log_entries", "time, process_id", 4000),
    );
    let plan = format!(
        "{} --dsn '{dsn}' plan {}",
        env!("CARGO_BIN_EXE_micromegas-views"),
        dir.to_str().unwrap()
    );
    let on_terminal = |no_color: bool| {
        let mut command = Command::new("script");
        command.args(["-q", "-e", "-c", &plan, "/dev/null"]);
        if no_color {
            command.env("NO_COLOR", "1");
        } else {
            command.env_remove("NO_COLOR");
        }
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
        stdout(&out)
    };
    let coloured = on_terminal(false);
    assert!(coloured.contains("+ create a_view"), "{coloured}");
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = on_terminal(true);
    assert!(plain.contains("+ create a_view"), "{plain}");
    assert!(!plain.contains("\x1b["), "colour with NO_COLOR: {plain:?}");
    // Piped (not a terminal): no colour either.
    let piped = Command::new(env!("CARGO_BIN_EXE_micromegas-views"))
        .args(["--dsn", &dsn, "plan", dir.to_str().unwrap()])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert!(!stdout(&piped).contains("\x1b["), "{}", stdout(&piped));

    let apply = |user: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_micromegas-views"));
        command.args(["--dsn", &dsn, "apply", dir.to_str().unwrap()]);
        match user {
            Some(u) => command.env("USER", u),
            None => command.env_remove("USER"),
        };
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        query(&dsn, "SELECT updated_by FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'a_view'")
    };
    assert_eq!(apply(Some("ops-person")), "ops-person");
    write(
        &dir,
        "a_view",
        &view("a_view", "log_entries", "time, process_id", 4100),
    );
    assert_eq!(apply(None), "micromegas-views");
}

/// `apply` plans every step before its transaction takes the catalog lock:
/// while it validates a slow view that comes second (a 350-way join,
/// seconds of planning), a service's registration under a 2 s lock_timeout
/// goes through, and the slow view is then written from what was planned.
#[test]
fn apply_plans_its_steps_before_it_holds_the_catalog_lock() {
    let dsn = database("mmv_cli_ahead");
    let dir = workdir("ahead");
    write(&dir, "quick", &view("quick", "log_entries", "time, process_id", 4000));
    let joins = (1..350)
        .map(|i| format!("JOIN log_entries e{i} ON e{i}.process_id = e0.process_id"))
        .collect::<Vec<_>>()
        .join(" ");
    write(
        &dir,
        "slow",
        &format!(
            "CREATE MATERIALIZED VIEW slow WITH (\n  extract_query = 'SELECT e0.time, e0.process_id FROM log_entries e0 {joins}',\n  \
             count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''',\n  \
             merge_partitions_query = 'SELECT * FROM {{source}}',\n  update_group = 5000,\n  time_column = 'time'\n);\n"
        ),
    );
    let slow_dsn = format!("{dsn} options='-c micromegas_views.validation_timeout=60s'");
    let mut apply = Command::new(env!("CARGO_BIN_EXE_micromegas-views"))
        .args(["--dsn", &slow_dsn, "--actor", "ci-bot", "apply", dir.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let registered = Command::new("psql")
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", &dsn])
        .args(["-c", "SET lock_timeout = '2s'"])
        .args([
            "-c",
            "SELECT view_set_name FROM micromegas.mm_register_builtin_view_set('during_apply', \
             '{\"fields\": [{\"name\": \"time\", \"type\": \"Timestamp(ns, \\\"+00:00\\\")\"}]}', 500, 'raw')",
        ])
        .output()
        .unwrap();
    // The registration shows nothing unless the validation was still going.
    let still_running = apply.try_wait().unwrap().is_none();
    let out = apply.wait_with_output().unwrap();
    assert!(
        registered.status.success(),
        "the registration waited for apply: {}",
        String::from_utf8_lossy(&registered.stderr)
    );
    assert!(still_running, "apply ended before the registration: this test needs a slower view");
    assert!(out.status.success(), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        query(
            &dsn,
            "SELECT string_agg(view_set_name, ',' ORDER BY view_set_name) FROM micromegas.lakehouse_view_set_definitions \
             WHERE view_set_name IN ('quick', 'slow')"
        ),
        "quick,slow"
    );
}

/// A failed connection names the host, the port and the cause, and what to
/// check; `show` of a name that is not defined says where a dropped view's
/// versions are.
#[test]
fn mistakes_get_messages_that_say_where_and_what_next() {
    // Port 1 on loopback: nothing listens there.
    let out = cli("host=127.0.0.1 port=1 dbname=x user=nobody", &["list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect to host 127.0.0.1 port 1"), "{err}");
    assert!(err.contains("Connection refused"), "{err}");
    assert!(err.contains("HINT: check --dsn, or PGHOST and PGPORT"), "{err}");

    let dsn = database("mmv_cli_mistakes");
    let out = cli(&dsn, &["show", "never_there"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("materialized view \"never_there\" does not exist"), "{err}");
    assert!(err.contains("micromegas.mm_view_history('never_there')"), "{err}");
    let out = cli(&dsn, &["show", "blocks"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"blocks\" is a built-in view set, not a materialized view"), "{err}");

    // A reader's apply: Postgres names the function; the CLI adds who may.
    query(
        &dsn,
        "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mmv_cli_reader') THEN \
         CREATE ROLE mmv_cli_reader LOGIN IN ROLE micromegas_reader; END IF; END$$",
    );
    let dir = workdir("mistakes");
    write(&dir, "r", &view("r", "log_entries", "time, process_id", 4000));
    let reader = dsn.replace("user=postgres", "user=mmv_cli_reader");
    assert!(reader.contains("user=mmv_cli_reader"), "{reader}");
    let out = cli(&reader, &["apply", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("42501"), "{err}");
    assert!(err.contains("HINT: plan and apply need a role that is a member of micromegas_admin"), "{err}");
    // Roles are the cluster's: leave none behind.
    query(&dsn, "DROP ROLE mmv_cli_reader");
}
