UPDATE ablation.bare q SET state = 'running', worker = 'w' || :client_id WHERE q.id = (SELECT x.id FROM ablation.bare x WHERE x.state = 'queued' ORDER BY x.created_at LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING q.id AS jid \gset
UPDATE ablation.bare SET state = 'done' WHERE id = :jid AND worker = 'w' || :client_id RETURNING state \gset
