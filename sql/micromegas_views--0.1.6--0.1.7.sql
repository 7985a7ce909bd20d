-- micromegas_views 0.1.6 -> 0.1.7. What changes (#28, the job queue):
-- * a finished job (done, failed, cancelled) is announced on
--   micromegas_jobs only when micromegas_views.notify_finished_jobs is on
--   (superuser-only, off by default): a commit that notifies holds a
--   database-wide lock until its WAL is flushed, so with every finish
--   announced the workers' finishes ran one at a time. A queued job (or one
--   queued again) and a cancellation request are announced as before;
-- * mm_finish_job and mm_heartbeat_job check the lease and write in one
--   UPDATE (the reason for a refusal is looked up only after it);
-- * mm_claim_jobs picks the jobs, then updates them by key, with plans kept
--   for the session (plan_cache_mode = force_generic_plan on the function);
-- * _mm_lease_hash is a Rust function (as a SQL function Postgres parsed and
--   planned it at every call); a heartbeat or finish whose claim committed
--   after it began waits for it and goes through.

CREATE FUNCTION micromegas."_mm_notify_finished_jobs"() RETURNS bool /* bool */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'notify_finished_jobs_wrapper';
COMMENT ON FUNCTION micromegas._mm_notify_finished_jobs() IS
  'micromegas_views.notify_finished_jobs: whether a job that ends is announced on micromegas_jobs';

DROP TRIGGER jobs_notify ON micromegas.jobs;
DROP TRIGGER jobs_notify_change ON micromegas.jobs;
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
COMMENT ON FUNCTION micromegas._mm_jobs_notify() IS
  'Trigger: notifies micromegas_jobs of a job queued or asked to stop, and of one finished when micromegas_views.notify_finished_jobs is on (one payload per row; never for a claim or a heartbeat)';

DROP FUNCTION micromegas._mm_lease_hash(uuid);
CREATE FUNCTION micromegas."_mm_lease_hash"(
	"token" uuid /* pgrx :: Uuid */
) RETURNS bytea /* Vec < u8 > */
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lease_hash_wrapper';
COMMENT ON FUNCTION micromegas._mm_lease_hash(uuid) IS
  'The SHA-256 of a lease token: only the hash is stored';

CREATE OR REPLACE FUNCTION micromegas.mm_claim_jobs(worker text, max_jobs integer DEFAULT 1, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_claim_jobs');
  now_ts timestamptz := clock_timestamp();
  ids uuid[];
BEGIN
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
    RETURNING j.job_id, j.kind, j.view_set_name, j.begin_time, j.end_time, j.params, j.attempts, j.worker,
              j.lease_expires_at, p.token;
END
$$;

CREATE OR REPLACE FUNCTION micromegas.mm_heartbeat_job(job_id uuid, lease_token uuid) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_heartbeat_job');
  stop boolean;
BEGIN
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
  on_primary boolean := micromegas._mm_require_writable('mm_finish_job');
  next_state text;
BEGIN
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

-- Privileges, from the matrix (a new internal function: no grant).
SELECT micromegas._mm_apply_privileges();
