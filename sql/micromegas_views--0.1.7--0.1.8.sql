-- micromegas_views 0.1.7 -> 0.1.8. What changes:
-- * a query too wide to plan (each SELECT's names and output columns times
--   the columns it reads and returns, summed, over 25 million) is refused
--   before DataFusion plans it (54001, in the library); a re-check that
--   finds a dependent too wide after its source widened treats it like the
--   other limits on what a definition may be: the change is refused, or
--   (a built-in's registration) the dependent is marked failed.

-- * a job's kind, state and parameters are domains instead of CHECKs of the
--   jobs table: Postgres reads a table's CHECKs back from their text and
--   plans them at every statement writing the table (#28: a tenth of a
--   claim or a finish). The same values are
--   accepted and refused (SQLSTATE 23514 as before; the message now names
--   the domain). The notification trigger names the state, so it is
--   dropped and created again around the change of type.

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

CREATE DOMAIN micromegas.job_kind AS text CHECK (VALUE IN ('refresh', 'regenerate', 'materialize'));
CREATE DOMAIN micromegas.job_state AS text CHECK (VALUE IN ('queued', 'running', 'done', 'failed', 'cancelled'));
CREATE DOMAIN micromegas.job_params AS jsonb CHECK (jsonb_typeof(VALUE) = 'object');
COMMENT ON DOMAIN micromegas.job_kind IS 'A job''s kind: refresh, regenerate or materialize';
COMMENT ON DOMAIN micromegas.job_state IS 'A job''s state: queued, running, done, failed or cancelled';
COMMENT ON DOMAIN micromegas.job_params IS 'A job''s parameters: a JSON object';
DROP TRIGGER jobs_notify_change ON micromegas.jobs;
DROP TRIGGER jobs_notify ON micromegas.jobs;
ALTER TABLE micromegas.jobs
  DROP CONSTRAINT jobs_kind_check, DROP CONSTRAINT jobs_params_check, DROP CONSTRAINT jobs_state_check;
ALTER TABLE micromegas.jobs
  ALTER COLUMN kind TYPE micromegas.job_kind, ALTER COLUMN params TYPE micromegas.job_params,
  ALTER COLUMN state TYPE micromegas.job_state;
CREATE TRIGGER jobs_notify
  AFTER INSERT ON micromegas.jobs
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_jobs_notify();
CREATE TRIGGER jobs_notify_change
  AFTER UPDATE ON micromegas.jobs
  FOR EACH ROW
  WHEN ((NEW.state IS DISTINCT FROM OLD.state
         AND (NEW.state = 'queued'
              OR (NEW.state <> 'running' AND micromegas._mm_notify_finished_jobs())))
        OR (NEW.cancel_requested AND NOT OLD.cancel_requested))
  EXECUTE FUNCTION micromegas._mm_jobs_notify();
-- The claim returns the kind and parameters as the claimed_job type's
-- text and jsonb. The claim, the heartbeat and the finish ask
-- _mm_require_writable for the standby's refusal only on a standby.
CREATE OR REPLACE FUNCTION micromegas.mm_claim_jobs(worker text, max_jobs integer DEFAULT 1, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  now_ts timestamptz := clock_timestamp();
  ids uuid[];
BEGIN
  -- On a standby the refusal that names the operation; on the primary one
  -- built-in call, not a nested function with its own search_path (#28).
  IF pg_catalog.pg_is_in_recovery() THEN
    PERFORM micromegas._mm_require_writable('mm_claim_jobs');
  END IF;
  IF coalesce(btrim(worker), '') = '' THEN
    RAISE EXCEPTION 'mm_claim_jobs: a worker name is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_jobs IS NULL OR max_jobs < 1 OR max_jobs > 1000 THEN
    RAISE EXCEPTION 'mm_claim_jobs: max_jobs must be between 1 and 1000, not %', coalesce(max_jobs::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF EXISTS (SELECT 1 FROM micromegas.jobs x WHERE x.state = 'running' AND x.lease_expires_at < now_ts) THEN
    PERFORM micromegas._mm_expire_leases();
  END IF;
  ids := ARRAY(SELECT x.job_id FROM micromegas.jobs x
                WHERE x.state = 'queued' AND (kinds IS NULL OR x.kind = ANY (kinds))
                ORDER BY x.created_at LIMIT max_jobs
                  FOR UPDATE SKIP LOCKED);
  IF cardinality(ids) = 0 THEN
    RETURN;
  END IF;
  RETURN QUERY
    UPDATE micromegas.jobs j
       SET state = 'running', worker = mm_claim_jobs.worker, started_at = clock_timestamp(),
           lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds()),
           lease_token_hash = micromegas._mm_lease_hash(p.token),
           attempts = j.attempts + 1
      FROM (SELECT i.job_id, gen_random_uuid() AS token FROM unnest(ids) i(job_id)) p
     WHERE j.job_id = p.job_id
    RETURNING j.job_id, j.kind::text, j.view_set_name, j.begin_time, j.end_time, j.params::jsonb, j.attempts, j.worker,
              j.lease_expires_at, p.token;
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_heartbeat_job(job_id uuid, lease_token uuid) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  stop boolean;
BEGIN
  -- On a standby the refusal that names the operation; on the primary one
  -- built-in call, not a nested function with its own search_path (#28).
  IF pg_catalog.pg_is_in_recovery() THEN
    PERFORM micromegas._mm_require_writable('mm_heartbeat_job');
  END IF;
  -- One statement checks the lease, locks the row and extends the lease.
  -- When it finds no row, _mm_held_job raises why; it returns only when the
  -- claim committed after that statement began (its row, not yet running
  -- then, is now locked under this lease): the statement runs again.
  FOR attempt IN 1..2 LOOP
    UPDATE micromegas.jobs x
       SET lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds())
     WHERE x.job_id = $1 AND x.state = 'running' AND x.lease_token_hash = micromegas._mm_lease_hash($2)
    RETURNING x.cancel_requested INTO stop;
    IF FOUND THEN
      RETURN CASE WHEN stop THEN 'cancel_requested' ELSE 'running' END;
    END IF;
    PERFORM micromegas._mm_held_job($1, $2);
  END LOOP;
  RAISE EXCEPTION 'job % is not held by this lease', $1 USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_finish_job(
  job_id uuid, lease_token uuid, ok boolean, phase text DEFAULT NULL, message text DEFAULT NULL,
  retryable boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  next_state text;
BEGIN
  -- On a standby the refusal that names the operation; on the primary one
  -- built-in call, not a nested function with its own search_path (#28).
  IF pg_catalog.pg_is_in_recovery() THEN
    PERFORM micromegas._mm_require_writable('mm_finish_job');
  END IF;
  IF ok IS NULL THEN
    RAISE EXCEPTION 'mm_finish_job: ok must be true or false' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  -- One statement checks the lease and decides the next state from the
  -- locked row (a cancellation committed meanwhile is seen), then writes it.
  -- When it finds no row, _mm_held_job raises why; it returns only when the
  -- claim committed after that statement began (its row, not yet running
  -- then, is now locked under this lease): the statement runs again.
  FOR attempt IN 1..2 LOOP
    UPDATE micromegas.jobs x
       SET state = CASE WHEN x.cancel_requested THEN 'cancelled'
                        WHEN ok THEN 'done'
                        WHEN coalesce(retryable, false) AND x.attempts < micromegas._mm_job_max_attempts() THEN 'queued'
                        ELSE 'failed' END,
           lease_expires_at = NULL, lease_token_hash = NULL,
           finished_at = CASE WHEN NOT x.cancel_requested AND NOT ok AND coalesce(retryable, false)
                                   AND x.attempts < micromegas._mm_job_max_attempts() THEN NULL
                              ELSE clock_timestamp() END,
           failure_phase = CASE WHEN ok THEN NULL ELSE $4 END,
           failure_message = CASE WHEN ok THEN NULL ELSE $5 END,
           failure_retryable = CASE WHEN ok THEN NULL ELSE coalesce($6, false) END
     WHERE x.job_id = $1 AND x.state = 'running' AND x.lease_token_hash = micromegas._mm_lease_hash($2)
    RETURNING x.state INTO next_state;
    IF FOUND THEN
      RETURN next_state;
    END IF;
    PERFORM micromegas._mm_held_job($1, $2);
  END LOOP;
  RAISE EXCEPTION 'job % is not held by this lease', $1 USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

-- Privileges, from the matrix (no new function).
SELECT micromegas._mm_apply_privileges();
