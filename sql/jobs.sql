-- micromegas_views: refresh jobs. Admins request work on a view set (a
-- refresh, a regeneration bucket); the maintenance daemon's workers claim
-- it with a lease (FOR UPDATE SKIP LOCKED: no job runs twice at once),
-- heartbeat, and finish it. A queued job and a cancellation request are
-- announced on micromegas_jobs, a finished one when
-- micromegas_views.notify_finished_jobs is on; a claim and a heartbeat never.

-- A job's kind, state and parameters are domains, not CHECKs of the table:
-- Postgres reads a table's CHECK constraints back from their stored text and
-- plans them at every statement that writes the table (a tenth of a claim or
-- a finish, #28), whereas a domain's check is kept in the backend's type
-- cache and runs only on the values a statement writes.
-- <job_domains>
CREATE DOMAIN micromegas.job_kind AS text CHECK (VALUE IN ('refresh', 'regenerate', 'materialize'));
CREATE DOMAIN micromegas.job_state AS text CHECK (VALUE IN ('queued', 'running', 'done', 'failed', 'cancelled'));
CREATE DOMAIN micromegas.job_params AS jsonb CHECK (jsonb_typeof(VALUE) = 'object');
COMMENT ON DOMAIN micromegas.job_kind IS 'A job''s kind: refresh, regenerate or materialize';
COMMENT ON DOMAIN micromegas.job_state IS 'A job''s state: queued, running, done, failed or cancelled';
COMMENT ON DOMAIN micromegas.job_params IS 'A job''s parameters: a JSON object';
-- </job_domains>

CREATE TABLE micromegas.jobs (
  job_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  kind micromegas.job_kind NOT NULL,
  view_set_name text NOT NULL,
  -- The insert-time range; a NULL bound is unbounded (everything).
  begin_time timestamptz,
  end_time timestamptz,
  params micromegas.job_params NOT NULL DEFAULT '{}',
  state micromegas.job_state NOT NULL DEFAULT 'queued',
  cancel_requested boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  created_by text NOT NULL,
  created_by_role text NOT NULL DEFAULT session_user,
  started_at timestamptz,
  finished_at timestamptz,
  -- The worker that holds the job (running), or held it last: a name for
  -- people; what proves a claim is the lease token (lease_token_hash).
  worker text,
  lease_expires_at timestamptz,
  attempts integer NOT NULL DEFAULT 0,
  failure_phase text,
  failure_message text,
  failure_retryable boolean,
  -- Only a hash of the running claim's lease token, so no reader of this
  -- table can use it (0.1.5; last, as the upgrade adds it).
  lease_token_hash bytea,
  -- What the running attempt reported with its heartbeats (0.1.11; last,
  -- as the upgrade adds it).
  progress jsonb,
  CONSTRAINT jobs_range CHECK (begin_time IS NULL OR end_time IS NULL OR begin_time <= end_time),
  CONSTRAINT jobs_lease CHECK ((state = 'running') = (lease_expires_at IS NOT NULL)
                               AND (state = 'running') = (lease_token_hash IS NOT NULL)
                               AND (state <> 'running' OR worker IS NOT NULL))
);
COMMENT ON COLUMN micromegas.jobs.job_id IS 'The job';
COMMENT ON COLUMN micromegas.jobs.kind IS 'refresh, regenerate or materialize';
COMMENT ON COLUMN micromegas.jobs.view_set_name IS 'The view set it works on';
COMMENT ON COLUMN micromegas.jobs.begin_time IS 'Start of the range, or NULL for everything';
COMMENT ON COLUMN micromegas.jobs.end_time IS 'End of the range, or NULL';
COMMENT ON COLUMN micromegas.jobs.params IS 'The request''s parameters (never credentials: readers see this table)';
COMMENT ON COLUMN micromegas.jobs.state IS 'queued, running, done, failed or cancelled';
COMMENT ON COLUMN micromegas.jobs.cancel_requested IS 'An admin asked a running job to stop';
COMMENT ON COLUMN micromegas.jobs.created_at IS 'When it was requested';
COMMENT ON COLUMN micromegas.jobs.created_by IS 'The actor who requested it';
COMMENT ON COLUMN micromegas.jobs.created_by_role IS 'The Postgres role that requested it';
COMMENT ON COLUMN micromegas.jobs.started_at IS 'When it was last claimed';
COMMENT ON COLUMN micromegas.jobs.finished_at IS 'When it ended';
COMMENT ON COLUMN micromegas.jobs.worker IS 'The worker holding it';
COMMENT ON COLUMN micromegas.jobs.lease_expires_at IS 'When its lease lapses without a heartbeat';
COMMENT ON COLUMN micromegas.jobs.attempts IS 'How many times it was claimed';
COMMENT ON COLUMN micromegas.jobs.failure_phase IS 'Where it failed';
COMMENT ON COLUMN micromegas.jobs.failure_message IS 'Why it failed';
COMMENT ON COLUMN micromegas.jobs.failure_retryable IS 'Whether the worker said a retry may succeed';
COMMENT ON COLUMN micromegas.jobs.lease_token_hash IS 'SHA-256 of the current lease token';
COMMENT ON COLUMN micromegas.jobs.progress IS 'What the running (or last) attempt reported with its heartbeats, a JSON object; NULL until it reports';
CREATE INDEX jobs_queued ON micromegas.jobs (created_at) WHERE state = 'queued';
CREATE INDEX jobs_running ON micromegas.jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_view ON micromegas.jobs (view_set_name, state);
COMMENT ON TABLE micromegas.jobs IS
  'Work requested on view sets (refresh, regeneration), claimed by the daemon''s workers with a lease';

-- A job queued (or queued again) or asked to stop is announced at commit; a
-- finished one (done, failed, cancelled) only when
-- micromegas_views.notify_finished_jobs is on; a claim (queued -> running)
-- and a heartbeat never. The triggers' WHEN clauses keep the others from
-- even calling the function: a commit that sends a notification holds a
-- database-wide lock until it is flushed, listened to or not, so a queue
-- whose every finish notifies runs its finishes one at a time.
-- Any role may LISTEN, so the payload says only what happened, never which
-- job or view: {"op": "queued" | "cancel_requested" | "done" | "failed" |
-- "cancelled"}. A worker reads the rest from the table, through the
-- functions its role may call.
CREATE FUNCTION micromegas._mm_jobs_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_notify('micromegas_jobs', json_build_object(
    'op', CASE WHEN TG_OP = 'UPDATE' AND NEW.cancel_requested AND NOT OLD.cancel_requested
                 THEN 'cancel_requested' ELSE NEW.state END)::text);
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_jobs_notify() IS
  'Trigger: notifies micromegas_jobs of a job queued or asked to stop, and of one finished when micromegas_views.notify_finished_jobs is on (one payload per row; never for a claim or a heartbeat)';
-- <jobs_notify_triggers>
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
-- </jobs_notify_triggers>
CREATE TRIGGER jobs_no_truncate
  BEFORE TRUNCATE ON micromegas.jobs
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- A request: the view set must exist and load. A queued job of the same
-- kind and parameters whose range covers the requested one is returned
-- instead of a new one. The catalog lock comes first (the one a DROP
-- takes), so a request and a DROP are ordered: a request after the DROP
-- finds no view; a DROP after the request cancels its job.
CREATE FUNCTION micromegas._mm_request_job(
  kind text, name text, begin_time timestamptz, end_time timestamptz, params jsonb,
  OUT job_id uuid, OUT existing boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  problem text;
BEGIN
  IF name IS NULL THEN
    RAISE EXCEPTION 'a job needs a view set name' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  PERFORM micromegas._mm_lock_catalog();
  IF begin_time > end_time THEN
    RAISE EXCEPTION 'the range of a % job on "%" begins after it ends', kind, name
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF params IS NOT NULL AND jsonb_typeof(params) <> 'object' THEN
    RAISE EXCEPTION 'the parameters of a % job on "%" must be a JSON object, not %', kind, name, jsonb_typeof(params)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM micromegas.builtin_view_sets b WHERE b.view_set_name = name) THEN
    SELECT coalesce(d.load_error, '') INTO problem FROM micromegas.lakehouse_view_set_definitions d
     WHERE d.view_set_name = name AND d.load_status <> 'ok';
    IF FOUND THEN
      RAISE EXCEPTION 'materialized view "%" does not load', name
        USING ERRCODE = 'object_not_in_prerequisite_state', DETAIL = problem,
              HINT = 'Replace it (or what it reads) so that it validates, then request the job again.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = name) THEN
      RAISE EXCEPTION 'view set "%" does not exist', name
        USING ERRCODE = 'undefined_object', HINT = 'list_view_sets() shows the view sets.';
    END IF;
  END IF;
  SELECT j.job_id INTO job_id FROM micromegas.jobs j
   WHERE j.kind = _mm_request_job.kind AND j.view_set_name = name AND j.state = 'queued' AND NOT j.cancel_requested
     AND j.params = coalesce(_mm_request_job.params, '{}')
     AND (j.begin_time IS NULL OR (_mm_request_job.begin_time IS NOT NULL AND j.begin_time <= _mm_request_job.begin_time))
     AND (j.end_time IS NULL OR (_mm_request_job.end_time IS NOT NULL AND j.end_time >= _mm_request_job.end_time))
   ORDER BY j.created_at LIMIT 1;
  IF FOUND THEN
    existing := true;
    RETURN;
  END IF;
  INSERT INTO micromegas.jobs (kind, view_set_name, begin_time, end_time, params, created_by)
  VALUES (_mm_request_job.kind, name, _mm_request_job.begin_time, _mm_request_job.end_time,
          coalesce(_mm_request_job.params, '{}'), micromegas._mm_actor())
  RETURNING jobs.job_id INTO job_id;
  existing := false;
END
$$;
COMMENT ON FUNCTION micromegas._mm_request_job(text,text,timestamp with time zone,timestamp with time zone,jsonb) IS
  'Queues a job, or returns a queued one with equal parameters whose range covers it; under the catalog lock';

-- A refresh of a view set over a range (NULL bounds: everything).
CREATE FUNCTION micromegas.mm_refresh_view(
  name text, begin_time timestamptz DEFAULT NULL, end_time timestamptz DEFAULT NULL, params jsonb DEFAULT '{}')
RETURNS uuid
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT micromegas._mm_require_writable('mm_refresh_view');
  SELECT r.job_id FROM micromegas._mm_request_job('refresh', $1, $2, $3, $4) r
$$;
COMMENT ON FUNCTION micromegas.mm_refresh_view(text, timestamptz, timestamptz, jsonb) IS
  'Request a refresh of a view set over a range (NULL bounds: everything); returns the job id';

-- [begin, end) in buckets of partition_delta_seconds, checked by
-- mm_plan_regeneration's rules, one queued job of `kind` per bucket (an
-- equal queued job covering it is reported instead): what
-- regenerate_partitions and materialize_partitions share.
CREATE FUNCTION micromegas._mm_queue_buckets(
  kind text, caller text, view_set_name text, begin_time timestamptz, end_time timestamptz,
  partition_delta_seconds integer)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  bucket record;
  r record;
BEGIN
  IF partition_delta_seconds IS NULL OR partition_delta_seconds <= 0 THEN
    RAISE EXCEPTION '%: partition_delta_seconds must be a positive number of seconds, not %',
        caller, coalesce(partition_delta_seconds::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOR bucket IN SELECT * FROM micromegas.mm_plan_regeneration($3, $4, $5, make_interval(secs => partition_delta_seconds)) LOOP
    SELECT * INTO r FROM micromegas._mm_request_job(kind, $3, bucket.bucket_begin, bucket.bucket_end,
                                                     jsonb_build_object('partition_delta_seconds', partition_delta_seconds));
    RETURN QUERY SELECT clock_timestamp(), format('%s %s of %s [%s, %s): job %s',
      CASE WHEN r.existing THEN 'already queued:' ELSE 'queued' END,
      CASE kind WHEN 'regenerate' THEN 'regeneration' ELSE 'materialization' END, $3,
      micromegas._mm_time_text(bucket.bucket_begin), micromegas._mm_time_text(bucket.bucket_end), r.job_id);
  END LOOP;
END
$$;
COMMENT ON FUNCTION micromegas._mm_queue_buckets(text, text, text, timestamptz, timestamptz, integer) IS
  'One queued job of the given kind per bucket of [begin, end), checked like mm_plan_regeneration: regenerate_partitions and materialize_partitions';

-- micromegas' regenerate_partitions: [begin, end) in buckets of
-- partition_delta_seconds, every bucket written from the source, fresh or
-- not.
CREATE FUNCTION micromegas.regenerate_partitions(
  view_set_name text, begin_time timestamptz, end_time timestamptz, partition_delta_seconds integer)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('regenerate_partitions');
BEGIN
  RETURN QUERY SELECT * FROM micromegas._mm_queue_buckets('regenerate', 'regenerate_partitions', $1, $2, $3, $4);
END
$$;
COMMENT ON FUNCTION micromegas.regenerate_partitions(text, timestamptz, timestamptz, integer) IS
  'Queue one regeneration job per bucket of [begin, end), checked like mm_plan_regeneration';

-- micromegas' materialize_partitions, by its name: the same buckets and
-- privileges as regenerate_partitions, but each is materialized only where
-- stale (the daemon's freshness check by count_src_query).
CREATE FUNCTION micromegas.materialize_partitions(
  view_set_name text, begin_time timestamptz, end_time timestamptz, partition_delta_seconds integer)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('materialize_partitions');
BEGIN
  RETURN QUERY SELECT * FROM micromegas._mm_queue_buckets('materialize', 'materialize_partitions', $1, $2, $3, $4);
END
$$;
COMMENT ON FUNCTION micromegas.materialize_partitions(text, timestamptz, timestamptz, integer) IS
  'Queue one materialization job per bucket of [begin, end), checked like mm_plan_regeneration; the daemon writes a bucket only where its source count moved';

-- Leases that ran out: back to the queue, or failed after
-- micromegas_views.job_max_attempts claims; a job whose cancellation was
-- requested is cancelled.
CREATE FUNCTION micromegas._mm_expire_leases() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  max_attempts integer := micromegas._mm_job_max_attempts();
  n integer;
BEGIN
  UPDATE micromegas.jobs j
     SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                      WHEN j.attempts >= max_attempts THEN 'failed' ELSE 'queued' END,
         finished_at = CASE WHEN j.cancel_requested OR j.attempts >= max_attempts THEN clock_timestamp() END,
         failure_phase = 'lease',
         failure_message = format('the lease of worker %s expired at %s (claim %s of %s)', j.worker,
                                  micromegas._mm_time_text(j.lease_expires_at), j.attempts, max_attempts),
         failure_retryable = NOT j.cancel_requested AND j.attempts < max_attempts,
         lease_expires_at = NULL, lease_token_hash = NULL
   WHERE j.job_id = ANY (ARRAY(
           SELECT x.job_id FROM micromegas.jobs x
            WHERE x.state = 'running' AND x.lease_expires_at < clock_timestamp()
              FOR UPDATE SKIP LOCKED));
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;
COMMENT ON FUNCTION micromegas._mm_expire_leases() IS
  'Requeues (or fails, past job_max_attempts) the running jobs whose lease expired; returns how many';

-- <claim>
-- What a claim returns: the job, and the lease token that proves the claim
-- to mm_heartbeat_job and mm_finish_job (returned once, stored only hashed).
CREATE TYPE micromegas.claimed_job AS (
  job_id uuid, kind text, view_set_name text, begin_time timestamptz, end_time timestamptz, params jsonb,
  attempts integer, worker text, lease_expires_at timestamptz, lease_token uuid);
COMMENT ON TYPE micromegas.claimed_job IS
  'A job as mm_claim_job and mm_claim_jobs return it, with its lease token';
COMMENT ON COLUMN micromegas.claimed_job.job_id IS 'The job';
COMMENT ON COLUMN micromegas.claimed_job.kind IS 'refresh, regenerate or materialize';
COMMENT ON COLUMN micromegas.claimed_job.view_set_name IS 'The view set it works on';
COMMENT ON COLUMN micromegas.claimed_job.begin_time IS 'Start of the range, or NULL for everything';
COMMENT ON COLUMN micromegas.claimed_job.end_time IS 'End of the range, or NULL';
COMMENT ON COLUMN micromegas.claimed_job.params IS 'The request''s parameters (never credentials)';
COMMENT ON COLUMN micromegas.claimed_job.attempts IS 'Claims so far, this one included';
COMMENT ON COLUMN micromegas.claimed_job.worker IS 'The worker that claimed it';
COMMENT ON COLUMN micromegas.claimed_job.lease_expires_at IS 'When the lease lapses without a heartbeat';
COMMENT ON COLUMN micromegas.claimed_job.lease_token IS 'Proves this claim to mm_heartbeat_job and mm_finish_job; only its hash is stored';

-- The stored form of a lease token, micromegas._mm_lease_hash(uuid), is a
-- Rust function (src/pg/jobs.rs): sha256(uuid_send(token)).

-- A worker claims up to max_jobs of the oldest queued jobs (of the given
-- kinds), each with a lease of micromegas_views.job_lease and a token of
-- its own. No row: nothing to do. Expired leases are swept first, but only
-- when there is one: the probe is one descent of jobs_running (the time is
-- a parameter, so it is the index's condition, not a filter of every
-- running job as clock_timestamp() in the query would be). The jobs are
-- picked, then updated by key: both statements have one good plan whatever
-- the parameters, kept for the session (plan_cache_mode): planning them
-- again at every claim was a sixth of a claim's time (#28).
CREATE FUNCTION micromegas.mm_claim_jobs(worker text, max_jobs integer DEFAULT 1, kinds text[] DEFAULT NULL)
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
  IF coalesce(btrim(worker, E' \t\n\r\f\v'), '') = '' THEN
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
           attempts = j.attempts + 1, progress = NULL
      FROM (SELECT i.job_id, gen_random_uuid() AS token FROM unnest(ids) i(job_id)) p
     WHERE j.job_id = p.job_id
    RETURNING j.job_id, j.kind::text, j.view_set_name, j.begin_time, j.end_time, j.params::jsonb, j.attempts, j.worker,
              j.lease_expires_at, p.token;
END
$$;
COMMENT ON FUNCTION micromegas.mm_claim_jobs(text, integer, text[]) IS
  'A worker claims up to max_jobs of the oldest queued jobs, each with a lease and a token of its own';

-- One job at a time: mm_claim_jobs(worker, 1, kinds).
CREATE FUNCTION micromegas.mm_claim_job(worker text, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT micromegas._mm_require_writable('mm_claim_job');
  SELECT * FROM micromegas.mm_claim_jobs($1, 1, $2)
$$;
COMMENT ON FUNCTION micromegas.mm_claim_job(text, text[]) IS
  'A worker claims the oldest queued job, with a lease and the lease token that proves the claim';

-- The row of a job held by this lease, locked; otherwise 55000 saying why.
-- The worker's name proves nothing: two workers may share one, and anyone
-- may read it. A heartbeat and a finish check the lease in their one
-- UPDATE and call this only when it found no row, for the reason.
CREATE FUNCTION micromegas._mm_held_job(id uuid, lease_token uuid) RETURNS micromegas.jobs
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j micromegas.jobs;
BEGIN
  IF id IS NULL THEN
    RAISE EXCEPTION 'a job_id is required, not NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  SELECT * INTO j FROM micromegas.jobs x WHERE x.job_id = id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % does not exist', id USING ERRCODE = 'no_data_found';
  END IF;
  IF j.state <> 'running' OR lease_token IS NULL
     OR j.lease_token_hash IS DISTINCT FROM micromegas._mm_lease_hash(lease_token) THEN
    RAISE EXCEPTION 'job % is not held by this lease', id
      USING ERRCODE = 'object_not_in_prerequisite_state',
            DETAIL = format('The job is %s%s.', j.state,
                            CASE WHEN j.state = 'running' THEN format(' under another lease (worker %s)', j.worker)
                                 ELSE '' END),
            HINT = 'The lease may have expired and the job been claimed again, or finished: stop working on it.';
  END IF;
  RETURN j;
END
$$;
COMMENT ON FUNCTION micromegas._mm_held_job(uuid,uuid) IS
  'The running job a lease token holds, locked; 55000 when the lease is lost';

-- The worker is alive: extends the lease. Returns 'running', or
-- 'cancel_requested' when the worker should stop (and finish the job).
CREATE FUNCTION micromegas.mm_heartbeat_job(job_id uuid, lease_token uuid, progress jsonb DEFAULT NULL) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  stop boolean;
BEGIN
  -- What the attempt has done so far, for people watching the job: one
  -- small JSON object (every reader sees it), kept until the next report.
  IF $3 IS NOT NULL AND (pg_catalog.jsonb_typeof($3) <> 'object' OR pg_catalog.octet_length($3::text) > 4096) THEN
    RAISE EXCEPTION 'a job''s progress must be a JSON object of at most 4096 bytes'
      USING ERRCODE = 'invalid_parameter_value',
            DETAIL = format('Got a JSON %s of %s bytes.', pg_catalog.jsonb_typeof($3), pg_catalog.octet_length($3::text));
  END IF;
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
       SET lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds()),
           progress = coalesce($3, x.progress)
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
COMMENT ON FUNCTION micromegas.mm_heartbeat_job(uuid, uuid, jsonb) IS
  'A worker extends its lease (proved by the token mm_claim_job returned), with its progress if it gives one; says whether the job should stop';

-- The worker's result. Returns the job's new state: done; failed (or queued
-- again when retryable and claims remain); cancelled when that was requested.
CREATE FUNCTION micromegas.mm_finish_job(
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
COMMENT ON FUNCTION micromegas.mm_finish_job(uuid, uuid, boolean, text, text, boolean) IS
  'A worker reports a job''s result under its lease token; any other caller gets 55000 and changes nothing';

-- </claim>

-- Cancels a job: a queued one at once; a running one is marked, and its
-- worker sees it on its next heartbeat.
CREATE FUNCTION micromegas.mm_cancel_job(job_id uuid) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_cancel_job');
  j micromegas.jobs;
BEGIN
  IF $1 IS NULL THEN
    RAISE EXCEPTION 'mm_cancel_job: job_id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  SELECT * INTO j FROM micromegas.jobs x WHERE x.job_id = $1 FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % does not exist', $1 USING ERRCODE = 'no_data_found';
  END IF;
  IF j.state = 'queued' THEN
    UPDATE micromegas.jobs x SET state = 'cancelled', finished_at = clock_timestamp(), cancel_requested = true
     WHERE x.job_id = $1;
    RETURN 'cancelled';
  ELSIF j.state = 'running' THEN
    UPDATE micromegas.jobs x SET cancel_requested = true WHERE x.job_id = $1;
    RETURN 'cancel_requested';
  END IF;
  RAISE EXCEPTION 'job % is already %', $1, j.state
    USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;
COMMENT ON FUNCTION micromegas.mm_cancel_job(uuid) IS
  'Cancel a queued job, or ask a running one to stop';

-- One job, or jobs by state and view set, newest first.
CREATE FUNCTION micromegas.mm_job(job_id uuid) RETURNS SETOF micromegas.jobs
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF $1 IS NULL THEN
    RAISE EXCEPTION 'mm_job: job_id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  RETURN QUERY SELECT * FROM micromegas.jobs x WHERE x.job_id = $1;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % does not exist', $1 USING ERRCODE = 'no_data_found';
  END IF;
END
$$;
COMMENT ON FUNCTION micromegas.mm_job(uuid) IS
  'One job';

CREATE FUNCTION micromegas.list_jobs(state text DEFAULT NULL, view_set_name text DEFAULT NULL)
RETURNS SETOF micromegas.jobs
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM micromegas.jobs x
   WHERE ($1 IS NULL OR x.state = $1) AND ($2 IS NULL OR x.view_set_name = $2)
   ORDER BY x.created_at DESC
$$;
COMMENT ON FUNCTION micromegas.list_jobs(text, text) IS
  'Jobs by state and view set, newest first';

-- Dropping a view cancels its queued jobs and asks its running ones to stop.
CREATE FUNCTION micromegas._mm_definitions_cancel_jobs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  UPDATE micromegas.jobs j
     SET state = CASE WHEN j.state = 'queued' THEN 'cancelled' ELSE j.state END,
         finished_at = CASE WHEN j.state = 'queued' THEN clock_timestamp() ELSE j.finished_at END,
         cancel_requested = true,
         failure_phase = CASE WHEN j.state = 'queued' THEN 'drop' ELSE j.failure_phase END,
         failure_message = CASE WHEN j.state = 'queued' THEN format('materialized view "%s" was dropped', OLD.view_set_name)
                                ELSE j.failure_message END
   WHERE j.view_set_name = OLD.view_set_name AND j.state IN ('queued', 'running');
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_definitions_cancel_jobs() IS
  'Trigger: cancels the queued and running jobs of a dropped view set';
CREATE TRIGGER definitions_cancel_jobs
  AFTER DELETE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_definitions_cancel_jobs();

-- with_no_data = false: creating (or replacing) the view also queues a
-- refresh of everything; mm_create_view returns its id. Not for the
-- extension's own re-checks, installs or restores.
CREATE FUNCTION micromegas._mm_definitions_refresh_on_create() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r record;
BEGIN
  IF NEW.load_status <> 'ok'
     OR micromegas._mm_write_kind(TG_OP, NEW.view_set_name) NOT IN ('create', 'replace') THEN
    RETURN NULL;
  END IF;
  SELECT * INTO r FROM micromegas._mm_request_job('refresh', NEW.view_set_name, NULL, NULL, '{}');
  PERFORM micromegas._mm_report('created_job', r.job_id::text);
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_definitions_refresh_on_create() IS
  'Trigger: queues a refresh of everything for a definition created or replaced with with_no_data = false';
CREATE TRIGGER definitions_refresh_on_create
  AFTER INSERT OR UPDATE ON micromegas.lakehouse_view_set_definitions
  FOR EACH ROW WHEN (NEW.view_options->>'with_no_data' = 'false')
  EXECUTE FUNCTION micromegas._mm_definitions_refresh_on_create();
