-- micromegas_views 0.1.7 -> 0.1.8. What changes:
-- * a query too wide to plan (each SELECT's names and output columns times
--   the columns it reads and returns, summed, over 25 million) is refused
--   before DataFusion plans it (54001, in the library); a re-check that
--   finds a dependent too wide after its source widened treats it like the
--   other limits on what a definition may be: the change is refused, or
--   (a built-in's registration) the dependent is marked failed.

CREATE OR REPLACE FUNCTION micromegas._mm_recheck_dependents(source text, strict boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dep micromegas.lakehouse_view_set_definitions;
  checked_schema text;
  problem text;
  state text;
BEGIN
  -- A lenient re-check stays lenient all the way down: the rewrite of a
  -- dependent whose schema moved re-checks that one's dependents in turn
  -- (_mm_definitions_after_update), and those must be marked, not refused.
  IF NOT strict THEN
    PERFORM micromegas._mm_intent_begin('lenient', NULL);
  END IF;
  -- Every write below is the extension's own re-check (src/pg/trust.rs).
  PERFORM micromegas._mm_intent_begin('recheck', NULL);
  FOR dep IN SELECT * FROM micromegas.lakehouse_view_set_definitions d
              WHERE d.reads @> ARRAY[source] ORDER BY d.update_group, d.view_set_name LOOP
    BEGIN
      SELECT p.schema_ipc INTO checked_schema
        FROM micromegas._mm_prepare_definition(dep.view_set_name, NULL, dep.extract_query, dep.count_src_query,
               dep.merge_partitions_query, dep.update_group, dep.view_options, false) p;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT, state = RETURNED_SQLSTATE;
      -- Running out of a resource (memory, disk, stack: a very deep chain
      -- of views; time: a validation past a minute) says nothing about the
      -- dependent: the change fails with that error and nothing is marked.
      -- Class 53, and class 54 except this extension's own limits on what a
      -- definition may be (nesting, plan nodes, width, size: always in English,
      -- whereas Postgres' own messages follow lc_messages). A cancel or
      -- statement_timeout is never caught here; the session's validation
      -- time limit does not apply to a re-check (src/pg/settings.rs).
      IF left(state, 2) = '53'
         OR (left(state, 2) = '54' AND problem NOT LIKE '% is nested too deeply%'
             AND problem NOT LIKE '% is nested more than % levels deep%'
             AND problem NOT LIKE '% plans to more than % plan nodes%'
             AND problem NOT LIKE '% is too wide to plan%'
             AND problem NOT LIKE '% is too long: %') THEN
        RAISE;
      END IF;
      IF strict THEN
        PERFORM micromegas._mm_raise_broken_dependent(source, dep.view_set_name, problem);
      END IF;
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET load_status = 'failed', load_error = format('no longer valid after "%s" changed: %s', source, problem)
       WHERE d.view_set_name = dep.view_set_name;
      WITH RECURSIVE downstream(name) AS (
        SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x WHERE x.reads @> ARRAY[dep.view_set_name]
        UNION
        SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x, downstream w WHERE x.reads @> ARRAY[w.name]
      )
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET load_status = 'failed', load_error = format('reads a view set that failed to load (after "%s" changed)', source)
       WHERE d.view_set_name IN (SELECT name FROM downstream) AND d.load_status <> 'failed';
      CONTINUE;
    END;
    IF checked_schema IS DISTINCT FROM dep.schema_ipc OR dep.load_status <> 'ok' THEN
      -- A full rewrite stores the new schema, clears a failed mark (it
      -- says 'ok': a 'failed' from a re-check is a mark, below),
      -- notifies, and re-checks its own dependents.
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = d.definition_sql, load_status = 'ok'
       WHERE d.view_set_name = dep.view_set_name;
    END IF;
  END LOOP;
  PERFORM micromegas._mm_intent_end('recheck');
  IF NOT strict THEN
    PERFORM micromegas._mm_intent_end('lenient');
  END IF;
END
$$;

-- Privileges, from the matrix (no new function).
SELECT micromegas._mm_apply_privileges();
