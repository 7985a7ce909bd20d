-- micromegas_views 0.1.8 -> 0.1.9. What changes:
-- * a definitions row keeps sources_hash, the SHA-256 of what its
--   validation read besides the definition (the sources' stored rows, the
--   plan-node limit, the extension's version). A write of the definition a
--   view already stores (the same queries, group and options: a deploy
--   running its DDL again), against sources that still hash the same, takes
--   the row's derived columns instead of planning again (#28). Rows upgraded
--   from 0.1.8 have none until their next write; a failed row has none.
-- * _mm_prepare_definition returns the hash: a new C symbol
--   (prepare_definition_row_wrapper); the old one stays for older scripts.
-- * a re-check of a dependent tells why it no longer validates from the
--   error's kind, no longer from its English message text: the new
--   _mm_recheck_definition returns a problem with the definition itself
--   (its checks and own limits) as data and raises anything else, so the
--   re-check needs no exception block. A bug (internal error) in a
--   re-check now fails the change instead of marking the dependent. The
--   read-only dry run's re-check likewise (_mm_recheck_definition_with
--   replaces _mm_check_definition_with): it no longer reports a time limit
--   or an internal error as the dependent being broken.
ALTER TABLE micromegas.lakehouse_view_set_definitions ADD COLUMN sources_hash bytea;
COMMENT ON COLUMN micromegas.lakehouse_view_set_definitions.sources_hash IS
  'SHA-256 of what the validation read (sources as stored, plan-node limit, code version); the same definition written against the same sources reuses the derived columns. Always derived; NULL when failed';

-- The prepared row carries the hash.
DROP FUNCTION micromegas._mm_prepare_definition(text, text, text, text, text, integer, jsonb, boolean);
CREATE FUNCTION micromegas."_mm_prepare_definition"(
	"view_set_name" TEXT, /* Option < String > */
	"definition_sql" TEXT, /* Option < String > */
	"extract_query" TEXT, /* Option < String > */
	"count_src_query" TEXT, /* Option < String > */
	"merge_partitions_query" TEXT, /* Option < String > */
	"update_group" INT, /* Option < i32 > */
	"view_options" jsonb, /* Option < JsonB > */
	"keep_failed" bool /* bool */
) RETURNS TABLE (
	"view_set_name" TEXT,  /* String */
	"or_replace" bool,  /* bool */
	"definition_sql" TEXT,  /* String */
	"extract_query" TEXT,  /* String */
	"count_src_query" TEXT,  /* String */
	"merge_partitions_query" TEXT,  /* String */
	"update_group" INT,  /* i32 */
	"view_options" jsonb,  /* JsonB */
	"schema_ipc" TEXT,  /* String */
	"schema_json" jsonb,  /* JsonB */
	"schema_hash" bytea,  /* Vec < u8 > */
	"reads" TEXT[],  /* Vec < String > */
	"load_error" TEXT,  /* Option < String > */
	"warnings" jsonb,  /* JsonB */
	"sources_hash" bytea  /* :: std :: option :: Option < Vec < u8 > > */
)
VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'prepare_definition_row_wrapper';
COMMENT ON FUNCTION micromegas._mm_prepare_definition(text,text,text,text,text,integer,jsonb,boolean) IS
  'Derives and validates a definition row (statement text, columns or both): every derived column, the findings and the sources'' hash, or the error';

CREATE FUNCTION micromegas."_mm_recheck_definition"(
	"view_set_name" TEXT, /* String */
	"extract_query" TEXT, /* String */
	"count_src_query" TEXT, /* String */
	"merge_partitions_query" TEXT, /* String */
	"update_group" INT, /* i32 */
	"view_options" jsonb /* JsonB */
) RETURNS TABLE (
	"schema_ipc" TEXT,  /* Option < String > */
	"problem" TEXT  /* Option < String > */
)
STRICT VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'recheck_definition_wrapper';
COMMENT ON FUNCTION micromegas._mm_recheck_definition(text,text,text,text,integer,jsonb) IS
  'A re-check of a stored dependent: its schema as it validates now, or why it does not (an error about the definition itself); any other error is raised';
CREATE OR REPLACE FUNCTION micromegas._mm_recheck_dependents(source text, strict boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dep micromegas.lakehouse_view_set_definitions;
  checked_schema text;
  problem text;
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
    -- Why the dependent no longer validates comes back as data, decided
    -- by the error's kind in Rust (ErrorKind::is_about_the_definition):
    -- its text, checks and own limits (nesting, plan nodes, width, size).
    -- Anything else is raised and fails the change, nothing marked: a
    -- validation past a minute (re-checks run under the 60 s maximum, not
    -- the session's limit: src/pg/settings.rs), Postgres running out of a
    -- resource (memory, disk, stack: a very deep chain of views), a bug; a
    -- cancel or statement_timeout as always.
    SELECT r.schema_ipc, r.problem INTO checked_schema, problem
      FROM micromegas._mm_recheck_definition(dep.view_set_name, dep.extract_query, dep.count_src_query,
             dep.merge_partitions_query, dep.update_group, dep.view_options) r;
    IF problem IS NOT NULL THEN
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
    END IF;
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

-- The read-only dry run's re-check the same way (its symbol stays for
-- older scripts, src/pg/legacy.rs).
DROP FUNCTION micromegas._mm_check_definition_with(text, text, text, text, integer, jsonb, text[], text[], integer[], text[]);
CREATE FUNCTION micromegas."_mm_recheck_definition_with"(
	"view_set_name" TEXT, /* String */
	"extract_query" TEXT, /* String */
	"count_src_query" TEXT, /* String */
	"merge_partitions_query" TEXT, /* String */
	"update_group" INT, /* i32 */
	"view_options" jsonb, /* JsonB */
	"names" TEXT[], /* Vec < String > */
	"schemas" TEXT[], /* Vec < String > */
	"groups" INT[], /* Vec < i32 > */
	"errors" TEXT[] /* Vec < Option < String > > */
) RETURNS TABLE (
	"schema_ipc" TEXT,  /* Option < String > */
	"problem" TEXT  /* Option < String > */
)
STRICT STABLE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'recheck_definition_with_wrapper';
COMMENT ON FUNCTION micromegas._mm_recheck_definition_with(text,text,text,text,integer,jsonb,text[],text[],integer[],text[]) IS
  'The same re-check as if the given DDL views had the given schemas, groups and load errors (the read-only dry run)';
CREATE OR REPLACE FUNCTION micromegas._mm_recheck_read_only(source text, strict boolean,
  INOUT names text[], INOUT schemas text[], INOUT groups integer[], INOUT errors text[])
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dep record;
  down record;
  checked text;
  problem text;
  now_ok boolean;
  w record;
BEGIN
  -- The write path's loop reads the dependents once, as they are when it
  -- starts.
  FOR dep IN SELECT d.view_set_name, d.extract_query, d.count_src_query, d.merge_partitions_query,
                    d.update_group, d.view_options,
                    coalesce(schemas[pg_catalog.array_position(names, d.view_set_name)], d.schema_ipc) AS schema_ipc,
                    CASE WHEN pg_catalog.array_position(names, d.view_set_name) IS NULL THEN d.load_status = 'ok'
                         ELSE errors[pg_catalog.array_position(names, d.view_set_name)] IS NULL END AS was_ok
               FROM micromegas.lakehouse_view_set_definitions d
              WHERE d.reads @> ARRAY[source] ORDER BY d.update_group, d.view_set_name LOOP
    -- As the write path: a problem with the dependent itself comes back as
    -- data (by the error's kind); anything else is raised.
    SELECT r.schema_ipc, r.problem INTO checked, problem
      FROM micromegas._mm_recheck_definition_with(dep.view_set_name, dep.extract_query, dep.count_src_query,
             dep.merge_partitions_query, dep.update_group, dep.view_options, names, schemas, groups, errors) r;
    IF problem IS NOT NULL THEN
      IF strict THEN
        PERFORM micromegas._mm_raise_broken_dependent(source, dep.view_set_name, problem);
      END IF;
      SELECT * INTO w FROM micromegas._mm_dry_write(dep.view_set_name, dep.schema_ipc, dep.update_group,
        format('no longer valid after "%s" changed: %s', source, problem), names, schemas, groups, errors);
      names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
      FOR down IN WITH RECURSIVE downstream(name) AS (
                    SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x WHERE x.reads @> ARRAY[dep.view_set_name]
                    UNION
                    SELECT x.view_set_name FROM micromegas.lakehouse_view_set_definitions x, downstream s WHERE x.reads @> ARRAY[s.name])
                  SELECT x.view_set_name,
                         coalesce(schemas[pg_catalog.array_position(names, x.view_set_name)], x.schema_ipc) AS schema_ipc,
                         x.update_group
                    FROM micromegas.lakehouse_view_set_definitions x
                   WHERE x.view_set_name IN (SELECT s.name FROM downstream s)
                     AND CASE WHEN pg_catalog.array_position(names, x.view_set_name) IS NULL THEN x.load_status <> 'failed'
                              ELSE errors[pg_catalog.array_position(names, x.view_set_name)] IS NULL END
                   ORDER BY x.view_set_name LOOP
        SELECT * INTO w FROM micromegas._mm_dry_write(down.view_set_name, down.schema_ipc, down.update_group,
          format('reads a view set that failed to load (after "%s" changed)', source), names, schemas, groups, errors);
        names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
      END LOOP;
      CONTINUE;
    END IF;
    IF checked IS DISTINCT FROM dep.schema_ipc OR NOT dep.was_ok THEN
      -- Rewritten: loads, with the schema just computed. Its own after-update
      -- step looks at the row as it is now (this dry run may have marked it).
      now_ok := CASE WHEN pg_catalog.array_position(names, dep.view_set_name) IS NULL THEN dep.was_ok
                     ELSE errors[pg_catalog.array_position(names, dep.view_set_name)] IS NULL END;
      SELECT * INTO w FROM micromegas._mm_dry_write(dep.view_set_name, checked, dep.update_group, NULL,
        names, schemas, groups, errors);
      names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
      IF NOT now_ok OR checked IS DISTINCT FROM dep.schema_ipc THEN
        SELECT * INTO w FROM micromegas._mm_recheck_read_only(dep.view_set_name, now_ok, names, schemas, groups, errors);
        names := w.names; schemas := w.schemas; groups := w.groups; errors := w.errors;
      END IF;
      IF checked IS DISTINCT FROM dep.schema_ipc THEN
        PERFORM micromegas._mm_report_incompatible(dep.view_set_name,
                  (SELECT f.schema_hash FROM micromegas._mm_schema_forms(checked) f));
      END IF;
    END IF;
  END LOOP;
END
$$;

-- The BEFORE trigger stores it.
CREATE OR REPLACE FUNCTION micromegas._mm_definitions_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  intent text := micromegas._mm_intent(NEW.view_set_name);
  keep_given boolean;
  statement_sql text := NEW.definition_sql;
  p record;
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM micromegas._mm_lock_catalog();
    NEW.shipped := micromegas._mm_installing();
    keep_given := micromegas._mm_loading(NEW.created_at);
    IF NOT NEW.shipped AND keep_given AND EXISTS (
         SELECT 1 FROM micromegas.lakehouse_view_set_definitions d
          WHERE d.view_set_name = NEW.view_set_name AND d.shipped) THEN
      -- A superuser loading a dumped row over one still exactly as shipped
      -- (a restore: CREATE EXTENSION, then the dumped rows) updates it,
      -- validated like any other, keeping the dumped timestamps and actor.
      PERFORM micromegas._mm_intent_begin('load', NEW.view_set_name);
      UPDATE micromegas.lakehouse_view_set_definitions d
         SET definition_sql = NEW.definition_sql, extract_query = NEW.extract_query,
             count_src_query = NEW.count_src_query, merge_partitions_query = NEW.merge_partitions_query,
             update_group = NEW.update_group, view_options = NEW.view_options,
             created_at = NEW.created_at, updated_at = NEW.updated_at, updated_by = NEW.updated_by,
             load_status = coalesce(NEW.load_status, 'ok')
       WHERE d.view_set_name = NEW.view_set_name;
      PERFORM micromegas._mm_intent_end('load');
      RETURN NULL;
    END IF;
  ELSE
    PERFORM micromegas._mm_next_version();
    keep_given := coalesce(intent IN ('recheck', 'load'), false);
    -- Rows stay "as shipped" only through the extension's own scripts.
    NEW.shipped := OLD.shipped AND micromegas._mm_installing();
    IF intent IS NOT DISTINCT FROM 'recheck' AND NEW.load_status = 'failed'
       AND (NEW.view_set_name, NEW.definition_sql, NEW.extract_query, NEW.count_src_query,
            NEW.merge_partitions_query, NEW.update_group, NEW.view_options)
           IS NOT DISTINCT FROM
           (OLD.view_set_name, OLD.definition_sql, OLD.extract_query, OLD.count_src_query,
            OLD.merge_partitions_query, OLD.update_group, OLD.view_options) THEN
      -- A re-check marks a definition whose source changed as failed to load
      -- (its UPDATE sets only load_status and load_error), or gives one
      -- already failed its new reason; its stored schema stays (planning it
      -- again would store an empty one, and the moved schema would make its
      -- own dependents refuse a change a re-check must never refuse).
      NEW.sources_hash := NULL;
      RETURN NEW;
    END IF;
    IF NEW.view_set_name IS DISTINCT FROM OLD.view_set_name THEN
      RAISE EXCEPTION 'cannot rename materialized view "%"', OLD.view_set_name
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Create the view under the new name, then drop the old one.';
    END IF;
    IF NEW.definition_sql IS NOT DISTINCT FROM OLD.definition_sql
       AND (NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query, NEW.update_group, NEW.view_options)
           IS DISTINCT FROM
           (OLD.extract_query, OLD.count_src_query, OLD.merge_partitions_query, OLD.update_group, OLD.view_options)
       AND num_nonnulls(NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query,
                        NEW.update_group, NEW.view_options) > 0 THEN
      -- Only the columns changed: the stored text is re-rendered from them.
      statement_sql := NULL;
    END IF;
  END IF;

  SELECT * INTO p FROM micromegas._mm_prepare_definition(
    NEW.view_set_name, statement_sql, NEW.extract_query, NEW.count_src_query, NEW.merge_partitions_query,
    NEW.update_group, NEW.view_options,
    -- A dumped row that had failed to load is validated again: it loads if
    -- it plans now, and is kept as failed with the fresh reason if its
    -- queries still do not plan. Any other problem is refused as usual.
    keep_given AND NEW.load_status = 'failed');

  IF micromegas._mm_name_taken(p.view_set_name, p.or_replace, TG_OP = 'INSERT') THEN
    -- CREATE OR REPLACE of an existing view: an UPDATE of its row. Its
    -- trigger asks the same question again and gets the answer just
    -- computed, from the backend's memory; it re-checks the dependents.
    -- The history records it as a replace (the intent), not as a re-check.
    PERFORM micromegas._mm_intent_begin('replace', p.view_set_name);
    UPDATE micromegas.lakehouse_view_set_definitions d
       SET definition_sql = NEW.definition_sql, extract_query = NEW.extract_query,
           count_src_query = NEW.count_src_query, merge_partitions_query = NEW.merge_partitions_query,
           update_group = NEW.update_group, view_options = NEW.view_options, load_status = 'ok'
     WHERE d.view_set_name = p.view_set_name;
    PERFORM micromegas._mm_intent_end('replace');
    -- mm_create_view reports the replace (a skipped INSERT returns no row).
    PERFORM pg_catalog.set_config('micromegas_views.replaced', p.view_set_name, true);
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT' THEN
    PERFORM micromegas._mm_next_version();
  END IF;

  NEW.view_set_name := p.view_set_name;
  NEW.definition_sql := p.definition_sql;
  NEW.extract_query := p.extract_query;
  NEW.count_src_query := p.count_src_query;
  NEW.merge_partitions_query := p.merge_partitions_query;
  NEW.update_group := p.update_group;
  NEW.view_options := p.view_options;
  NEW.schema_ipc := p.schema_ipc;
  NEW.schema_json := p.schema_json;
  NEW.schema_hash := p.schema_hash;
  NEW.reads := p.reads;
  NEW.load_status := CASE WHEN p.load_error IS NULL THEN 'ok' ELSE 'failed' END;
  NEW.load_error := p.load_error;
  NEW.warnings := p.warnings;
  NEW.sources_hash := p.sources_hash;
  -- The author of this write hears of the obligations it misses; the
  -- extension's own re-checks and loads, and pg_restore's rows, do not
  -- raise them again.
  IF NOT keep_given AND (intent IS NULL OR intent IN ('replace', 'restore')) THEN
    PERFORM micromegas._mm_report_author_findings(p.view_set_name, p.warnings);
  END IF;
  -- The Postgres role that made the change: no setting can change it.
  NEW.updated_by_role := session_user;
  IF keep_given THEN
    -- A dumped row keeps its timestamps and actor; a re-validation by the
    -- extension changes no definition, so it keeps them too.
    NEW.updated_at := coalesce(NEW.updated_at, clock_timestamp());
    NEW.updated_by := coalesce(NEW.updated_by, micromegas._mm_actor());
    NEW.created_at := coalesce(NEW.created_at, OLD.created_at, NEW.updated_at);
  ELSE
    NEW.updated_at := clock_timestamp();
    NEW.updated_by := micromegas._mm_actor();
    NEW.created_at := CASE WHEN TG_OP = 'INSERT' THEN NEW.updated_at ELSE OLD.created_at END;
  END IF;
  RETURN NEW;
END
$$;

-- Privileges, from the matrix (a function created again, a new internal one).
SELECT micromegas._mm_apply_privileges();
