//! Desired state (files) vs current state (the table): the plan, its
//! rendering and its application.

use micromegas_views_core::{ddl, Definition, Statement};
use similar::{ChangeTag, TextDiff};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use tokio_postgres::Client;

pub fn pg_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!("{}: {}", db.code().code(), db.message());
            if let Some(detail) = db.detail() {
                text.push_str(&format!("\n  DETAIL: {detail}"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("\n  HINT: {hint}"));
            } else if *db.code() == tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE {
                // Postgres names the object, not the role that may use it.
                text.push_str(
                    "\n  HINT: plan and apply need a role that is a member of micromegas_admin (plan's \
                     dry run writes and rolls back); pull, list and show need micromegas_reader (the \
                     privilege matrix in the extension's operations docs lists who may call what)",
                );
            }
            text
        }
        None => e.to_string(),
    }
}

/// The definition a statement describes, when it parses. Line ends are
/// read as `\n` everywhere, inside the queries too: a file checked out with
/// CRLF defines the same view.
fn definition(statement: &str) -> Option<Definition> {
    let statement = statement.replace("\r\n", "\n").replace('\r', "\n");
    match ddl::parse(&statement) {
        Ok(Statement::Create(create)) => Definition::from_statement(&create).ok(),
        _ => None,
    }
}

/// Line ends, surrounding whitespace and a trailing `;` of a text.
fn normalized(statement: &str) -> String {
    let text = statement.replace("\r\n", "\n").replace('\r', "\n");
    let text = text.trim();
    text.strip_suffix(';')
        .unwrap_or(text)
        .trim_end()
        .to_string()
}

/// Two statements define the same view when their parsed definitions are
/// equal: comments, layout, keyword case, `OR REPLACE` and a trailing `;` do
/// not count. Text that does not parse is compared as written.
pub fn same_definition(a: &str, b: &str) -> bool {
    match (definition(a), definition(b)) {
        (Some(x), Some(y)) => x == y,
        _ => normalized(a) == normalized(b),
    }
}

/// What the plan's diff shows of a statement: its definition rendered
/// canonically (one option per line), or its text when it does not parse.
fn shown(statement: &str) -> String {
    definition(statement)
        .map(|d| d.render(false))
        .unwrap_or_else(|| normalized(statement))
}

/// The statement as apply sends it when the view exists: the file's own
/// text with OR REPLACE after its CREATE keyword (found by the parser).
fn with_or_replace(statement: &str) -> String {
    match ddl::parse(statement) {
        Ok(Statement::Create(create)) => create.with_or_replace(statement),
        _ => statement.to_string(),
    }
}

#[derive(Debug)]
pub enum Action {
    Create {
        statement: String,
        group: i32,
    },
    Replace {
        statement: String,
        current: String,
        group: i32,
    },
    Unchanged,
    Drop {
        group: i32,
    },
}

pub struct Plan {
    pub items: BTreeMap<String, Action>,
    pub problems: Vec<(String, String)>,
    /// The author-check findings of each view the dry run wrote, as
    /// `(check, message)`: shown under the definition, never blocking.
    pub warnings: BTreeMap<String, Vec<(String, String)>>,
}

impl Plan {
    pub fn has_changes(&self) -> bool {
        self.items.values().any(|a| !matches!(a, Action::Unchanged))
    }

    pub fn has_problems(&self) -> bool {
        !self.problems.is_empty()
    }

    pub fn render(&self, color: bool) -> String {
        let paint = |code: &str, text: &str| {
            if color {
                format!("\x1b[{code}m{text}\x1b[0m")
            } else {
                text.to_string()
            }
        };
        let mut out = String::new();
        for (name, action) in &self.items {
            render_item(&mut out, name, action, &paint);
            for (check, message) in self.warnings.get(name).into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "{}",
                    paint("35", &format!("    warning ({check}): {message}"))
                );
            }
        }
        for (name, problem) in &self.problems {
            let _ = writeln!(out, "{}", paint("31;1", &format!("! {name}: {problem}")));
        }
        let count = |f: fn(&Action) -> bool| self.items.values().filter(|a| f(a)).count();
        let _ = writeln!(
            out,
            "Plan: {} to create, {} to replace, {} to drop, {} unchanged{}.",
            count(|a| matches!(a, Action::Create { .. })),
            count(|a| matches!(a, Action::Replace { .. })),
            count(|a| matches!(a, Action::Drop { .. })),
            count(|a| matches!(a, Action::Unchanged)),
            if self.problems.is_empty() {
                String::new()
            } else {
                format!(", {} problem(s)", self.problems.len())
            }
        );
        out
    }

    /// The SQL statements of the plan, in the order that satisfies
    /// dependencies: creates and replaces in ascending update_group, then
    /// drops in descending update_group.
    fn steps(&self) -> Vec<(String, &'static str, String)> {
        let mut writes: Vec<(&String, &Action)> = self
            .items
            .iter()
            .filter(|(_, a)| matches!(a, Action::Create { .. } | Action::Replace { .. }))
            .collect();
        writes.sort_by_key(|(name, a)| match a {
            Action::Create { group, .. } | Action::Replace { group, .. } => {
                (*group, (*name).clone())
            }
            _ => unreachable!(),
        });
        let mut drops: Vec<(&String, i32)> = self
            .items
            .iter()
            .filter_map(|(n, a)| match a {
                Action::Drop { group } => Some((n, *group)),
                _ => None,
            })
            .collect();
        drops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let mut steps = Vec::new();
        for (name, action) in writes {
            let statement = match action {
                Action::Replace { statement, .. } => with_or_replace(statement),
                Action::Create { statement, .. } => statement.clone(),
                _ => unreachable!(),
            };
            steps.push((
                name.clone(),
                "SELECT micromegas.mm_create_view($1::text)",
                statement,
            ));
        }
        for (name, _) in drops {
            steps.push((
                name.clone(),
                "SELECT micromegas.mm_drop_view($1::name, false)",
                name.clone(),
            ));
        }
        steps
    }

    /// Plans every create and replace before the transaction that writes
    /// them takes the catalog lock, each by the read-only dry run
    /// (`mm_explain_view`: no lock taken or waited for). The backend
    /// remembers each answer under the catalog rows it read, so the writes
    /// that follow take it from memory instead of planning while their
    /// transaction holds the lock; only a step that reads a view an earlier
    /// step writes is planned again there. Its outcome is the writes' to
    /// report: nothing here is a problem.
    pub async fn plan_ahead(&self, client: &Client) {
        for (_, sql, statement) in self.steps() {
            if sql.contains("mm_create_view") {
                let _ = client
                    .query("SELECT 1 FROM micromegas.mm_explain_view($1::text)", &[&statement])
                    .await;
            }
        }
    }

    /// The dry run of the whole plan: every step, in order, each seeing the
    /// ones before it, in a transaction that is rolled back. Each failing
    /// step is recorded as a problem (and undone, so the others still run).
    pub async fn dry_run(&mut self, client: &mut Client) -> Result<(), String> {
        let tx = client.transaction().await.map_err(|e| pg_error(&e))?;
        for (name, sql, argument) in self.steps() {
            tx.batch_execute("SAVEPOINT step")
                .await
                .map_err(|e| pg_error(&e))?;
            if let Err(e) = tx.execute(sql, &[&argument]).await {
                self.problems.push((name, pg_error(&e)));
                tx.batch_execute("ROLLBACK TO SAVEPOINT step")
                    .await
                    .map_err(|e| pg_error(&e))?;
                continue;
            }
            // The author checks' findings of the row just written.
            let found = tx
                .query(
                    "SELECT w->>'check', w->>'message'
                       FROM micromegas.lakehouse_view_set_definitions d,
                            jsonb_array_elements(d.warnings) w
                      WHERE d.view_set_name = $1",
                    &[&name],
                )
                .await
                .map_err(|e| pg_error(&e))?;
            if !found.is_empty() {
                self.warnings.insert(
                    name.clone(),
                    found.iter().map(|r| (r.get(0), r.get(1))).collect(),
                );
            }
        }
        tx.rollback().await.map_err(|e| pg_error(&e))
    }

    /// Applies every step in one transaction, all or nothing.
    pub async fn apply(&self, client: &mut Client, actor: &str) -> Result<usize, String> {
        let tx = client.transaction().await.map_err(|e| pg_error(&e))?;
        tx.execute(
            "SELECT set_config('micromegas_views.actor', $1, true)",
            &[&actor],
        )
        .await
        .map_err(|e| pg_error(&e))?;
        let steps = self.steps();
        for (name, sql, argument) in &steps {
            // On error the transaction is dropped, which rolls it back.
            tx.execute(*sql, &[argument])
                .await
                .map_err(|e| format!("{name}: {}; nothing was changed", pg_error(&e)))?;
        }
        tx.commit().await.map_err(|e| pg_error(&e))?;
        Ok(steps.len())
    }
}

/// One item of the plan: the statement created, the diff replaced, or the
/// name kept or dropped.
fn render_item(
    out: &mut String,
    name: &str,
    action: &Action,
    paint: &dyn Fn(&str, &str) -> String,
) {
    match action {
        Action::Create { statement, .. } => {
            let _ = writeln!(out, "{}", paint("32", &format!("+ create {name}")));
            for line in statement.lines() {
                let _ = writeln!(out, "{}", paint("32", &format!("    + {line}")));
            }
        }
        Action::Replace {
            statement, current, ..
        } => {
            let _ = writeln!(out, "{}", paint("33", &format!("~ replace {name}")));
            let (old, new) = (shown(current), shown(statement));
            let diff = TextDiff::from_lines(&old, &new);
            for change in diff.iter_all_changes() {
                let line = change.to_string_lossy();
                let line = line.trim_end_matches('\n');
                match change.tag() {
                    ChangeTag::Delete => {
                        let _ = writeln!(out, "{}", paint("31", &format!("    - {line}")));
                    }
                    ChangeTag::Insert => {
                        let _ = writeln!(out, "{}", paint("32", &format!("    + {line}")));
                    }
                    ChangeTag::Equal => {
                        let _ = writeln!(out, "      {line}");
                    }
                }
            }
        }
        Action::Unchanged => {
            let _ = writeln!(out, "  unchanged {name}");
        }
        Action::Drop { .. } => {
            let _ = writeln!(out, "{}", paint("31", &format!("- drop {name}")));
        }
    }
}

/// Reads the directory and compares it with the table.
pub async fn make(client: &Client, dir: &Path, prune: bool) -> Result<Plan, String> {
    let mut files = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("sql") {
            continue;
        }
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        files.insert(stem, (path, text));
    }
    if prune && files.is_empty() {
        return Err(format!(
            "{} holds no .sql file; refusing to --prune every definition",
            dir.display()
        ));
    }
    let rows = client
        .query("SELECT view_set_name, definition_sql, update_group FROM micromegas.list_view_set_definitions()", &[])
        .await
        .map_err(|e| pg_error(&e))?;
    let current: BTreeMap<String, (String, i32)> = rows
        .iter()
        .map(|r| {
            (
                r.get::<_, String>(0),
                (r.get::<_, String>(1), r.get::<_, i32>(2)),
            )
        })
        .collect();

    let mut plan = Plan {
        items: BTreeMap::new(),
        problems: Vec::new(),
        warnings: BTreeMap::new(),
    };
    for (stem, (path, text)) in &files {
        let parsed = match ddl::parse(text) {
            Ok(Statement::Create(create)) => create,
            Ok(Statement::Drop(_)) => {
                plan.problems.push((
                    stem.clone(),
                    format!("{} holds a DROP statement", path.display()),
                ));
                continue;
            }
            Err(e) => {
                plan.problems
                    .push((stem.clone(), format!("{}: {e}", path.display())));
                continue;
            }
        };
        if parsed.name != *stem {
            plan.problems.push((
                stem.clone(),
                format!(
                    "{} defines \"{}\"; the file must be named {}.sql",
                    path.display(),
                    parsed.name,
                    parsed.name
                ),
            ));
            continue;
        }
        let group = micromegas_views_core::Definition::from_statement(&parsed)
            .map(|d| d.update_group)
            .unwrap_or(0);
        let action = match current.get(stem) {
            None => Action::Create {
                statement: text.clone(),
                group,
            },
            Some((sql, _)) if same_definition(sql, text) => Action::Unchanged,
            Some((sql, _)) => Action::Replace {
                statement: text.clone(),
                current: sql.clone(),
                group,
            },
        };
        plan.items.insert(stem.clone(), action);
    }
    for (name, (_, group)) in &current {
        if !files.contains_key(name) {
            if prune {
                plan.items
                    .insert(name.clone(), Action::Drop { group: *group });
            }
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::{same_definition, with_or_replace};

    const V: &str = "CREATE MATERIALIZED VIEW v WITH (extract_query = 'SELECT 1', count_src_query = 'SELECT 2', merge_partitions_query = 'SELECT 3', update_group = 1, time_column = 't')";

    #[test]
    fn definitions_compare_parsed() {
        let commented = format!(
            "-- Owner: équipe données\r\n{}\r\n",
            V.replace("CREATE", "create or replace")
        );
        assert!(same_definition(V, &commented));
        assert!(same_definition(V, &format!("{V};")));
        assert!(!same_definition(
            V,
            &V.replace("update_group = 1", "update_group = 2")
        ));
        // Text that does not parse is compared as written.
        assert!(same_definition("nonsense;", "nonsense"));
        assert!(!same_definition(V, "nonsense"));
    }

    #[test]
    fn or_replace_keeps_the_file_as_written() {
        let file = format!("-- Owner: équipe données\r\n{V}\r\n");
        assert_eq!(
            with_or_replace(&file),
            format!(
                "-- Owner: équipe données\r\n{}\r\n",
                V.replace("CREATE", "CREATE OR REPLACE")
            )
        );
    }
}
