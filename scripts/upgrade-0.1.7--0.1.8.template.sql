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

--@replace CREATE FUNCTION micromegas._mm_recheck_dependents(

--@verbatim jobs.sql:job_domains
DROP TRIGGER jobs_notify_change ON micromegas.jobs;
DROP TRIGGER jobs_notify ON micromegas.jobs;
ALTER TABLE micromegas.jobs
  DROP CONSTRAINT jobs_kind_check, DROP CONSTRAINT jobs_params_check, DROP CONSTRAINT jobs_state_check;
ALTER TABLE micromegas.jobs
  ALTER COLUMN kind TYPE micromegas.job_kind, ALTER COLUMN params TYPE micromegas.job_params,
  ALTER COLUMN state TYPE micromegas.job_state;
--@verbatim jobs.sql:jobs_notify_triggers
-- The claim returns the kind and parameters as the claimed_job type's
-- text and jsonb. The claim, the heartbeat and the finish ask
-- _mm_require_writable for the standby's refusal only on a standby.
--@replace CREATE FUNCTION micromegas.mm_claim_jobs(

--@replace CREATE FUNCTION micromegas.mm_heartbeat_job(

--@replace CREATE FUNCTION micromegas.mm_finish_job(

-- Privileges, from the matrix (no new function).
SELECT micromegas._mm_apply_privileges();
