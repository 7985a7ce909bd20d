//! How much column resolution planning a query costs, estimated from its
//! text before DataFusion sees it.
//!
//! DataFusion resolves every column a SELECT names, or that its `*` expands
//! to, by a linear search of the columns in scope, and checks each output
//! column against the others: a SELECT costs about (names it resolves +
//! output columns) × (columns in scope + output columns). That is quadratic
//! in the width, with no call back into us while it runs, so a few hundred
//! kilobytes of `SELECT *` nested over thousands of columns keep a planning
//! thread busy for minutes — past the validation time limit, which can only
//! answer the caller, not stop the thread. This module sums that product
//! over every SELECT of a query so that the planner module refuses a
//! query whose sum is over [`MAX_COLUMN_WORK`] before planning it.
//!
//! Widths come from the query itself: a select list's items, a `*` as wide
//! as everything its FROM reads, a view set as wide as its schema in the
//! catalog, a common table expression as wide as its body (planned once,
//! so its cost is counted once). What cannot be known before planning (a
//! table function's output) counts as one column. One walk of the tree:
//! linear in the text.

use crate::catalog::Catalog;
use sqlparser::ast::{Expr, Query, Select, SelectItem, SetExpr, TableFactor, Visit, Visitor};
use std::collections::HashMap;
use std::ops::ControlFlow;

/// The most column work a query may cost: about a second of planning in a
/// release build on this project's 2-core test machine (measured: 30–45 ns
/// a unit), far above real views (600 columns read and returned through ten
/// levels come to about 7.6 million) and far below what the text limit
/// allows.
pub const MAX_COLUMN_WORK: u64 = 25_000_000;

/// The column work of planning `query` (saturating). `source_table` is the
/// name `{source}` was replaced by and `source_width` its width, when the
/// query is a merge query.
pub fn column_work(
    query: &Query,
    catalog: &Catalog,
    source_table: &str,
    source_width: Option<usize>,
) -> u64 {
    let mut walk = Walk {
        catalog,
        source_table,
        source_width: source_width.unwrap_or(1) as u64,
        frames: Vec::new(),
        last_width: 0,
        work: 0,
    };
    let _ = query.visit(&mut walk);
    walk.work
}

/// A query being walked.
struct QueryFrame {
    /// Its common table expressions: body identity, name.
    bodies: Vec<(*const Query, String)>,
    /// Their widths, once walked.
    ctes: HashMap<String, u64>,
    /// The widest SELECT (or VALUES) of its body.
    width: u64,
    /// Names resolved against its output (ORDER BY).
    names: u64,
}

/// A SELECT being walked.
struct SelectFrame {
    /// The columns its FROM brings into scope.
    width_in: u64,
    /// The names its expressions resolve.
    names: u64,
}

enum Frame {
    Query(QueryFrame),
    Select(SelectFrame),
}

struct Walk<'a> {
    catalog: &'a Catalog,
    source_table: &'a str,
    source_width: u64,
    frames: Vec<Frame>,
    /// The width of the query walked last (a derived table's, when its
    /// table factor ends).
    last_width: u64,
    work: u64,
}

/// What resolving `names` names and checking `width_out` output columns
/// against `width_in` columns in scope costs.
fn cost(names: u64, width_in: u64, width_out: u64) -> u64 {
    names
        .saturating_add(width_out)
        .saturating_mul(width_in.saturating_add(width_out))
}

/// A name as DataFusion looks it up: unquoted names fold to lower case.
fn identifier_key(ident: &sqlparser::ast::Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

impl Walk<'_> {
    fn relation_width(&self, name: &str) -> u64 {
        let cte = self.frames.iter().rev().find_map(|frame| match frame {
            Frame::Query(q) => q.ctes.get(name).copied(),
            Frame::Select(_) => None,
        });
        if let Some(width) = cte {
            return width;
        }
        if name == self.source_table {
            return self.source_width;
        }
        self.catalog
            .get(name)
            .map_or(1, |entry| entry.schema.fields().len().max(1) as u64)
    }

    fn enclosing_query(&mut self) -> Option<&mut QueryFrame> {
        self.frames.iter_mut().rev().find_map(|frame| match frame {
            Frame::Query(q) => Some(q),
            Frame::Select(_) => None,
        })
    }
}

impl Visitor for Walk<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let bodies = query
            .with
            .iter()
            .flat_map(|with| with.cte_tables.iter())
            .map(|cte| {
                (
                    cte.query.as_ref() as *const Query,
                    identifier_key(&cte.alias.name),
                )
            })
            .collect();
        // VALUES has no SELECT to give the width.
        let width = match query.body.as_ref() {
            SetExpr::Values(values) => {
                values.rows.first().map_or(0, |row| row.content.len()) as u64
            }
            SetExpr::Table(table) => table
                .table_name
                .as_deref()
                .map_or(1, |name| self.relation_width(&name.to_lowercase())),
            _ => 0,
        };
        self.frames.push(Frame::Query(QueryFrame {
            bodies,
            ctes: HashMap::new(),
            width,
            names: 0,
        }));
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let Some(Frame::Query(frame)) = self.frames.pop() else {
            return ControlFlow::Continue(());
        };
        // ORDER BY resolves against the output; a set operation matches
        // its sides column by column (linear).
        let set_operation = matches!(query.body.as_ref(), SetExpr::SetOperation { .. });
        let own = cost(frame.names, frame.width, 0).saturating_add(if set_operation {
            frame.width
        } else {
            0
        });
        self.work = self.work.saturating_add(own);
        self.last_width = frame.width;
        let me = query as *const Query;
        match self.frames.last_mut() {
            // A common table expression's body is planned once, and read by
            // name as a table as wide as it.
            Some(Frame::Query(parent)) => {
                match parent.bodies.iter().find(|(body, _)| *body == me) {
                    Some((_, name)) => {
                        parent.ctes.insert(name.clone(), frame.width);
                    }
                    // A parenthesized query in its parent's body (or a set
                    // operation's side) makes the parent's output.
                    None => parent.width = parent.width.max(frame.width),
                }
            }
            // A derived table (counted when its table factor ends) or a
            // subquery in an expression (whose width does not matter).
            Some(Frame::Select(_)) | None => {}
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, _select: &Select) -> ControlFlow<()> {
        self.frames.push(Frame::Select(SelectFrame {
            width_in: 0,
            names: 0,
        }));
        ControlFlow::Continue(())
    }

    fn post_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        let Some(Frame::Select(frame)) = self.frames.pop() else {
            return ControlFlow::Continue(());
        };
        let width_out = select
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => frame.width_in,
                _ => 1,
            })
            .fold(0u64, u64::saturating_add);
        self.work = self
            .work
            .saturating_add(cost(frame.names, frame.width_in, width_out));
        if let Some(query) = self.enclosing_query() {
            query.width = query.width.max(width_out);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        let width = match factor {
            TableFactor::Table {
                name, args: None, ..
            } => match (name.0.len(), name.0.last().and_then(|part| part.as_ident())) {
                (1, Some(ident)) => self.relation_width(&identifier_key(ident)),
                _ => 1,
            },
            TableFactor::Derived { .. } => self.last_width,
            // Its own factors added themselves.
            TableFactor::NestedJoin { .. } => 0,
            _ => 1,
        };
        if let Some(Frame::Select(select)) = self.frames.last_mut() {
            select.width_in = select.width_in.saturating_add(width);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        if matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
            match self.frames.last_mut() {
                Some(Frame::Select(select)) => select.names = select.names.saturating_add(1),
                Some(Frame::Query(query)) => query.names = query.names.saturating_add(1),
                None => {}
            }
        }
        ControlFlow::Continue(())
    }
}
