SELECT job_id AS jid, lease_token AS tok FROM ablation.split_claim('w' || :client_id, 1) \gset
SELECT ablation.split_finish(:jid::uuid, :tok::uuid, true);
