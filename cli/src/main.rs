//! micromegas-views: view sets as code. A directory of `<name>.sql` files,
//! each one `CREATE [OR REPLACE] MATERIALIZED VIEW <name> …`, is the desired
//! state; `plan` shows what `apply` would change, `apply` changes it in one
//! transaction, `pull` writes the current definitions out.

mod plan;

use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "micromegas-views",
    version,
    about = "Manage micromegas view set definitions as a directory of .sql files"
)]
struct Cli {
    /// Connection string (libpq style, e.g. "host=db dbname=micromegas user=admin");
    /// unset parts come from PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD.
    #[arg(long, global = true, default_value = "")]
    dsn: String,
    /// The identity recorded as updated_by (micromegas_views.actor); default: $USER, else micromegas-views.
    #[arg(long, global = true)]
    actor: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what apply would do, and dry-run it (in a transaction that is
    /// rolled back); exit 0 = no changes, 2 = changes, 1 = error.
    Plan {
        /// The directory of <name>.sql files.
        dir: PathBuf,
        /// Also drop definitions that have no file.
        #[arg(long)]
        prune: bool,
    },
    /// Apply the plan in one transaction, all or nothing.
    Apply {
        dir: PathBuf,
        #[arg(long)]
        prune: bool,
    },
    /// Write every current definition to <dir>/<name>.sql (verbatim).
    Pull { dir: PathBuf },
    /// List the definitions: name, group, updated_at, updated_by, load status.
    List,
    /// Show one definition with its schema and hash.
    Show { name: String },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let actor = cli
        .actor
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "micromegas-views".into());
    match run(cli, &actor, color).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// A failed connection, naming where it went (host and port, as the
/// connection string and the libpq environment resolve them) and every
/// cause down the chain.
fn connect_error(dsn: &str, e: &tokio_postgres::Error) -> String {
    use tokio_postgres::config::Host;
    let target = match micromegas_views_client::connection(dsn) {
        Ok((config, _)) => {
            let hosts: Vec<String> = config
                .get_hosts()
                .iter()
                .map(|h| match h {
                    Host::Tcp(name) => name.clone(),
                    Host::Unix(path) => path.display().to_string(),
                })
                .collect();
            let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
            format!(
                " to host {} port {}",
                if hosts.is_empty() { "(none given)".into() } else { hosts.join(",") },
                if ports.is_empty() { "5432".into() } else { ports.join(",") }
            )
        }
        Err(_) => String::new(),
    };
    let mut text = format!("cannot connect{target}: {}", plan::pg_error(e));
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(&format!(": {cause_text}"));
        }
        source = cause.source();
    }
    text.push_str("\n  HINT: check --dsn, or PGHOST and PGPORT, and that the server accepts connections there");
    text
}

async fn run(cli: Cli, actor: &str, color: bool) -> Result<ExitCode, String> {
    let mut client = micromegas_views_client::connect(&cli.dsn)
        .await
        .map_err(|e| connect_error(&cli.dsn, &e))?;
    match cli.command {
        Command::Plan { dir, prune } => {
            let mut plan = plan::make(&client, &dir, prune).await?;
            plan.plan_ahead(&client).await;
            plan.dry_run(&mut client).await?;
            print!("{}", plan.render(color));
            Ok(if plan.has_problems() {
                ExitCode::from(1)
            } else if plan.has_changes() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Apply { dir, prune } => {
            let plan = plan::make(&client, &dir, prune).await?;
            print!("{}", plan.render(color));
            if plan.has_problems() {
                return Err("the plan has problems; nothing was changed".into());
            }
            if !plan.has_changes() {
                println!("Nothing to apply.");
                return Ok(ExitCode::SUCCESS);
            }
            plan.plan_ahead(&client).await;
            let applied = plan.apply(&mut client, actor).await?;
            println!("Applied {applied} change(s) in one transaction.");
            Ok(ExitCode::SUCCESS)
        }
        Command::Pull { dir } => {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let rows = client
                .query("SELECT view_set_name, definition_sql FROM micromegas.list_view_set_definitions()", &[])
                .await
                .map_err(|e| plan::pg_error(&e))?;
            for row in &rows {
                let name: String = row.get(0);
                let sql: String = row.get(1);
                let path = dir.join(format!("{name}.sql"));
                std::fs::write(&path, sql).map_err(|e| format!("{}: {e}", path.display()))?;
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::List => {
            let rows = client
                .query(
                    "SELECT view_set_name, update_group, to_char(updated_at, 'YYYY-MM-DD HH24:MI:SS TZ'), \
                     coalesce(updated_by, ''), load_status, coalesce(load_error, '') \
                     FROM micromegas.list_view_set_definitions()",
                    &[],
                )
                .await
                .map_err(|e| plan::pg_error(&e))?;
            println!(
                "{:<32} {:>12}  {:<23}  {:<20} load",
                "name", "update_group", "updated_at", "updated_by"
            );
            for row in &rows {
                let (name, group, at, by, status, error): (
                    String,
                    i32,
                    String,
                    String,
                    String,
                    String,
                ) = (
                    row.get(0),
                    row.get(1),
                    row.get(2),
                    row.get(3),
                    row.get(4),
                    row.get(5),
                );
                let status = if error.is_empty() {
                    status
                } else {
                    format!("{status}: {error}")
                };
                println!("{name:<32} {group:>12}  {at:<23}  {by:<20} {status}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { name } => {
            let row = client
                .query_opt(
                    // Only public functions: micromegas_reader may run `show`.
                    "SELECT d.definition_sql, d.update_group, coalesce(s.schema, '(not loaded)'), \
                     encode(d.schema_hash, 'hex'), array_to_string(d.reads, ', '), d.load_status, \
                     coalesce(d.load_error, '') \
                     FROM micromegas.lakehouse_view_set_definitions d \
                     LEFT JOIN micromegas.list_view_sets() s ON s.view_set_name = d.view_set_name \
                     WHERE d.view_set_name = $1",
                    &[&name],
                )
                .await
                .map_err(|e| plan::pg_error(&e))?;
            let Some(row) = row else {
                let builtin = client
                    .query_opt(
                        "SELECT 1 FROM micromegas.list_view_sets() WHERE view_set_name = $1",
                        &[&name],
                    )
                    .await
                    .map_err(|e| plan::pg_error(&e))?
                    .is_some();
                return Err(if builtin {
                    format!(
                        "\"{name}\" is a built-in view set, not a materialized view\n  HINT: its schema is \
                         in SELECT * FROM micromegas.list_view_sets(); show lists the views made with \
                         CREATE MATERIALIZED VIEW"
                    )
                } else {
                    format!(
                        "materialized view \"{name}\" does not exist\n  HINT: if it was dropped, \
                         SELECT * FROM micromegas.mm_view_history('{name}') lists its versions"
                    )
                });
            };
            let (sql, group, schema, hash, reads, status, error): (
                String,
                i32,
                String,
                String,
                String,
                String,
                String,
            ) = (
                row.get(0),
                row.get(1),
                row.get(2),
                row.get(3),
                row.get(4),
                row.get(5),
                row.get(6),
            );
            println!("{sql}\n");
            println!("-- update_group: {group}");
            println!("-- reads: {reads}");
            println!("-- schema_hash: {hash}");
            println!(
                "-- load_status: {status}{}",
                if error.is_empty() {
                    String::new()
                } else {
                    format!(" ({error})")
                }
            );
            println!("-- schema:");
            for line in schema.lines() {
                println!("--   {line}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
