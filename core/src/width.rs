//! How much column resolution planning a query costs, estimated from its
//! text before DataFusion sees it.
//!
//! DataFusion resolves every column a SELECT names, or that its `*` expands
//! to, by a linear search of the columns in scope, and checks each output
//! column against the others: a SELECT costs about (names it resolves +
//! output columns) × (columns in scope + output columns). That is quadratic
//! in the width, with no checkpoint inside, so a few hundred
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
//! table function's output) counts as one column. Besides the column
//! look-ups it charges what else DataFusion does in time more than linear
//! in the text, each measured (core tests `column_work_*`): NATURAL and
//! USING joins (columns matched across both sides), `unnest` (cubic in the
//! nodes of its argument: a struct of many fields), ORDER BY, GROUP BY and
//! DISTINCT ON (each item matched against every expression of the select
//! list), aggregate and window calls (quadratic in their number per
//! SELECT), set operations BY NAME (each arm matched against the columns so
//! far), every query planned with a copy of the common table expressions
//! in scope, and names a subquery resolves in the SELECT around it. One
//! walk of the tree: linear in the text. It is an estimate, not a proof:
//! what it misses meets the expression planner's checkpoint (functions.rs)
//! and, once abandoned, runs at the lowest CPU priority (isolate.rs).

use crate::catalog::{cte_bodies, normalized_name, Catalog};
use sqlparser::ast::{
    Distinct, Expr, GroupByExpr, JoinConstraint, JoinOperator, OrderByKind, Query, Select,
    SelectItem, SetExpr, SetQuantifier, TableFactor, TableWithJoins, Visit, Visitor,
};
use std::collections::HashMap;
use std::ops::ControlFlow;

/// The most column work a query may cost: about a second of planning in a
/// release build on this project's 2-core test machine (measured: 30–45 ns
/// a unit; about 130 in a debug build), far above real views (600 columns
/// read and returned through ten levels come to about 7.6 million) and far
/// below what the text limit allows.
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
        visible_ctes: 0,
        unnests: Vec::new(),
        derived: Default::default(),
        last_width: 0,
        work: 0,
    };
    let _ = query.visit(&mut walk);
    walk.work
}

/// A query being walked.
struct QueryFrame {
    /// Its common table expressions: body identity → name.
    bodies: HashMap<*const Query, String>,
    /// Their widths, once walked.
    ctes: HashMap<String, u64>,
    /// The widest SELECT (or VALUES) of its body, and all of them summed.
    width: u64,
    width_sum: u64,
    /// The SELECTs (and parenthesized queries) of its body.
    arms: u64,
    /// Expression nodes of the widest arm's select list.
    projection_nodes: u64,
    /// Aggregate and window calls of its ORDER BY, and the most any SELECT
    /// of its body has.
    calls: u64,
    select_calls: u64,
    /// Names resolved against its output (ORDER BY).
    names: u64,
    /// Names its body's SELECTs resolve (a subquery's may be the outer
    /// query's columns).
    body_names: u64,
    /// Common table expressions defined (walked) in it.
    defined_ctes: u64,
}

/// A SELECT being walked.
struct SelectFrame {
    /// The columns its FROM brings into scope.
    width_in: u64,
    /// The names its expressions resolve.
    names: u64,
    /// Names the subqueries in its expressions resolve (DataFusion looks
    /// up what they do not hold in this SELECT's columns).
    nested_names: u64,
    /// All its expression nodes.
    nodes: u64,
    /// Its aggregate and window calls.
    calls: u64,
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
    /// Common table expressions defined in the queries being walked: each
    /// query is planned with a copy of them.
    visible_ctes: u64,
    /// Expression nodes inside each `unnest` being walked, innermost last.
    unnests: Vec<u64>,
    /// Derived tables (subqueries in FROM, not LATERAL): they see no outer
    /// columns.
    derived: std::collections::HashSet<*const Query>,
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

fn is_unnest(expr: &Expr) -> bool {
    matches!(expr, Expr::Function(f) if f.name.0.len() == 1
        && f.name.0[0].as_ident().is_some_and(|i| i.value.eq_ignore_ascii_case("unnest")))
}

/// `unnest` of a struct of n fields plans in about n³ steps (measured: 500
/// fields 1.9 s, 2,000 over a minute in a debug build); its argument has
/// about 2n nodes.
fn unnest_cost(nodes: u64) -> u64 {
    nodes.saturating_mul(nodes).saturating_mul(nodes) / 64
}

/// An aggregate or window call: DataFusion collects a SELECT's (its
/// select list's, HAVING's, ORDER BY's) into lists it searches linearly for
/// each one, with no checkpoint.
fn is_aggregate_or_window(expr: &Expr) -> bool {
    let Expr::Function(f) = expr else {
        return false;
    };
    if f.over.is_some() {
        return true;
    }
    match f.name.0.as_slice() {
        [part] => part.as_ident().is_some_and(|ident| {
            crate::functions::registry()
                .aggregates
                .contains_key(&normalized_name(ident))
        }),
        _ => false,
    }
}

/// ORDER BY, GROUP BY and DISTINCT ON: each of `items` matched with every
/// one of `nodes` expression nodes of the select list (measured: 1,000
/// ORDER BY items over 1,000 sums of 50 terms, 55 s in a debug build).
fn matching_cost(items: u64, nodes: u64) -> u64 {
    items.saturating_mul(nodes).saturating_mul(4)
}

/// n aggregate or window calls in one SELECT plan in about 16 n² units
/// (measured in a debug build: 4,000 in ORDER BY 41 s, 3,000 in the select
/// list 5.6 s, 1,500 windows 4 s).
fn call_cost(calls: u64) -> u64 {
    calls.saturating_mul(calls).saturating_mul(16)
}

fn join_constraint(operator: &JoinOperator) -> Option<&JoinConstraint> {
    use JoinOperator::*;
    match operator {
        Join(c) | Inner(c) | Left(c) | LeftOuter(c) | Right(c) | RightOuter(c) | FullOuter(c)
        | CrossJoin(c) | Semi(c) | LeftSemi(c) | RightSemi(c) | Anti(c) | LeftAnti(c)
        | RightAnti(c) | StraightJoin(c) => Some(c),
        AsOf { constraint, .. } => Some(constraint),
        _ => None,
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

    fn charge(&mut self, cost: u64) {
        self.work = self.work.saturating_add(cost);
    }

    /// NATURAL and USING joins match columns across both sides.
    fn joins(&mut self, from: &[TableWithJoins], width_in: u64) {
        let mut pending: Vec<&TableWithJoins> = from.iter().collect();
        while let Some(table) = pending.pop() {
            for factor in
                std::iter::once(&table.relation).chain(table.joins.iter().map(|j| &j.relation))
            {
                if let TableFactor::NestedJoin {
                    table_with_joins, ..
                } = factor
                {
                    pending.push(table_with_joins);
                }
            }
            for join in &table.joins {
                match join_constraint(&join.join_operator) {
                    Some(JoinConstraint::Natural) => {
                        self.charge(width_in.saturating_mul(width_in) / 2)
                    }
                    Some(JoinConstraint::Using(names)) => {
                        self.charge((names.len() as u64).saturating_mul(width_in))
                    }
                    _ => {}
                }
            }
        }
    }
}

impl Visitor for Walk<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        // Planned with a copy of every common table expression in scope.
        self.charge(self.visible_ctes);
        let bodies = cte_bodies(query);
        // VALUES has no SELECT to give the width.
        let width = match query.body.as_ref() {
            SetExpr::Values(values) => {
                values.rows.first().map_or(0, |row| row.content.len()) as u64
            }
            _ => 0,
        };
        self.frames.push(Frame::Query(QueryFrame {
            bodies,
            ctes: HashMap::new(),
            width,
            width_sum: width,
            arms: 0,
            projection_nodes: 0,
            names: 0,
            body_names: 0,
            defined_ctes: 0,
            calls: 0,
            select_calls: 0,
        }));
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let Some(Frame::Query(frame)) = self.frames.pop() else {
            return ControlFlow::Continue(());
        };
        self.visible_ctes = self.visible_ctes.saturating_sub(frame.defined_ctes);
        // ORDER BY resolves against the output, and matches each item with
        // every expression of the select list; a set operation matches its
        // sides column by column, BY NAME each arm with the columns so far.
        let mut own = cost(frame.names, frame.width, 0);
        if let Some(OrderByKind::Expressions(items)) = query.order_by.as_ref().map(|o| &o.kind) {
            own = own.saturating_add(matching_cost(items.len() as u64, frame.projection_nodes));
        }
        // ORDER BY's aggregates join the select list's (see `call_cost`).
        own = own.saturating_add(
            call_cost(frame.calls.saturating_add(frame.select_calls))
                .saturating_sub(call_cost(frame.select_calls)),
        );
        let mut width = frame.width;
        if let SetExpr::SetOperation { set_quantifier, .. } = query.body.as_ref() {
            own = own.saturating_add(frame.width);
            if matches!(
                set_quantifier,
                SetQuantifier::ByName | SetQuantifier::AllByName | SetQuantifier::DistinctByName
            ) {
                width = frame.width_sum;
                own = own.saturating_add(
                    frame
                        .width_sum
                        .saturating_mul(frame.width_sum)
                        .saturating_mul(frame.arms)
                        / 3,
                );
            }
        }
        self.charge(own);
        self.last_width = width;
        let me = query as *const Query;
        let derived = self.derived.remove(&me);
        match self.frames.last_mut() {
            // A common table expression's body is planned once, and read by
            // name as a table as wide as it.
            Some(Frame::Query(parent)) => match parent.bodies.get(&me) {
                Some(name) => {
                    parent.ctes.insert(name.clone(), width);
                    parent.defined_ctes = parent.defined_ctes.saturating_add(1);
                    self.visible_ctes = self.visible_ctes.saturating_add(1);
                }
                // A parenthesized query in its parent's body (or a set
                // operation's side) makes the parent's output.
                None => {
                    parent.width = parent.width.max(width);
                    parent.width_sum = parent.width_sum.saturating_add(width);
                    parent.arms = parent.arms.saturating_add(1);
                }
            },
            // A subquery in an expression: what its names do not find in
            // it is looked up in the SELECT around it.
            Some(Frame::Select(outer)) if !derived => {
                let names = frame.names.saturating_add(frame.body_names);
                outer.nested_names = outer.nested_names.saturating_add(names);
            }
            // A derived table (counted when its table factor ends).
            Some(Frame::Select(_)) | None => {}
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, _select: &Select) -> ControlFlow<()> {
        self.frames.push(Frame::Select(SelectFrame {
            width_in: 0,
            names: 0,
            nested_names: 0,
            nodes: 0,
            calls: 0,
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
        let mut own = cost(frame.names, frame.width_in, width_out)
            .saturating_add(frame.nested_names.saturating_mul(frame.width_in));
        let mut items = match &select.group_by {
            GroupByExpr::Expressions(exprs, _) => exprs.len() as u64,
            GroupByExpr::All(_) => width_out,
        };
        if let Some(Distinct::On(exprs)) = &select.distinct {
            items = items.saturating_add(exprs.len() as u64);
        }
        own = own.saturating_add(matching_cost(items, frame.nodes));
        own = own.saturating_add(call_cost(frame.calls));
        self.charge(own);
        self.joins(&select.from, frame.width_in);
        if let Some(query) = self.enclosing_query() {
            if width_out >= query.width {
                query.projection_nodes = frame.nodes;
            }
            query.width = query.width.max(width_out);
            query.width_sum = query.width_sum.saturating_add(width_out);
            query.arms = query.arms.saturating_add(1);
            query.body_names = query.body_names.saturating_add(frame.names);
            query.select_calls = query.select_calls.max(frame.calls);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        match factor {
            TableFactor::UNNEST { .. } => self.unnests.push(0),
            TableFactor::Derived {
                lateral: false,
                subquery,
                ..
            } => {
                self.derived.insert(subquery.as_ref() as *const Query);
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn post_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        let width = match factor {
            TableFactor::Table {
                name, args: None, ..
            } => match (name.0.len(), name.0.last().and_then(|part| part.as_ident())) {
                (1, Some(ident)) => self.relation_width(&normalized_name(ident)),
                _ => 1,
            },
            TableFactor::Derived { .. } => self.last_width,
            // Its own factors added themselves.
            TableFactor::NestedJoin { .. } => 0,
            TableFactor::UNNEST { .. } => {
                let nodes = self.unnests.pop().unwrap_or(0);
                self.charge(unnest_cost(nodes));
                1
            }
            _ => 1,
        };
        if let Some(Frame::Select(select)) = self.frames.last_mut() {
            select.width_in = select.width_in.saturating_add(width);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        if let Some(inner) = self.unnests.last_mut() {
            *inner = inner.saturating_add(1);
        }
        if is_unnest(expr) {
            self.unnests.push(0);
        }
        let name = matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_));
        let call = is_aggregate_or_window(expr) as u64;
        match self.frames.last_mut() {
            Some(Frame::Select(select)) => {
                select.nodes = select.nodes.saturating_add(1);
                select.names = select.names.saturating_add(name as u64);
                select.calls = select.calls.saturating_add(call);
            }
            Some(Frame::Query(query)) => {
                query.names = query.names.saturating_add(name as u64);
                query.calls = query.calls.saturating_add(call);
            }
            None => {}
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        if is_unnest(expr) {
            let nodes = self.unnests.pop().unwrap_or(0);
            self.charge(unnest_cost(nodes));
        }
        ControlFlow::Continue(())
    }
}
