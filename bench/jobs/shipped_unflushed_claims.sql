SELECT job_id AS jid, lease_token AS tok FROM ablation.unflushed_claim('w' || :client_id, 1) \gset
SELECT micromegas.mm_finish_job(:jid::uuid, :tok::uuid, true);
