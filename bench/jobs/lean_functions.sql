SELECT job_id AS jid, lease_token AS tok FROM ablation.lean_claim('w' || :client_id, 1) \gset
SELECT ablation.lean_finish(:jid::uuid, :tok::uuid, true);
