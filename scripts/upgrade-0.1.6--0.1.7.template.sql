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

--@rust _mm_notify_finished_jobs
COMMENT ON FUNCTION micromegas._mm_notify_finished_jobs() IS
  'micromegas_views.notify_finished_jobs: whether a job that ends is announced on micromegas_jobs';

DROP TRIGGER jobs_notify ON micromegas.jobs;
DROP TRIGGER jobs_notify_change ON micromegas.jobs;
--@verbatim jobs.sql:jobs_notify_triggers
COMMENT ON FUNCTION micromegas._mm_jobs_notify() IS
  'Trigger: notifies micromegas_jobs of a job queued or asked to stop, and of one finished when micromegas_views.notify_finished_jobs is on (one payload per row; never for a claim or a heartbeat)';

DROP FUNCTION micromegas._mm_lease_hash(uuid);
--@rust _mm_lease_hash
COMMENT ON FUNCTION micromegas._mm_lease_hash(uuid) IS
  'The SHA-256 of a lease token: only the hash is stored';

--@replace CREATE FUNCTION micromegas.mm_claim_jobs(

--@replace CREATE FUNCTION micromegas.mm_heartbeat_job(

--@replace CREATE FUNCTION micromegas.mm_finish_job(

-- Privileges, from the matrix (a new internal function: no grant).
SELECT micromegas._mm_apply_privileges();
