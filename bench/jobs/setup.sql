-- The job-queue ablation (scripts/bench_jobs.sh): the bare SKIP LOCKED loop
-- of ./scripts/bench.sh, micromegas.jobs as shipped, and the tables and
-- functions of designs that were considered for #28, each a layer on the
-- one before. Prototypes for measurement only: they are never installed by
-- the extension, and their functions skip the refusals and error reports
-- of the shipped ones (which cost nothing measurable on the success path).
DROP SCHEMA IF EXISTS ablation CASCADE;
CREATE SCHEMA ablation;

-- The bare loop's table, as in bench/src/main.rs.
CREATE TABLE ablation.bare (id bigserial PRIMARY KEY, state text NOT NULL DEFAULT 'queued', worker text,
                            created_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX ON ablation.bare (created_at) WHERE state = 'queued';

-- Every column of micromegas.jobs, in one row with nothing else: no CHECK,
-- no trigger, no domain, no index but the key and the queued and running ones.
CREATE TABLE ablation.lean (
  job_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  kind text NOT NULL, view_set_name text NOT NULL, begin_time timestamptz, end_time timestamptz,
  params jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  state text NOT NULL DEFAULT 'queued', cancel_requested boolean NOT NULL DEFAULT false,
  worker text, lease_expires_at timestamptz, lease_token_hash bytea, attempts integer NOT NULL DEFAULT 0,
  started_at timestamptz, finished_at timestamptz,
  created_by text NOT NULL DEFAULT 'bench', created_by_role text NOT NULL DEFAULT session_user,
  failure_phase text, failure_message text, failure_retryable boolean);
CREATE INDEX lean_queued ON ablation.lean (created_at) WHERE state = 'queued';
CREATE INDEX lean_running ON ablation.lean (lease_expires_at) WHERE state = 'running';

-- The lean row's claim and finish as SECURITY DEFINER PL/pgSQL functions
-- with the shipped ones' input checks and expired-lease probe, the claim and
-- the finish one statement each.
CREATE FUNCTION ablation.lean_claim(worker text, max_jobs integer DEFAULT 1, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  now_ts timestamptz := clock_timestamp();
BEGIN
  IF pg_catalog.pg_is_in_recovery() THEN
    PERFORM micromegas._mm_require_writable('mm_claim_jobs');
  END IF;
  IF coalesce(btrim(worker), '') = '' THEN
    RAISE EXCEPTION 'a worker name is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_jobs IS NULL OR max_jobs < 1 OR max_jobs > 1000 THEN
    RAISE EXCEPTION 'max_jobs must be between 1 and 1000' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF EXISTS (SELECT 1 FROM ablation.lean x WHERE x.state = 'running' AND x.lease_expires_at < now_ts) THEN
    RAISE EXCEPTION 'no lease expires in this benchmark';
  END IF;
  RETURN QUERY
    UPDATE ablation.lean j
       SET state = 'running', worker = lean_claim.worker, started_at = clock_timestamp(),
           lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds()),
           lease_token_hash = micromegas._mm_lease_hash(p.token), attempts = j.attempts + 1
      FROM (SELECT i.job_id, gen_random_uuid() AS token
              FROM unnest(ARRAY(SELECT x.job_id FROM ablation.lean x
                                 WHERE x.state = 'queued' AND (kinds IS NULL OR x.kind = ANY (kinds))
                                 ORDER BY x.created_at LIMIT max_jobs FOR UPDATE SKIP LOCKED)) i(job_id)) p
     WHERE j.job_id = p.job_id
    RETURNING j.job_id, j.kind, j.view_set_name, j.begin_time, j.end_time, j.params, j.attempts, j.worker,
              j.lease_expires_at, p.token;
END
$$;
CREATE FUNCTION ablation.lean_finish(job_id uuid, lease_token uuid, ok boolean) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  next_state text;
BEGIN
  UPDATE ablation.lean x
     SET state = CASE WHEN x.cancel_requested THEN 'cancelled' WHEN ok THEN 'done' ELSE 'failed' END,
         lease_expires_at = NULL, lease_token_hash = NULL, finished_at = clock_timestamp()
   WHERE x.job_id = $1 AND x.state = 'running' AND x.lease_token_hash = micromegas._mm_lease_hash($2)
  RETURNING x.state INTO next_state;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % is not held by this lease', $1 USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  RETURN next_state;
END
$$;

-- A PL/pgSQL prototype of a split job row (the claim and the finish in
-- Rust were not prototyped): what a claim and a finish rewrite in a
-- narrow row of its own (keeping the lease CHECK and the domains of
-- micromegas.jobs), the request (range, parameters, audit) in another,
-- announcements made by the functions instead of a row trigger, the claim
-- and the finish one statement each.
CREATE TABLE ablation.request (
  job_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  kind micromegas.job_kind NOT NULL, view_set_name text NOT NULL,
  begin_time timestamptz, end_time timestamptz,
  params micromegas.job_params NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  created_by text NOT NULL DEFAULT current_user, created_by_role text NOT NULL DEFAULT session_user,
  CONSTRAINT request_range CHECK (begin_time IS NULL OR end_time IS NULL OR begin_time <= end_time));
CREATE INDEX ON ablation.request (view_set_name);
CREATE TABLE ablation.lease (
  job_id uuid PRIMARY KEY REFERENCES ablation.request ON DELETE CASCADE,
  kind micromegas.job_kind NOT NULL, created_at timestamptz NOT NULL,
  state micromegas.job_state NOT NULL DEFAULT 'queued', cancel_requested boolean NOT NULL DEFAULT false,
  worker text, lease_expires_at timestamptz, lease_token_hash bytea, attempts integer NOT NULL DEFAULT 0,
  started_at timestamptz, finished_at timestamptz,
  failure_phase text, failure_message text, failure_retryable boolean,
  CONSTRAINT lease_held CHECK ((state = 'running') = (lease_expires_at IS NOT NULL)
                               AND (state = 'running') = (lease_token_hash IS NOT NULL)
                               AND (state <> 'running' OR worker IS NOT NULL)));
CREATE INDEX lease_queued ON ablation.lease (created_at) WHERE state = 'queued';
CREATE INDEX lease_running ON ablation.lease (lease_expires_at) WHERE state = 'running';

CREATE FUNCTION ablation.split_claim(worker text, max_jobs integer DEFAULT 1, kinds text[] DEFAULT NULL)
RETURNS SETOF micromegas.claimed_job
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  IF pg_catalog.pg_is_in_recovery() THEN
    PERFORM micromegas._mm_require_writable('mm_claim_jobs');
  END IF;
  IF coalesce(btrim(worker), '') = '' THEN
    RAISE EXCEPTION 'a worker name is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_jobs IS NULL OR max_jobs < 1 OR max_jobs > 1000 THEN
    RAISE EXCEPTION 'max_jobs must be between 1 and 1000' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN QUERY
    UPDATE ablation.lease j
       SET state = 'running', worker = split_claim.worker, started_at = clock_timestamp(),
           lease_expires_at = clock_timestamp() + make_interval(secs => micromegas._mm_job_lease_seconds()),
           lease_token_hash = micromegas._mm_lease_hash(p.token), attempts = j.attempts + 1
      FROM (SELECT i.job_id, gen_random_uuid() AS token
              FROM unnest(ARRAY(SELECT x.job_id FROM ablation.lease x
                                 WHERE x.state = 'queued' AND (kinds IS NULL OR x.kind = ANY (kinds))
                                 ORDER BY x.created_at LIMIT max_jobs FOR UPDATE SKIP LOCKED)) i(job_id)) p,
           ablation.request r
     WHERE j.job_id = p.job_id AND r.job_id = p.job_id
    RETURNING j.job_id, r.kind::text, r.view_set_name, r.begin_time, r.end_time, r.params::jsonb, j.attempts,
              j.worker, j.lease_expires_at, p.token;
END
$$;
CREATE FUNCTION ablation.split_finish(job_id uuid, lease_token uuid, ok boolean, phase text DEFAULT NULL,
  message text DEFAULT NULL, retryable boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  next_state text;
BEGIN
  IF pg_catalog.pg_is_in_recovery() THEN
    PERFORM micromegas._mm_require_writable('mm_finish_job');
  END IF;
  IF ok IS NULL THEN
    RAISE EXCEPTION 'ok must be true or false' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  UPDATE ablation.lease x
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
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % is not held by this lease', $1 USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  IF next_state = 'queued' OR (next_state <> 'running' AND micromegas._mm_notify_finished_jobs()) THEN
    PERFORM pg_notify('micromegas_jobs', next_state);
  END IF;
  RETURN next_state;
END
$$;

-- The shipped claim, its transaction committed without waiting for the WAL
-- flush (a local setting made inside a function without a SET clause for it
-- lasts until the transaction ends). Not what ships: measured to show what
-- the flush of every claim costs.
CREATE FUNCTION ablation.unflushed_claim(worker text, max_jobs integer DEFAULT 1)
RETURNS SETOF micromegas.claimed_job LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
  RETURN QUERY SELECT * FROM micromegas.mm_claim_jobs(worker, max_jobs);
END
$$;

-- No autovacuum in the middle of a 6 s figure on two cores: reset.sql
-- truncates and vacuums each table before its figure.
ALTER TABLE ablation.bare SET (autovacuum_enabled = off);
ALTER TABLE ablation.lean SET (autovacuum_enabled = off);
ALTER TABLE ablation.request SET (autovacuum_enabled = off);
ALTER TABLE ablation.lease SET (autovacuum_enabled = off);
ALTER TABLE micromegas.jobs SET (autovacuum_enabled = off);
