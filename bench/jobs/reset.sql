-- Fills the table a variant drains with :jobs queued jobs (psql -v jobs=N -v variant=...).
\if :{?variant}
\else
\echo 'reset.sql needs -v variant=...'
\quit
\endif
SELECT :'variant' IN ('lean_by_hand', 'lean_token_by_hand', 'lean_functions') AS is_lean,
       :'variant' = 'split_functions' AS is_split, :'variant' = 'shipped' AS is_shipped, :'variant' = 'bare' AS is_bare \gset
\if :is_bare
TRUNCATE ablation.bare;
INSERT INTO ablation.bare (state) SELECT 'queued' FROM generate_series(1, :jobs);
VACUUM ANALYZE ablation.bare;
\endif
\if :is_lean
TRUNCATE ablation.lean;
INSERT INTO ablation.lean (kind, view_set_name) SELECT 'refresh', 'log_entries' FROM generate_series(1, :jobs);
VACUUM ANALYZE ablation.lean;
\endif
\if :is_split
TRUNCATE ablation.lease, ablation.request;
INSERT INTO ablation.request (kind, view_set_name) SELECT 'refresh', 'log_entries' FROM generate_series(1, :jobs);
INSERT INTO ablation.lease (job_id, kind, created_at) SELECT job_id, kind, created_at FROM ablation.request;
VACUUM ANALYZE ablation.lease, ablation.request;
\endif
\if :is_shipped
-- A superuser's direct write, its announcements off: 60,000 NOTIFYs would
-- only slow the reset.
ALTER TABLE micromegas.jobs DISABLE TRIGGER jobs_notify;
DELETE FROM micromegas.jobs;
INSERT INTO micromegas.jobs (kind, view_set_name, created_by) SELECT 'refresh', 'log_entries', 'bench' FROM generate_series(1, :jobs);
ALTER TABLE micromegas.jobs ENABLE TRIGGER jobs_notify;
VACUUM ANALYZE micromegas.jobs;
\endif
