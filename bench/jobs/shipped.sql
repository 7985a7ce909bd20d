SELECT job_id AS jid, lease_token AS tok FROM micromegas.mm_claim_jobs('w' || :client_id, 1) \gset
SELECT micromegas.mm_finish_job(:jid::uuid, :tok::uuid, true);
