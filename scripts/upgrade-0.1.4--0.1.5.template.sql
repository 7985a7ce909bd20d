-- micromegas_views 0.1.4 -> 0.1.5. What changes:
-- * privileges come from one declared matrix (sql/privileges.sql):
--   everything is revoked and granted again from it; micromegas_admin no
--   longer holds the service's functions (partition writes, file claims,
--   job claim/heartbeat/finish), a plain reader no longer loads the deny
--   rules, records hits or reads the grant snapshot;
-- * the extension's own writes are marked by backend memory its code sets
--   (intents, src/pg/trust.rs), never by trigger depth or a setting; derived
--   and audit columns are always computed; a plain CREATE of any existing
--   name (log_stats included) is 42710;
-- * the file queue follows what the partitions reference (a shared or
--   rewritten file is never queued, an UPDATE of file_path queues the old
--   one, mm_expired_files never hands out a live file);
-- * leases carry tokens: mm_claim_job / mm_claim_jobs return one,
--   mm_heartbeat_job and mm_finish_job take it instead of the worker name.
--   Jobs that were running when the upgrade ran go back to the queue (their
--   workers' heartbeats and finishes would use the old signatures);
-- * deny hits live in query_deny_hits (never locking a rule), clamped to now;
-- * list_audience_grants follows the claims of a service or admin;
-- * job requests take the catalog lock and fold only equal parameters;
--   regeneration buckets tile absolute time.

--@rust _mm_intent_begin

--@rust _mm_intent_end

--@rust _mm_intent

--@rust _mm_caller

--@rust _mm_caller_is_superuser

--@new CREATE FUNCTION micromegas._mm_loading(

--@new CREATE FUNCTION micromegas._mm_keeps_creation(

--@replace CREATE FUNCTION micromegas._mm_recheck_dependents(

--@replace CREATE FUNCTION micromegas._mm_definitions_before_write()

--@replace CREATE FUNCTION micromegas._mm_builtins_before_write()

--@replace CREATE FUNCTION micromegas._mm_write_kind(

--@replace CREATE FUNCTION micromegas.mm_restore_view(

-- The file queue (its lock helpers are in the section below).
DROP TRIGGER partitions_queue_files ON micromegas.lakehouse_partitions;
DROP FUNCTION micromegas._mm_partitions_after_delete();
CREATE INDEX temporary_files_file_path ON micromegas.temporary_files (file_path);
--@verbatim partitions.sql:file queue

--@replace CREATE FUNCTION micromegas.mm_expired_files(

--@replace CREATE FUNCTION micromegas.mm_plan_regeneration(

-- Jobs: lease tokens. Running jobs are requeued (see above).
ALTER TABLE micromegas.jobs ADD COLUMN lease_token_hash bytea;
UPDATE micromegas.jobs
   SET state = 'queued', lease_expires_at = NULL, failure_phase = 'lease',
       failure_message = format('requeued by the upgrade to 0.1.5 (leases carry tokens now); worker %s', worker),
       failure_retryable = true
 WHERE state = 'running';
ALTER TABLE micromegas.jobs DROP CONSTRAINT jobs_lease;
ALTER TABLE micromegas.jobs ADD CONSTRAINT jobs_lease CHECK ((state = 'running') = (lease_expires_at IS NOT NULL)
                               AND (state = 'running') = (lease_token_hash IS NOT NULL)
                               AND (state <> 'running' OR worker IS NOT NULL));
DROP FUNCTION micromegas.mm_claim_job(text, text[]);
DROP FUNCTION micromegas.mm_heartbeat_job(uuid, text);
DROP FUNCTION micromegas.mm_finish_job(uuid, text, boolean, text, text, boolean);
DROP FUNCTION micromegas._mm_held_job(uuid, text);
--@verbatim jobs.sql:claim

--@replace CREATE FUNCTION micromegas._mm_request_job(

--@replace CREATE FUNCTION micromegas._mm_expire_leases()

-- Deny hits, apart from the rules.
--@verbatim access.sql:deny hits
INSERT INTO micromegas.query_deny_hits (rule_id, last_hit_at)
SELECT q.rule_id, least(q.last_hit_at, now()) FROM micromegas.query_deny_list q WHERE q.last_hit_at IS NOT NULL;
ALTER TABLE micromegas.query_deny_list DROP COLUMN last_hit_at;
DROP TRIGGER query_deny_list_notify_update ON micromegas.query_deny_list;
CREATE TRIGGER query_deny_list_notify_update
  AFTER UPDATE ON micromegas.query_deny_list
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_deny_list_notify();
SELECT pg_catalog.pg_extension_config_dump('micromegas.query_deny_hits', '');

--@replace CREATE FUNCTION micromegas._mm_deny_list_before_write()

--@replace CREATE FUNCTION micromegas.list_query_denials()

--@replace CREATE FUNCTION micromegas.mm_record_query_denial_hits(

--@replace CREATE FUNCTION micromegas.mm_query_deny_list_snapshot()

--@replace CREATE FUNCTION micromegas._mm_audience_grants_before_write()

-- Audience-grant visibility.
DROP FUNCTION micromegas._mm_caller_selectors();
--@new CREATE FUNCTION micromegas._mm_caller_claims(

--@replace CREATE FUNCTION micromegas.list_audience_grants()

--@verbatim api.sql:comments

-- Privileges, from the matrix.
--@file privileges.sql

SELECT micromegas._mm_apply_privileges();
