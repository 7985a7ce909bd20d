//! `#[pg_test]`s: the Rust steps called in a real backend. The SQL surface
//! is covered by the pg_regress and isolation suites in `sql-tests/`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn shipped_log_stats_is_installed_and_valid() {
        let hash = Spi::get_one::<String>(
            "SELECT encode(schema_hash, 'hex') FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(hash.len(), 16);
        let reads = Spi::get_one::<Vec<String>>(
            "SELECT reads FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(reads, vec!["blocks".to_string(), "log_entries".to_string()]);
    }

    #[pg_test]
    fn create_replace_drop_round_trip() {
        let create = "CREATE MATERIALIZED VIEW t1 WITH (extract_query = 'SELECT time, process_id FROM log_entries', \
            count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', \
            merge_partitions_query = 'SELECT time, process_id FROM {source}', update_group = 4000, time_column = 'time')";
        let before = Spi::get_one::<i64>("SELECT micromegas.mm_catalog_version()")
            .unwrap()
            .unwrap();
        let status = Spi::get_one_with_args::<String>(
            "SELECT status FROM micromegas.mm_create_view($1)",
            &[create.into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(status, "created");
        let replaced = create.replace("CREATE", "CREATE OR REPLACE");
        let status = Spi::get_one_with_args::<String>(
            "SELECT status FROM micromegas.mm_create_view($1)",
            &[replaced.as_str().into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(status, "replaced");
        let status = Spi::get_one::<String>(
            "SELECT status FROM micromegas.mm_drop_view('DROP MATERIALIZED VIEW t1')",
        )
        .unwrap()
        .unwrap();
        assert_eq!(status, "dropped");
        let after = Spi::get_one::<i64>("SELECT micromegas.mm_catalog_version()")
            .unwrap()
            .unwrap();
        assert_eq!(after, before + 3);
    }

    fn create(statement: &str) -> String {
        Spi::get_one_with_args::<String>(
            "SELECT status FROM micromegas.mm_create_view($1)",
            &[statement.into()],
        )
        .unwrap()
        .unwrap()
    }

    fn sources_hash(view: &str) -> Option<Vec<u8>> {
        Spi::get_one_with_args::<Vec<u8>>(
            "SELECT sources_hash FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = $1",
            &[view.into()],
        )
        .unwrap()
    }

    /// `_mm_plan_ahead` of a statement: whether an answer is remembered.
    fn ahead(statement: &str) -> bool {
        Spi::get_one_with_args::<bool>(
            "SELECT micromegas._mm_plan_ahead(NULL, $1, NULL, NULL, NULL, NULL, NULL)",
            &[statement.into()],
        )
        .unwrap()
        .unwrap()
    }

    /// A CREATE OR REPLACE of `name` reading what `extract` says, in `group`.
    fn view(name: &str, extract: &str, group: i32) -> String {
        format!(
            "CREATE OR REPLACE MATERIALIZED VIEW {name} WITH (extract_query = '{extract}', \
             count_src_query = 'SELECT count(*) AS count FROM blocks \
             WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''', \
             merge_partitions_query = 'SELECT * FROM {{source}}', update_group = {group}, \
             time_column = 'time')"
        )
    }

    /// A view's stored column names, in order, comma-separated.
    fn fields(view: &str) -> String {
        Spi::get_one_with_args::<String>(
            "SELECT string_agg(f->>'name', ',' ORDER BY o) FROM micromegas.lakehouse_view_set_definitions d, \
             jsonb_array_elements(d.schema_json->'fields') WITH ORDINALITY AS x(f, o) \
             WHERE d.view_set_name = $1",
            &[view.into()],
        )
        .unwrap()
        .unwrap()
    }

    /// Writes `statement` (a replace) with nothing remembered by the
    /// backend, and says whether it was planned.
    fn planned(statement: &str) -> bool {
        crate::pg::api::forget_validations();
        let before = crate::pg::api::validations_planned();
        assert_eq!(create(statement), "replaced");
        crate::pg::api::validations_planned() > before
    }

    /// A write plans its definition before it takes the catalog lock; under
    /// the lock it takes that answer unless the catalog rows the definition
    /// reads moved meanwhile, and then plans again against them. A refusal
    /// found ahead is the write's refusal, not planned twice.
    #[pg_test]
    fn a_write_plans_ahead_of_the_lock_and_again_only_if_its_reads_moved() {
        const COUNT: &str = "count_src_query = 'SELECT count(*) AS count FROM blocks \
             WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}'''";
        let upstream = |columns: &str| {
            format!(
                "CREATE OR REPLACE MATERIALIZED VIEW up_a WITH (extract_query = 'SELECT {columns} FROM log_entries', \
                 {COUNT}, merge_partitions_query = 'SELECT * FROM {{source}}', update_group = 4000, \
                 time_column = 'time')"
            )
        };
        let downstream = |filter: &str| {
            format!(
                "CREATE OR REPLACE MATERIALIZED VIEW down_a WITH (extract_query = 'SELECT * FROM up_a{filter}', \
                 {COUNT}, merge_partitions_query = 'SELECT * FROM {{source}}', update_group = 5000, \
                 time_column = 'time')"
            )
        };
        let planned = crate::pg::api::validations_planned;
        assert_eq!(create(&upstream("time, process_id")), "created");

        // Nothing moved: planned once, ahead.
        crate::pg::api::forget_validations();
        let before = planned();
        assert!(ahead(&downstream("")));
        assert_eq!(planned(), before + 1);
        assert_eq!(create(&downstream("")), "created");
        assert_eq!(planned(), before + 1, "the write planned again");
        assert_eq!(fields("down_a"), "time,process_id");

        // What it reads moved between the two: planned again, against the
        // upstream as it is now.
        assert!(ahead(&downstream(" WHERE process_id IS NOT NULL")));
        assert_eq!(create(&upstream("time, process_id, level")), "replaced");
        let moved = planned();
        assert_eq!(create(&downstream(" WHERE process_id IS NOT NULL")), "replaced");
        assert_eq!(planned(), moved + 1, "the write took an answer planned before its reads moved");
        assert_eq!(fields("down_a"), "time,process_id,level");

        // A refusal found ahead is the write's, and planning is not repeated.
        let refused = downstream("").replace("SELECT * FROM up_a", "SELECT nope FROM up_a");
        assert!(!ahead(&refused));
        let before = planned();
        let message = PgTryBuilder::new(|| {
            create(&refused);
            None
        })
        .catch_others(|e| match e {
            pg_sys::panic::CaughtError::PostgresError(report) => Some(report.message().to_string()),
            other => panic!("unexpected error: {other:?}"),
        })
        .execute();
        assert!(message.as_deref().unwrap_or("").contains("nope"), "{message:?}");
        assert_eq!(planned(), before, "the refused definition was planned again");
    }

    /// A replace that changes what its dependents read plans their re-check
    /// (and the rewrite of a dependent whose own schema moves, and that
    /// one's dependents) before it takes the catalog lock: under the lock
    /// nothing is planned, and the rows stored are the ones re-checked.
    #[pg_test]
    fn a_replace_plans_the_recheck_of_its_dependents_ahead_of_the_lock() {
        let planned = crate::pg::api::validations_planned;
        assert_eq!(create(&view("up_r", "SELECT time, process_id FROM log_entries", 4000)), "created");
        // One dependent whose schema stays, one whose schema moves, and one
        // reading that one.
        assert_eq!(create(&view("keeps_r", "SELECT time, process_id FROM up_r", 5000)), "created");
        assert_eq!(create(&view("moves_r", "SELECT * FROM up_r", 5000)), "created");
        assert_eq!(create(&view("below_r", "SELECT * FROM moves_r", 6000)), "created");

        let replace = view("up_r", "SELECT time, process_id, level FROM log_entries", 4000);
        crate::pg::api::forget_validations();
        let before = planned();
        assert!(ahead(&replace));
        // The replace, keeps_r's and moves_r's re-checks, moves_r's rewrite,
        // below_r's re-check and rewrite.
        assert_eq!(planned(), before + 6);
        assert_eq!(create(&replace), "replaced");
        assert_eq!(planned(), before + 6, "the replace planned under the lock");
        assert_eq!(fields("keeps_r"), "time,process_id");
        assert_eq!(fields("moves_r"), "time,process_id,level");
        assert_eq!(fields("below_r"), "time,process_id,level");

        // A replace that changes nothing its dependents read plans none.
        let same = view("up_r", "SELECT time, process_id, level FROM log_entries WHERE level > 0", 4000);
        crate::pg::api::forget_validations();
        let before = planned();
        assert_eq!(create(&same), "replaced");
        assert_eq!(planned(), before + 1);

        // A restore of an earlier version plans it, and the re-check of
        // what reads it, before the lock: asked ahead with the same row,
        // the restore plans nothing more.
        let first = Spi::get_one::<i64>(
            "SELECT min(version) FROM micromegas.lakehouse_view_set_definition_history WHERE view_set_name = 'up_r'",
        )
        .unwrap()
        .unwrap();
        crate::pg::api::forget_validations();
        let ahead_restore = Spi::get_one_with_args::<bool>(
            "SELECT micromegas._mm_plan_ahead(h.view_set_name, h.definition_sql, h.extract_query, h.count_src_query,
                    h.merge_partitions_query, h.update_group, h.view_options)
               FROM micromegas.lakehouse_view_set_definition_history h
              WHERE h.view_set_name = 'up_r' AND h.version = $1",
            &[first.into()],
        )
        .unwrap()
        .unwrap();
        assert!(ahead_restore);
        let before = planned();
        assert_eq!(
            Spi::get_one_with_args::<String>(
                "SELECT status FROM micromegas.mm_restore_view('up_r', $1)",
                &[first.into()]
            )
            .unwrap()
            .unwrap(),
            "restored"
        );
        assert_eq!(planned(), before, "the restore planned under the lock");
        assert_eq!(fields("moves_r"), "time,process_id");

        // A built-in's registration that changes its schema plans the
        // re-check of its dependents ahead of the lock too.
        let register = |fields: &str| {
            Spi::run(&format!(
                "SELECT micromegas.mm_register_builtin_view_set('bt_r', '{{\"fields\": [{fields}]}}', 500, 'raw')"
            ))
            .unwrap()
        };
        let ahead_builtin = |fields: &str| {
            Spi::get_one::<bool>(&format!(
                "SELECT micromegas._mm_plan_builtin_ahead('bt_r', '{{\"fields\": [{fields}]}}', 500, 'raw')"
            ))
            .unwrap()
            .unwrap()
        };
        const TWO: &str = r#"{"name": "process_id", "type": "Utf8"}, {"name": "time", "type": "Timestamp(ns, \"+00:00\")"}"#;
        let three = format!(r#"{TWO}, {{"name": "n", "type": "Int64"}}"#);
        register(TWO);
        assert_eq!(create(&view("on_bt_r", "SELECT * FROM bt_r", 5000)), "created");
        crate::pg::api::forget_validations();
        let before = planned();
        assert!(ahead_builtin(TWO));
        assert_eq!(planned(), before, "an unchanged registration planned its dependents");
        assert!(ahead_builtin(&three));
        // The re-check of on_bt_r, and its rewrite (its schema moves).
        assert_eq!(planned(), before + 2);
        register(&three);
        assert_eq!(planned(), before + 2, "the registration planned under the lock");
        assert_eq!(fields("on_bt_r"), "process_id,time,n");
    }

    /// A dependent that reads the written view and, further down, a view the
    /// write's re-check rewrites is met twice by the re-check, depth first:
    /// planning ahead walks the same way, so under the lock nothing is
    /// planned.
    #[pg_test]
    fn a_dependent_reached_twice_is_planned_ahead_in_each_state() {
        let planned = crate::pg::api::validations_planned;
        assert_eq!(create(&view("s0_d", "SELECT time, process_id, level, msg FROM log_entries", 4000)), "created");
        assert_eq!(create(&view("s1_d", "SELECT * FROM s0_d", 4100)), "created");
        assert_eq!(create(&view("s2_d", "SELECT * FROM s1_d", 4200)), "created");
        assert_eq!(
            create(&view("dm_d", "SELECT * FROM s2_d WHERE level > 0 UNION ALL SELECT * FROM s0_d", 4300)),
            "created"
        );
        let replace = view("s0_d", "SELECT time, process_id, level, target FROM log_entries", 4000);
        crate::pg::api::forget_validations();
        assert!(ahead(&replace));
        let before = planned();
        assert_eq!(create(&replace), "replaced");
        assert_eq!(planned(), before, "the re-check planned under the lock");
        assert_eq!(fields("dm_d"), "time,process_id,level,target");
    }

    /// A replace refused by several of its dependents plans each re-check
    /// once, ahead of the lock: every refusal found ahead is remembered for
    /// the statement, so the write under the lock plans none again.
    #[pg_test]
    fn a_replace_refused_by_several_dependents_plans_none_of_them_under_the_lock() {
        let planned = crate::pg::api::validations_planned;
        assert_eq!(create(&view("up_m", "SELECT time, process_id, level FROM log_entries", 4000)), "created");
        for name in ["first_m", "second_m", "third_m"] {
            assert_eq!(create(&view(name, "SELECT time, process_id, level FROM up_m WHERE level > 0", 5000)), "created");
        }
        // Drops `level`, which all three read.
        let replace = view("up_m", "SELECT time, process_id FROM log_entries", 4000);
        crate::pg::api::forget_validations();
        let before = planned();
        assert!(ahead(&replace));
        assert_eq!(planned(), before + 4, "the replace and its three re-checks");
        let message = PgTryBuilder::new(|| {
            create(&replace);
            None
        })
        .catch_others(|e| match e {
            pg_sys::panic::CaughtError::PostgresError(report) => Some(report.message().to_string()),
            other => panic!("unexpected error: {other:?}"),
        })
        .execute();
        let message = message.unwrap_or_default();
        assert!(message.contains("up_m") && message.contains("depends on it"), "{message}");
        assert_eq!(planned(), before + 4, "a refused re-check was planned again under the lock");
    }

    /// A built-in's registration under a name a definition holds is refused
    /// by the write; planning ahead says so at once and plans nothing (no
    /// re-check, and no re-check's time limit given to it).
    #[pg_test]
    fn a_registration_refused_for_a_defined_name_plans_nothing_ahead() {
        let planned = crate::pg::api::validations_planned;
        assert_eq!(
            create(
                "CREATE MATERIALIZED VIEW held_r WITH (extract_query = 'SELECT time, process_id FROM log_entries', \
                 count_src_query = 'SELECT count(*) AS count FROM blocks \
                 WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', \
                 merge_partitions_query = 'SELECT * FROM {source}', update_group = 4000, time_column = 'time')"
            ),
            "created"
        );
        assert_eq!(
            create(
                "CREATE MATERIALIZED VIEW on_held_r WITH (extract_query = 'SELECT * FROM held_r', \
                 count_src_query = 'SELECT count(*) AS count FROM blocks \
                 WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', \
                 merge_partitions_query = 'SELECT * FROM {source}', update_group = 5000, time_column = 'time')"
            ),
            "created"
        );
        const SCHEMA: &str = r#"{"fields": [{"name": "n", "type": "Int64"}]}"#;
        crate::pg::api::forget_validations();
        let before = planned();
        let ahead = Spi::get_one_with_args::<bool>(
            "SELECT micromegas._mm_plan_builtin_ahead('held_r', $1, 500, 'raw')",
            &[SCHEMA.into()],
        )
        .unwrap()
        .unwrap();
        assert!(!ahead);
        assert_eq!(planned(), before, "a refused registration planned its dependents");
        let message = PgTryBuilder::new(|| {
            Spi::run_with_args(
                "SELECT micromegas.mm_register_builtin_view_set('held_r', $1, 500, 'raw')",
                &[SCHEMA.into()],
            )
            .unwrap();
            None
        })
        .catch_others(|e| match e {
            pg_sys::panic::CaughtError::PostgresError(report) => Some(report.message().to_string()),
            other => panic!("unexpected error: {other:?}"),
        })
        .execute();
        let message = message.unwrap_or_default();
        assert!(message.contains("held_r"), "{message}");
        assert_eq!(planned(), before, "the refused registration planned under the lock");
    }

    /// A CREATE OR REPLACE of what a view already stores, against the
    /// sources it was validated with, takes the stored derived columns; any
    /// change to the definition, to a source or to the plan-node limit
    /// plans again; a written sources_hash is never taken.
    #[pg_test]
    fn a_rewrite_of_what_a_view_stores_is_not_planned_again() {
        const COUNT: &str = "count_src_query = 'SELECT count(*) AS count FROM blocks \
             WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}'''";
        let source = |columns: &str| {
            format!(
                "CREATE OR REPLACE MATERIALIZED VIEW src_v WITH (extract_query = 'SELECT {columns} FROM log_entries', \
                 {COUNT}, merge_partitions_query = 'SELECT {columns} FROM {{source}}', update_group = 4000, \
                 time_column = 'time')"
            )
        };
        let dependent = |filter: &str| {
            format!(
                "CREATE OR REPLACE MATERIALIZED VIEW dep_v WITH (extract_query = 'SELECT time, process_id FROM src_v{filter}', \
                 {COUNT}, merge_partitions_query = 'SELECT time, process_id FROM {{source}}', update_group = 5000, \
                 time_column = 'time')"
            )
        };
        assert_eq!(create(&source("time, process_id")), "created");
        assert_eq!(create(&dependent("")), "created");
        let first = sources_hash("dep_v").expect("a validated row has its sources' hash");
        let stored = "SELECT schema_ipc || encode(schema_hash, 'hex') || reads::text || warnings::text \
                      FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'dep_v'";
        let columns = Spi::get_one::<String>(stored).unwrap();

        // The same definition again: taken from the row, and what planning
        // it afresh gives (keep_failed is never answered from the row).
        assert!(!planned(&dependent("")));
        assert_eq!(Spi::get_one::<String>(stored).unwrap(), columns);
        assert_eq!(sources_hash("dep_v").as_ref(), Some(&first));
        let afresh = "SELECT p.schema_ipc || encode(p.schema_hash, 'hex') || p.reads::text || p.warnings::text \
             FROM micromegas.lakehouse_view_set_definitions d, micromegas._mm_prepare_definition(d.view_set_name, \
                  NULL, d.extract_query, d.count_src_query, d.merge_partitions_query, d.update_group, \
                  d.view_options, true) p WHERE d.view_set_name = 'dep_v'";
        crate::pg::api::forget_validations();
        let before = crate::pg::api::validations_planned();
        assert_eq!(Spi::get_one::<String>(afresh).unwrap(), columns);
        assert_eq!(crate::pg::api::validations_planned(), before + 1);
        // A write of the row by name (an UPDATE of the table) too.
        crate::pg::api::forget_validations();
        Spi::run(
            "UPDATE micromegas.lakehouse_view_set_definitions SET definition_sql = definition_sql \
             WHERE view_set_name = 'dep_v'",
        )
        .unwrap();
        assert_eq!(crate::pg::api::validations_planned(), before + 1);
        // Another option or group is planned.
        assert!(planned(&dependent("").replace("time_column = 'time'", "time_column = 'time', \
             merge_partition_delta = '2 days'")));
        assert!(planned(&dependent("").replace("update_group = 5000", "update_group = 5001")));
        assert!(planned(&dependent("")));
        // A changed query plans; writing the first one back plans too (the
        // row now holds the changed one).
        assert!(planned(&dependent(" WHERE time IS NOT NULL")));
        assert!(planned(&dependent("")));
        assert!(!planned(&dependent("")));

        // A source whose stored row changed (a column added; the dependent's
        // own schema is unchanged) plans again, and the new answer is kept.
        create(&source("time, process_id, level"));
        assert!(planned(&dependent("")));
        assert_ne!(sources_hash("dep_v").as_ref(), Some(&first));
        assert!(!planned(&dependent("")));

        // Another plan-node limit: planned under it.
        Spi::run("SET micromegas_views.max_plan_nodes = 5000").unwrap();
        assert!(planned(&dependent("")));
        assert!(!planned(&dependent("")));
        Spi::run("RESET micromegas_views.max_plan_nodes").unwrap();
        assert!(planned(&dependent("")));

        // A hash written to the row is replaced by the derived one (taken
        // from the row as it was before the write).
        let derived = sources_hash("dep_v");
        crate::pg::api::forget_validations();
        let before = crate::pg::api::validations_planned();
        Spi::run(
            "UPDATE micromegas.lakehouse_view_set_definitions SET sources_hash = '\\x00' \
             WHERE view_set_name = 'dep_v'",
        )
        .unwrap();
        assert_eq!(sources_hash("dep_v"), derived);
        assert_eq!(crate::pg::api::validations_planned(), before);
    }

    #[pg_test(error = "syntax error at or near \"VIEW\": expected MATERIALIZED")]
    fn malformed_statement_is_an_error() {
        Spi::run("SELECT * FROM micromegas._mm_statement_target('CREATE VIEW v WITH (a = 1)')")
            .unwrap();
    }

    #[pg_test(error = "extract_query calls now(), which is not immutable")]
    fn validation_runs_in_the_trigger() {
        Spi::run(
            "INSERT INTO micromegas.lakehouse_view_set_definitions (view_set_name, definition_sql) VALUES ('t2', \
             $$CREATE MATERIALIZED VIEW t2 WITH (extract_query = 'SELECT now() AS time, process_id FROM log_entries', \
             count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', \
             merge_partitions_query = 'SELECT time, process_id FROM {source}', update_group = 4000, time_column = 'time')$$)",
        )
        .unwrap();
    }

    /// The named-argument form of mm_create_view takes the option table's
    /// options, in its order, with its types and defaults.
    #[pg_test]
    fn named_arguments_follow_the_option_table() {
        let installed = Spi::get_one::<String>(
            "SELECT pg_get_function_arguments(p.oid) FROM pg_proc p \
              WHERE p.proname = 'mm_create_view' AND p.pronargs > 1",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            installed,
            micromegas_views_core::options::named_arguments_sql()
        );
    }

    #[pg_test]
    fn deep_input_is_an_error_not_a_crash() {
        let deep = format!(
            "SELECT * FROM micromegas._mm_prepare_definition('x', NULL, 'SELECT {}1{}', 'x', 'x', 1, \
             '{{\"time_column\": \"t\"}}', false)",
            "(".repeat(5000),
            ")".repeat(5000)
        );
        let result = PgTryBuilder::new(|| Spi::run(&deep).is_ok())
            .catch_others(|e| match e {
                pg_sys::panic::CaughtError::PostgresError(report) => {
                    assert_eq!(report.message(), "extract_query is nested too deeply");
                    false
                }
                other => panic!("unexpected error: {other:?}"),
            })
            .execute();
        assert!(!result);
    }

    /// A validation cut by its time limit is stopped, not abandoned: its
    /// helper process ends before the error reaches the caller (killed and
    /// reaped, or having answered at a checkpoint), and the next call works.
    #[pg_test]
    fn a_validation_past_its_time_limit_is_stopped() {
        use micromegas_views_core::sandbox::helper_pid;
        Spi::run("SELECT micromegas.mm_sql_hash('SELECT 1')").unwrap();
        let first = helper_pid().expect("a helper after a call");
        assert!(std::path::Path::new(&format!("/proc/{first}")).exists());
        // Chained CTEs each read twice: about 7 x 2^14 nodes, seconds of
        // planning, under a raised node limit and a 50 ms time limit.
        let mut chain = String::from(
            "WITH c0 AS (SELECT date_bin(''1 minute'', time) AS time_bin, process_id FROM log_entries)",
        );
        for i in 1..=14 {
            chain.push_str(&format!(
                ", c{i} AS (SELECT * FROM c{p} UNION ALL SELECT * FROM c{p})",
                p = i - 1
            ));
        }
        chain.push_str(" SELECT * FROM c14");
        Spi::run("SET LOCAL micromegas_views.max_plan_nodes = 250000").unwrap();
        Spi::run("SET LOCAL micromegas_views.validation_timeout = '50ms'").unwrap();
        let statement = format!(
            "SELECT * FROM micromegas._mm_prepare_definition('x', NULL, '{chain}', \
             'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''', \
             'SELECT * FROM {{source}}', 9000, '{{\"time_column\": \"time_bin\"}}', false)"
        );
        let started = std::time::Instant::now();
        let message = PgTryBuilder::new(|| {
            Spi::run(&statement).unwrap();
            None
        })
        .catch_others(|e| match e {
            pg_sys::panic::CaughtError::PostgresError(report) => Some(report.message().to_string()),
            other => panic!("unexpected error: {other:?}"),
        })
        .execute();
        assert!(
            message.as_deref() == Some("extract_query exceeded the validation time limit of 50 ms"),
            "{message:?}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        match helper_pid() {
            // It answered the time limit itself at a checkpoint: the same
            // process, idle.
            Some(same) if same == first => {}
            // Killed at the deadline: reaped, so no such process remains.
            other => {
                assert_eq!(other, None);
                assert!(
                    !std::path::Path::new(&format!("/proc/{first}")).exists(),
                    "helper {first} still exists after being stopped"
                );
            }
        }
        Spi::run("SELECT micromegas.mm_sql_hash('SELECT 2')").unwrap();
        assert!(helper_pid().is_some());
    }

    /// The extension's SQL, every file of it.
    const SQL: [&str; 7] = [
        include_str!("../sql/schema.sql"),
        include_str!("../sql/access.sql"),
        include_str!("../sql/partitions.sql"),
        include_str!("../sql/history.sql"),
        include_str!("../sql/jobs.sql"),
        include_str!("../sql/privileges.sql"),
        include_str!("../sql/api.sql"),
    ];

    /// The quoted words of `text` between `open` and the next `close`.
    fn quoted_after(text: &str, open: &str, close: char) -> Vec<String> {
        let mut found = Vec::new();
        for (at, _) in text.match_indices(open) {
            let rest = &text[at + open.len()..];
            let span = &rest[..rest.find(close).unwrap_or(rest.len())];
            found.extend(span.split('\'').skip(1).step_by(2).map(str::to_owned));
        }
        found
    }

    /// The intent kinds are defined once, in the library (trust.rs): every
    /// kind the SQL pushes, pops, asks for or compares with is one of them,
    /// and every one of them is pushed somewhere.
    #[pg_test]
    fn the_sql_names_only_the_intent_kinds_the_library_defines() {
        let kinds = crate::pg::trust::KINDS;
        let mut named = Vec::new();
        let mut pushed = Vec::new();
        for sql in SQL {
            pushed.extend(quoted_after(sql, "_mm_intent_begin(", ','));
            named.extend(quoted_after(sql, "_mm_intent_end(", ')'));
            named.extend(quoted_after(sql, "_mm_intent_held(", ')'));
            named.extend(quoted_after(sql, "intent IN (", ')'));
            named.extend(quoted_after(sql, "intent IS NOT DISTINCT FROM ", ' '));
            named.extend(quoted_after(sql, "intent = ", ' '));
        }
        assert!(!pushed.is_empty() && !named.is_empty());
        for kind in pushed.iter().chain(&named) {
            assert!(kinds.contains(&kind.as_str()), "the SQL names intent {kind:?}, which trust.rs does not define");
        }
        for kind in kinds {
            assert!(pushed.iter().any(|p| p == kind), "intent {kind:?} is defined but never pushed");
        }
    }

    /// The author-check levels are defined once (settings.rs): the SQL ranks
    /// them by `_mm_author_check_levels()`, and the table of requirements
    /// stores every level but `off` (which lifts a requirement).
    #[pg_test]
    fn every_author_check_level_but_off_can_be_required() {
        let levels = Spi::get_one::<Vec<String>>("SELECT micromegas._mm_author_check_levels()")
            .unwrap()
            .unwrap();
        let library: Vec<&str> = crate::pg::settings::AuthorChecks::ALL.iter().map(|l| l.name()).collect();
        assert_eq!(levels, library);
        assert_eq!(levels.first().map(String::as_str), Some("off"));
        for level in &levels[1..] {
            let stored = Spi::get_one_with_args::<String>(
                "SELECT required_level FROM micromegas.mm_require_author_checks($1) WHERE applies_to = '*'",
                &[level.as_str().into()],
            )
            .unwrap();
            assert_eq!(stored.as_deref(), Some(level.as_str()));
        }
        Spi::run("SELECT micromegas.mm_require_author_checks('off')").unwrap();
        let left = Spi::get_one::<i64>("SELECT count(*) FROM micromegas.author_check_requirements").unwrap();
        assert_eq!(left, Some(0));
    }
}
