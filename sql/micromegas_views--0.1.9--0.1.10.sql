-- micromegas_views 0.1.9 -> 0.1.10. What changes:
-- * the file queue no longer takes advisory locks (any role could take
--   them, freezing every partition write; a cancelled daemon could keep
--   one for the rest of its session): a statement that writes or retires
--   partitions takes each path it touches as a row of the new
--   micromegas.file_claims, held until its transaction ends; the daemon's
--   claim records each file it hands out there, after waiting for every
--   writer of that path in flight, and a writer that would put a handed-out
--   file back in use is refused (55000). Before, a writer whose partition
--   row existed before its lock (waiting on the overlap guard) or a second
--   daemon skipping the first's rows could see a file a live partition
--   references handed out for deletion; two queue rows of one path could
--   be handed to two daemons. mm_expired_files now requires READ COMMITTED,
--   and takes a path before its queue rows (the writers' order). A record
--   stays for the retention, then until every transaction that held a
--   transaction id when its claim committed has ended. Call it in a
--   transaction of its own and delete the objects after it commits.
-- * an audience grant's notification carries only the operation and the
--   version: any role may LISTEN, and a grant names people and audiences.
-- * messages name an infinite time as infinity and a BC one with its era.
-- * a NULL job id (mm_job, mm_cancel_job, a heartbeat or finish) is 22004;
--   remove_query_denial(NULL) says no id was given; a worker name or deny
--   reason of tabs and newlines is blank; micromegas_views.actor over 255
--   characters is refused by name (22001) wherever an actor is recorded; an
--   invalid audience, axis or selector is quoted up to 80 characters.
-- * retire_partitions, a DROP and retire_incompatible_partitions report as
--   queued only the files no remaining partition references, once each.
-- * (Rust) a deny rule may use coalesce and nvl: rules are simplified before
--   they run, as DataFusion's planner does.
DROP TRIGGER partitions_queue_files ON micromegas.lakehouse_partitions;
DROP TRIGGER partitions_queue_replaced_files ON micromegas.lakehouse_partitions;
DROP TRIGGER partitions_unqueue_files ON micromegas.lakehouse_partitions;
DROP FUNCTION micromegas._mm_partitions_queue_files();
DROP FUNCTION micromegas._mm_lock_file_buckets(integer[]);
DROP FUNCTION micromegas._mm_file_bucket(text);
-- Who is working on a file path, and which files were handed out for
-- deletion. A statement that writes or retires partitions takes each path
-- it touches by inserting a row here, in path order, and deletes it again
-- before it returns: the row is dead once the transaction ends, but until
-- then another transaction inserting the same path waits for this one to
-- end (a unique index waits for an insert in flight). The daemon's claim
-- inserts a row that stays (handed_out_at set): a writer that would put a
-- handed-out file back in use meets it and is refused, whether it came
-- before the claim committed or after. Rows, not advisory locks: no role but
-- the extension's own functions can write this table, so no session can
-- hold a path (advisory locks are open to anyone), and a wait is a
-- transaction's, released with it whatever ends it.
CREATE TABLE micromegas.file_claims (
  file_path varchar(2047) PRIMARY KEY,
  -- NULL: a statement's own row, deleted by it; otherwise when the file was
  -- handed out for deletion.
  handed_out_at timestamptz,
  -- Set once the record is past micromegas_views.file_retention: the id of
  -- a later mm_expired_files call that saw it committed before taking that
  -- id. The record goes when every transaction below it has ended (a writer
  -- whose row waited on the overlap guard, say, may not have reached its
  -- trigger yet).
  handed_out_horizon xid8
);
COMMENT ON TABLE micromegas.file_claims IS
  'File paths being written or retired (rows deleted by their own transaction) and files handed out for deletion';

-- The files of these (deleted) partitions that no partition references any
-- more, once each (with the largest size given for it): what the queue
-- trigger queues, and what a retirement reports as queued.
CREATE FUNCTION micromegas._mm_unreferenced_files(gone micromegas.lakehouse_partitions[])
RETURNS TABLE (file_path text, file_size bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT DISTINCT ON (g.file_path) g.file_path::text, coalesce(g.file_size, 0)
    FROM unnest(gone) g
   WHERE g.file_path IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p WHERE p.file_path = g.file_path)
   ORDER BY g.file_path, g.file_size DESC NULLS LAST
$$;

-- The file queue follows what the partitions reference, whatever wrote
-- them: a file a statement took out of use (the file of a deleted
-- partition, the old file of one whose file_path an UPDATE changed) goes to
-- temporary_files once, and only when no remaining partition references it
-- (two partitions may share a file); a file a statement put (back) in use
-- (a swap writing back a partition it retired, a service re-inserting one)
-- leaves the queue, unless the daemon was handed it for deletion: then the
-- statement is refused. Empty partitions have no file.
CREATE FUNCTION micromegas._mm_partitions_queue_files() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  paths text[];
  taken text[];
  lost text;
BEGIN
  -- (A transition table exists only for its own event: each is read only
  -- there.)
  IF TG_OP = 'INSERT' THEN
    paths := ARRAY(SELECT DISTINCT b.file_path FROM born b WHERE b.file_path IS NOT NULL ORDER BY 1);
  ELSIF TG_OP = 'DELETE' THEN
    paths := ARRAY(SELECT DISTINCT g.file_path FROM gone g WHERE g.file_path IS NOT NULL ORDER BY 1);
  ELSE
    paths := ARRAY(SELECT b.file_path FROM born b WHERE b.file_path IS NOT NULL
                   UNION
                   SELECT g.file_path FROM gone g WHERE g.file_path IS NOT NULL
                   ORDER BY 1);
  END IF;
  IF cardinality(paths) = 0 THEN
    RETURN NULL;
  END IF;
  -- One transaction at a time per path, in path order (two writers of
  -- partitions sharing a file, or a writer and a retirement, each see the
  -- other's committed rows in the checks below; the daemon's claim waits
  -- for them). A path not taken is one handed out for deletion.
  WITH mine AS (
    INSERT INTO micromegas.file_claims AS c (file_path)
    SELECT p FROM unnest(paths) p ORDER BY p
    ON CONFLICT ON CONSTRAINT file_claims_pkey DO NOTHING
    RETURNING c.file_path)
  SELECT coalesce(array_agg(m.file_path::text), '{}') INTO taken FROM mine m;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    SELECT b.file_path INTO lost FROM born b
     WHERE b.file_path IS NOT NULL AND NOT b.file_path = ANY (taken)
     ORDER BY 1 LIMIT 1;
    IF FOUND THEN
      RAISE EXCEPTION 'file % was handed out for deletion', lost
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The file daemon claimed it (mm_expired_files): it is being deleted, or is gone.',
              HINT = 'Write the partition''s data to a new file.';
    END IF;
    DELETE FROM micromegas.temporary_files t
     WHERE t.file_path IN (SELECT b.file_path FROM born b WHERE b.file_path IS NOT NULL);
  END IF;
  IF TG_OP IN ('DELETE', 'UPDATE') THEN
    INSERT INTO micromegas.temporary_files (file_path, file_size, expiration)
    SELECT u.file_path, u.file_size, micromegas._mm_file_expiration()
      FROM micromegas._mm_unreferenced_files(ARRAY(SELECT g::micromegas.lakehouse_partitions FROM gone g)) u;
  END IF;
  -- Our rows go: dead when this transaction ends, whatever ends it.
  DELETE FROM micromegas.file_claims c WHERE c.file_path = ANY (taken) AND c.handed_out_at IS NULL;
  RETURN NULL;
END
$$;
CREATE TRIGGER partitions_queue_files
  AFTER DELETE ON micromegas.lakehouse_partitions
  REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_partitions_queue_files();
CREATE TRIGGER partitions_queue_replaced_files
  AFTER UPDATE ON micromegas.lakehouse_partitions
  REFERENCING OLD TABLE AS gone NEW TABLE AS born
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_partitions_queue_files();
CREATE TRIGGER partitions_unqueue_files
  AFTER INSERT ON micromegas.lakehouse_partitions
  REFERENCING NEW TABLE AS born
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_partitions_queue_files();
COMMENT ON COLUMN micromegas.file_claims.file_path IS 'A file path being written or retired, or handed out for deletion';
COMMENT ON COLUMN micromegas.file_claims.handed_out_at IS 'When mm_expired_files handed the file out (NULL: a statement''s own row, gone when it ends)';
COMMENT ON COLUMN micromegas.file_claims.handed_out_horizon IS 'Set past the retention: the record goes once every transaction below this id has ended';
COMMENT ON FUNCTION micromegas._mm_unreferenced_files(micromegas.lakehouse_partitions[]) IS
  'The files of the given deleted partitions that no partition references any more, once each: what the queue trigger queues and a retirement reports';
COMMENT ON FUNCTION micromegas._mm_partitions_queue_files() IS
  'Trigger: takes the paths a statement touches in turn, queues the files no partition references any more, takes a file out of the queue when one does again, refuses a file handed out for deletion';
SELECT pg_catalog.pg_extension_config_dump('micromegas.file_claims', '');

CREATE OR REPLACE FUNCTION micromegas.mm_expired_files(max_files integer DEFAULT 1000)
RETURNS TABLE (file_path text, file_size bigint, expiration timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_expired_files');
  candidates text[];
  fresh text[];
  claimed micromegas.temporary_files[];
  dropped text[];
  old_tids tid[];
  old_xmins xid[];
  retained_until timestamptz;
BEGIN
  IF max_files IS NULL OR max_files < 1 THEN
    RAISE EXCEPTION 'mm_expired_files: max_files must be a positive number, not %', coalesce(max_files::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- The check below must see what the writers it waited for committed: a
  -- snapshot per statement.
  IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'mm_expired_files: call it in a READ COMMITTED transaction, not %',
        pg_catalog.upper(pg_catalog.current_setting('transaction_isolation'))
      USING ERRCODE = 'invalid_transaction_state',
            HINT = 'Its check that no partition references a file must see the writers it waited for.';
  END IF;
  -- The records past the retention, as they are before this transaction
  -- takes an id: each was committed before that id exists, so the id is
  -- above the id of every transaction that held one when its claim
  -- committed (the horizon set below). A horizon not below this snapshot's
  -- xmax (no committed transaction has such an id) came from another
  -- cluster (a restore) and is set again. In a transaction that already
  -- has an id, none is set.
  retained_until := clock_timestamp() - make_interval(secs => micromegas._mm_file_retention_seconds());
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NULL THEN
    SELECT coalesce(array_agg(x.ctid), '{}'), coalesce(array_agg(x.xmin), '{}') INTO old_tids, old_xmins
      FROM micromegas.file_claims x
     WHERE x.handed_out_at < retained_until
       AND (x.handed_out_horizon IS NULL
            OR x.handed_out_horizon >= pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()));
  ELSIF EXISTS (SELECT 1 FROM micromegas.file_claims x
                 WHERE x.handed_out_at < retained_until AND x.handed_out_horizon IS NULL) THEN
    RAISE NOTICE 'mm_expired_files: records of handed-out files past the retention are not purged in a transaction that has already written'
      USING HINT = 'Call it in a transaction of its own.';
  END IF;
  -- The candidates: the paths of the oldest expired queue rows no other
  -- transaction holds (another daemon's, a writer's). Their locks are taken
  -- only to skip the held rows, and let go at once (the block's rollback):
  -- holding a queue row while waiting for a writer below, who may be
  -- waiting for that row, would deadlock.
  BEGIN
    candidates := ARRAY(SELECT DISTINCT c.file_path FROM (
                          SELECT y.file_path FROM micromegas.temporary_files y
                           WHERE y.expiration <= now() ORDER BY y.expiration LIMIT max_files
                             FOR UPDATE SKIP LOCKED) c);
    RAISE EXCEPTION USING ERRCODE = 'MMV01';
  EXCEPTION WHEN SQLSTATE 'MMV01' THEN
    NULL;
  END;
  -- Their records, in path order: each insert waits for the writers of its
  -- path in flight; a path already handed out is not recorded again.
  WITH handed AS (
    INSERT INTO micromegas.file_claims AS c (file_path, handed_out_at)
    SELECT p, clock_timestamp() FROM unnest(candidates) p ORDER BY p
    ON CONFLICT ON CONSTRAINT file_claims_pkey DO NOTHING
    RETURNING c.file_path)
  SELECT coalesce(array_agg(h.file_path::text), '{}') INTO fresh FROM handed h;
  -- Then their expired queue rows, skipping those another transaction
  -- holds; a candidate not recorded now was handed out already (its record
  -- existed, or another daemon's committed): its queue rows go, unreturned.
  WITH picked AS (
    DELETE FROM micromegas.temporary_files t
     WHERE t.ctid = ANY (ARRAY(SELECT y.ctid FROM micromegas.temporary_files y
                                WHERE y.expiration <= now() AND y.file_path = ANY (candidates)
                                  FOR UPDATE SKIP LOCKED))
    RETURNING t.*)
  SELECT coalesce(array_agg(p), '{}') INTO claimed FROM picked p WHERE p.file_path = ANY (fresh);
  -- A path with no queue row taken, or that a partition references (now,
  -- the writers it waited for committed), is not handed out: its record
  -- goes (its queue rows too, when it is in use). What is returned is
  -- exactly what stays recorded, its time the end of the waits.
  WITH unclaimed AS (
    DELETE FROM micromegas.file_claims c
     WHERE c.file_path = ANY (fresh)
       AND (NOT EXISTS (SELECT 1 FROM unnest(claimed) x WHERE x.file_path = c.file_path)
            OR EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p WHERE p.file_path = c.file_path))
    RETURNING c.file_path)
  SELECT coalesce(array_agg(u.file_path::text), '{}') INTO dropped FROM unclaimed u;
  UPDATE micromegas.file_claims c SET handed_out_at = clock_timestamp()
   WHERE c.file_path = ANY (fresh);
  -- Old records, last (a record being purged makes a daemon recording its
  -- path wait; purged first, it could wait on one that waits on this one).
  -- Those found past the retention at the start (the same row versions)
  -- get this transaction's id as their horizon; a record goes once every
  -- transaction below its horizon has ended (the snapshot's xmin is at most
  -- the oldest running id) — a writer whose row waited on the overlap guard
  -- before reaching its trigger, say. Records another daemon holds are left
  -- to it.
  IF cardinality(old_tids) > 0 THEN
    UPDATE micromegas.file_claims c
       SET handed_out_horizon = pg_catalog.pg_current_xact_id()
     WHERE c.ctid = ANY (ARRAY(
             SELECT x.ctid FROM micromegas.file_claims x
              WHERE x.ctid = ANY (old_tids)
                AND EXISTS (SELECT 1 FROM unnest(old_tids, old_xmins) o(tid, xmin)
                             WHERE o.tid = x.ctid AND o.xmin = x.xmin)
                FOR UPDATE SKIP LOCKED));
  END IF;
  DELETE FROM micromegas.file_claims c
   WHERE c.ctid = ANY (ARRAY(
           SELECT x.ctid FROM micromegas.file_claims x
            WHERE x.handed_out_horizon <= pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())
              FOR UPDATE SKIP LOCKED));
  RETURN QUERY
    SELECT DISTINCT ON (x.file_path) x.file_path::text, x.file_size, x.expiration
      FROM unnest(claimed) x
     WHERE NOT x.file_path = ANY (dropped)
     ORDER BY x.file_path, x.expiration;
END
$$;
COMMENT ON FUNCTION micromegas.mm_expired_files(integer) IS
  'The daemon claims expired files of retired partitions that no partition references, recorded as handed out (READ COMMITTED; delete them after it commits)';

CREATE OR REPLACE FUNCTION micromegas._mm_audience_grants_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  -- Only what changed and the version, as for the deny list: any role may
  -- LISTEN, and a grant names people and audiences that readers may not see.
  PERFORM pg_notify('micromegas_audience_grants', json_build_object(
    'op', lower(TG_OP), 'version', (SELECT a.audience_grants_version FROM micromegas.access_state a))::text);
  RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_time_text(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE WHEN t IS NULL THEN 'NULL'
              WHEN NOT isfinite(t) THEN t::text
              ELSE regexp_replace(to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '\.?0+$', '') || 'Z'
                   || CASE WHEN t AT TIME ZONE 'UTC' < '0001-01-01 00:00'::timestamp THEN ' BC' ELSE '' END END
$$;

-- Bad input named: a NULL job id or rule id, a blank worker name or deny
-- reason made of tabs or newlines.
CREATE OR REPLACE FUNCTION micromegas.remove_query_denial(rule_id text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('remove_query_denial');
  id uuid;
BEGIN
  IF rule_id IS NULL THEN
    RETURN 'ERROR: no rule id given (NULL)';
  END IF;
  BEGIN
    id := rule_id::uuid;
  EXCEPTION WHEN invalid_text_representation THEN
    RETURN format('ERROR: ''%s'' is not a valid rule id', rule_id);
  END;
  DELETE FROM micromegas.query_deny_list q WHERE q.rule_id = id;
  IF FOUND THEN
    RETURN format('SUCCESS: removed rule %s', id);
  END IF;
  RETURN format('ERROR: no such rule: %s', id);
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_deny_list_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  cap integer;
  held bigint;
BEGIN
  UPDATE micromegas.access_state SET deny_list_version = deny_list_version + 1;
  IF TG_OP = 'DELETE' THEN
    -- Its hit time goes too, unless a service is recording one right now
    -- (never waited for: the listings only show hits of existing rules).
    DELETE FROM micromegas.query_deny_hits h
     WHERE h.ctid = ANY (ARRAY(SELECT x.ctid FROM micromegas.query_deny_hits x
                                WHERE x.rule_id = OLD.rule_id FOR UPDATE SKIP LOCKED));
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' AND (NEW.rule_id, NEW.created_at, NEW.created_by)
                          IS DISTINCT FROM (OLD.rule_id, OLD.created_at, OLD.created_by) THEN
    RAISE EXCEPTION 'cannot change the id or creation of deny rule %', OLD.rule_id
      USING ERRCODE = 'feature_not_supported',
            HINT = 'Remove the rule and add a new one.';
  END IF;
  IF NEW.reason IS NULL OR btrim(NEW.reason, E' \t\n\r\f\v') = '' THEN
    RAISE EXCEPTION 'reason must not be empty'
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Say why the queries are denied: it is stored with the rule and shown to a denied caller.';
  END IF;
  IF TG_OP = 'INSERT' OR NEW.match_expr IS DISTINCT FROM OLD.match_expr THEN
    PERFORM micromegas._mm_check_deny_rule(NEW.match_expr);
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NOT micromegas._mm_keeps_creation(NEW.created_at, NEW.created_by) THEN
      NEW.created_at := clock_timestamp();
      NEW.created_by := micromegas._mm_actor();
    END IF;
    cap := micromegas._mm_deny_max_rules();
    SELECT count(*) INTO held FROM micromegas.query_deny_list;
    IF held >= cap THEN
      RAISE EXCEPTION 'the query deny list is full: it holds % rules, the limit is %', held, cap
        USING ERRCODE = 'program_limit_exceeded',
              HINT = 'Remove a rule with remove_query_denial(rule_id), or have a superuser raise micromegas_views.query_deny_max_rules.';
    END IF;
  END IF;
  RETURN NEW;
END
$$;
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
           attempts = j.attempts + 1
      FROM (SELECT i.job_id, gen_random_uuid() AS token FROM unnest(ids) i(job_id)) p
     WHERE j.job_id = p.job_id
    RETURNING j.job_id, j.kind::text, j.view_set_name, j.begin_time, j.end_time, j.params::jsonb, j.attempts, j.worker,
              j.lease_expires_at, p.token;
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_held_job(id uuid, lease_token uuid) RETURNS micromegas.jobs
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
CREATE OR REPLACE FUNCTION micromegas.mm_cancel_job(job_id uuid) RETURNS text
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
CREATE OR REPLACE FUNCTION micromegas.mm_job(job_id uuid) RETURNS SETOF micromegas.jobs
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
CREATE OR REPLACE FUNCTION micromegas._mm_actor() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  actor text := coalesce(nullif(current_setting('micromegas_views.actor', true), ''), session_user::text);
BEGIN
  -- Every table that records an actor holds 255 characters.
  IF length(actor) > 255 THEN
    RAISE EXCEPTION 'micromegas_views.actor is too long: % characters, the limit is 255', length(actor)
      USING ERRCODE = 'string_data_right_truncation',
            HINT = 'Set it to the name of the user the service acts for.';
  END IF;
  RETURN actor;
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_audience_problem(audience text, axis text, selector text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE
    WHEN audience IS NULL OR audience !~ '^[A-Za-z0-9_-]+$' OR octet_length(audience) > 255 THEN
      format('invalid audience "%s": an audience is 1 to 255 letters, digits, ''_'' or ''-''',
             left(audience, 80) || CASE WHEN length(audience) > 80 THEN '...' ELSE '' END)
    WHEN axis IS NULL OR axis NOT IN ('read', 'mint') THEN
      format('invalid axis "%s": the axis is ''read'' or ''mint''',
             left(axis, 80) || CASE WHEN length(axis) > 80 THEN '...' ELSE '' END)
    WHEN selector IS NULL OR octet_length(selector) > 255
         OR NOT (selector = '*' OR selector ~ '^(user|group):.+$') THEN
      format('invalid selector "%s": a selector is ''*'', ''user:<id>'' or ''group:<id>''',
             left(selector, 80) || CASE WHEN length(selector) > 80 THEN '...' ELSE '' END)
  END
$$;

-- A retirement reports the files it queued (_mm_unreferenced_files, with
-- the queue trigger, above): a file another partition still references is
-- kept, not counted as freed.
CREATE OR REPLACE FUNCTION micromegas.retire_partitions(
  view_set_name text, view_instance_id text, begin_time timestamptz, end_time timestamptz)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('retire_partitions');
  target text := format('%s/%s', $1, $2);
  gone_rows micromegas.lakehouse_partitions[];
  r micromegas.lakehouse_partitions;
BEGIN
  PERFORM micromegas._mm_check_range('retire_partitions', begin_time, end_time);
  IF $1 IS NULL OR $2 IS NULL THEN
    RAISE EXCEPTION 'retire_partitions: view_set_name and view_instance_id must not be NULL'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  -- The statement ends (its queue trigger runs) before the messages say
  -- what became of each file.
  WITH gone AS (
    DELETE FROM micromegas.lakehouse_partitions p
     WHERE p.view_set_name = $1 AND p.view_instance_id = $2
       AND p.begin_insert_time >= begin_time AND p.end_insert_time <= end_time
    RETURNING p.*)
  SELECT coalesce(array_agg(g ORDER BY g.begin_insert_time, g.end_insert_time, g.file_schema_hash), '{}')
    INTO gone_rows FROM gone g;
  FOREACH r IN ARRAY gone_rows LOOP
    RETURN QUERY SELECT clock_timestamp(), format('retired partition %s; %s',
      micromegas._mm_partition_label(r.view_set_name, r.view_instance_id, r.begin_insert_time,
                                     r.end_insert_time, r.file_schema_hash),
      CASE WHEN r.file_path IS NULL THEN 'empty, no file'
           WHEN EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p WHERE p.file_path = r.file_path)
             THEN format('file %s kept: another partition references it', r.file_path)
           ELSE format('file %s (%s bytes) queued for deletion', r.file_path, coalesce(r.file_size, 0)) END);
  END LOOP;
  RETURN QUERY SELECT clock_timestamp(), format('retired %s partition(s) of %s within [%s, %s]; %s bytes queued for deletion',
    cardinality(gone_rows), target, micromegas._mm_time_text(begin_time), micromegas._mm_time_text(end_time),
    (SELECT coalesce(sum(u.file_size), 0) FROM micromegas._mm_unreferenced_files(gone_rows) u));
END
$$;
CREATE OR REPLACE FUNCTION micromegas._mm_definitions_retire_dropped() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n bigint;
  bytes bigint;
  gone_rows micromegas.lakehouse_partitions[];
BEGIN
  WITH gone AS (
    DELETE FROM micromegas.lakehouse_partitions p
     WHERE p.view_set_name = OLD.view_set_name AND p.view_instance_id = 'global'
    RETURNING p.*)
  SELECT count(*), coalesce(array_agg(g), '{}') INTO n, gone_rows FROM gone g;
  SELECT coalesce(sum(u.file_size), 0) INTO bytes FROM micromegas._mm_unreferenced_files(gone_rows) u;
  PERFORM pg_catalog.set_config('micromegas_views.retired', n || ' ' || bytes, true);
  IF n > 0 THEN
    RAISE NOTICE 'retired % partition(s) of materialized view "%"; % bytes of files queued for deletion',
      n, OLD.view_set_name, bytes;
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION micromegas.retire_incompatible_partitions(view_set_name text DEFAULT NULL)
RETURNS SETOF micromegas.partition_retirement
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  on_primary boolean := micromegas._mm_require_writable('retire_incompatible_partitions');
BEGIN
  RETURN QUERY
    WITH candidates AS (
      SELECT p.ctid AS tid, p.view_set_name::text AS vs, p.view_instance_id::text AS inst,
             micromegas._mm_partition_label(p.view_set_name, p.view_instance_id, p.begin_insert_time,
                                            p.end_insert_time, p.file_schema_hash) AS label,
             p.begin_insert_time, p.file_schema_hash
        FROM micromegas.lakehouse_partitions p
        JOIN micromegas.view_set_schema_hashes v ON v.view_set_name = p.view_set_name
       WHERE p.file_schema_hash <> v.schema_hash AND ($1 IS NULL OR p.view_set_name = $1)
    ), locked AS (
      SELECT p.ctid AS tid FROM micromegas.lakehouse_partitions p
       WHERE p.ctid = ANY (ARRAY(SELECT c.tid FROM candidates c))
         FOR UPDATE SKIP LOCKED
    ), gone AS (
      DELETE FROM micromegas.lakehouse_partitions p USING locked l
       WHERE p.ctid = l.tid
      RETURNING l.tid, p.file_path, coalesce(p.file_size, 0) AS file_size
    ), freed AS (
      -- The files the queue trigger queues: those no partition left
      -- references, once per path (_mm_unreferenced_files' rule, written
      -- out here because this statement still sees the rows it retires:
      -- they are the locked ones).
      SELECT DISTINCT ON (c.vs, c.inst, g.file_path) c.vs, c.inst, g.file_size
        FROM gone g JOIN candidates c ON c.tid = g.tid
       WHERE g.file_path IS NOT NULL
         AND NOT EXISTS (SELECT 1 FROM micromegas.lakehouse_partitions p
                          WHERE p.file_path = g.file_path AND NOT p.ctid = ANY (ARRAY(SELECT l.tid FROM locked l)))
       ORDER BY c.vs, c.inst, g.file_path, g.file_size DESC
    )
    SELECT c.vs, c.inst,
           count(g.tid), count(*) - count(g.tid),
           (SELECT coalesce(sum(f.file_size), 0) FROM freed f WHERE f.vs = c.vs AND f.inst = c.inst)::bigint,
           array_agg(CASE WHEN g.tid IS NOT NULL THEN 'SUCCESS: Retired partition ' || c.label
                          ELSE 'ERROR: Partition ' || c.label || ' is being changed by another transaction; not retired' END
                     ORDER BY c.begin_insert_time, c.file_schema_hash)
      FROM candidates c LEFT JOIN gone g ON g.tid = c.tid
     GROUP BY c.vs, c.inst
     ORDER BY c.vs, c.inst;
END
$$;

-- Privileges, from the matrix (a new table, functions created again).
CREATE OR REPLACE FUNCTION micromegas.mm_privilege_matrix()
RETURNS TABLE (object_kind text, object_name text, public text, reader text, service text, admin text)
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT * FROM (VALUES
    -- definitions
    ('function', 'mm_catalog_version',            'EXECUTE', '',        '',        ''),
    ('function', 'list_view_sets',                'EXECUTE', '',        '',        ''),
    ('function', 'mm_privilege_matrix',           'EXECUTE', '',        '',        ''),
    ('function', 'list_view_set_definitions',     '', 'EXECUTE', '', ''),
    ('function', 'mm_view_set_snapshot',          '', 'EXECUTE', '', ''),
    ('function', 'mm_materialization_order',      '', 'EXECUTE', '', ''),
    ('function', 'list_view_dependencies',        '', 'EXECUTE', '', ''),
    ('function', 'mm_catalog_violations',         '', 'EXECUTE', '', ''),
    ('function', 'mm_explain_view',               '', 'EXECUTE', '', ''),
    ('function', 'mm_view_history',               '', 'EXECUTE', '', ''),
    ('function', 'mm_describe_view',              '', 'EXECUTE', '', ''),
    ('function', 'mm_create_view',                '', '', '', 'EXECUTE'),
    ('function', 'mm_drop_view',                  '', '', '', 'EXECUTE'),
    ('function', 'mm_restore_view',               '', '', '', 'EXECUTE'),
    ('function', 'mm_prune_view_history',         '', '', '', 'EXECUTE'),
    ('function', 'mm_register_builtin_view_set',  '', '', 'EXECUTE', 'EXECUTE'),
    ('function', 'mm_require_author_checks',      '', '', '', 'EXECUTE'),
    -- partitions
    ('function', 'list_partitions',               '', 'EXECUTE', '', ''),
    ('function', 'list_incompatible_partitions',  '', 'EXECUTE', '', ''),
    ('function', 'mm_plan_regeneration',          '', 'EXECUTE', '', ''),
    ('function', 'retire_partitions',             '', '', '', 'EXECUTE'),
    ('function', 'retire_partition_by_metadata',  '', '', '', 'EXECUTE'),
    ('function', 'retire_partition_by_file',      '', '', '', 'EXECUTE'),
    ('function', 'retire_incompatible_partitions','', '', '', 'EXECUTE'),
    ('function', 'mm_write_partition',            '', '', 'EXECUTE', ''),
    ('function', 'mm_replace_partitions',         '', '', 'EXECUTE', ''),
    ('function', 'mm_expired_files',              '', '', 'EXECUTE', ''),
    -- jobs
    ('function', 'mm_job',                        '', 'EXECUTE', '', ''),
    ('function', 'list_jobs',                     '', 'EXECUTE', '', ''),
    ('function', 'mm_refresh_view',               '', '', '', 'EXECUTE'),
    ('function', 'regenerate_partitions',         '', '', '', 'EXECUTE'),
    ('function', 'mm_cancel_job',                 '', '', '', 'EXECUTE'),
    ('function', 'mm_claim_job',                  '', '', 'EXECUTE', ''),
    ('function', 'mm_claim_jobs',                 '', '', 'EXECUTE', ''),
    ('function', 'mm_heartbeat_job',              '', '', 'EXECUTE', ''),
    ('function', 'mm_finish_job',                 '', '', 'EXECUTE', ''),
    -- query deny list and audience grants
    ('function', 'mm_sql_hash',                   '', 'EXECUTE', '', ''),
    ('function', 'mm_access_versions',            '', 'EXECUTE', '', ''),
    ('function', 'list_audience_grants',          '', 'EXECUTE', '', ''),
    ('function', 'mm_query_deny_list_snapshot',   '', '', 'EXECUTE', 'EXECUTE'),
    ('function', 'mm_match_query_denial',         '', '', 'EXECUTE', 'EXECUTE'),
    ('function', 'mm_match_query_denial_context', '', '', 'EXECUTE', 'EXECUTE'),
    ('function', 'mm_audience_grants_snapshot',   '', '', 'EXECUTE', 'EXECUTE'),
    ('function', 'mm_record_query_denial_hits',   '', '', 'EXECUTE', ''),
    ('function', 'deny_queries',                  '', '', '', 'EXECUTE'),
    ('function', 'list_query_denials',            '', '', '', 'EXECUTE'),
    ('function', 'remove_query_denial',           '', '', '', 'EXECUTE'),
    ('function', 'mm_grant_audience',             '', '', '', 'EXECUTE'),
    ('function', 'mm_revoke_audience',            '', '', '', 'EXECUTE'),
    -- internal, but the audience_grants CHECK runs it as the writer (a pure
    -- rule check): the admin, who may write the table directly
    ('function', '_mm_audience_problem',          '', '', '', 'EXECUTE'),
    -- tables and views
    ('table', 'catalog_state',                          '', 'SELECT', '', ''),
    ('table', 'builtin_view_sets',                      '', 'SELECT', '', 'INSERT, UPDATE, DELETE'),
    ('table', 'lakehouse_view_set_definitions',         '', 'SELECT', '', 'INSERT, UPDATE, DELETE'),
    ('table', 'lakehouse_view_set_definition_history',  '', 'SELECT', '', ''),
    ('table', 'removed_shipped_rows',                   '', '', '', 'SELECT, INSERT, DELETE'),
    ('table', 'lakehouse_partitions',                   '', 'SELECT', 'INSERT, UPDATE, DELETE', ''),
    ('table', 'temporary_files',                        '', 'SELECT', 'INSERT, DELETE', ''),
    ('table', 'file_claims',                            '', '', '', ''),
    ('table', 'view_set_schema_hashes',                 '', 'SELECT', '', ''),
    ('table', 'jobs',                                   '', 'SELECT', '', ''),
    ('table', 'access_state',                           '', '', '', ''),
    ('table', 'query_deny_list',                        '', '', 'SELECT', 'SELECT, INSERT, UPDATE, DELETE'),
    ('table', 'query_deny_hits',                        '', '', 'SELECT', 'SELECT'),
    ('table', 'audience_grants',                        '', '', 'SELECT', 'SELECT, INSERT, UPDATE, DELETE'),
    ('table', 'author_check_requirements',              '', 'SELECT', '', '')
  ) AS m(object_kind, object_name, public, reader, service, admin)
$$;
SELECT micromegas._mm_apply_privileges();
