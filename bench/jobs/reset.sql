-- Fills the table a variant drains with :jobs queued jobs, vacuumed and
-- checkpointed (psql -v variant=... -v jobs=N).
\if :{?variant}
\else
\warn 'reset.sql needs -v variant=...'
SELECT 1/0 AS reset_needs_a_variant;
\endif
SELECT :'variant' IN ('bare', 'bare_unflushed_claims') AS is_bare,
       :'variant' IN ('lean_by_hand', 'lean_token_by_hand', 'lean_functions') AS is_lean,
       :'variant' = 'split_functions' AS is_split,
       :'variant' IN ('shipped', 'shipped_unflushed_claims') AS is_shipped \gset
\if :is_bare
TRUNCATE ablation.bare;
INSERT INTO ablation.bare (state) SELECT 'queued' FROM generate_series(1, :jobs);
VACUUM ANALYZE ablation.bare;
\elif :is_lean
TRUNCATE ablation.lean;
INSERT INTO ablation.lean (kind, view_set_name) SELECT 'refresh', 'log_entries' FROM generate_series(1, :jobs);
VACUUM ANALYZE ablation.lean;
\elif :is_split
TRUNCATE ablation.lease, ablation.request;
INSERT INTO ablation.request (kind, view_set_name) SELECT 'refresh', 'log_entries' FROM generate_series(1, :jobs);
INSERT INTO ablation.lease (job_id, kind, created_at) SELECT job_id, kind, created_at FROM ablation.request;
VACUUM ANALYZE ablation.lease, ablation.request;
\elif :is_shipped
-- A superuser's direct writes with the table's triggers off (the refusal of
-- TRUNCATE, and the 90,000 NOTIFYs of the INSERT that would only slow the
-- reset): a TRUNCATE leaves no dead rows or index entries behind, as for
-- the other tables.
SET session_replication_role = replica;
TRUNCATE micromegas.jobs;
INSERT INTO micromegas.jobs (kind, view_set_name, created_by) SELECT 'refresh', 'log_entries', 'bench' FROM generate_series(1, :jobs);
RESET session_replication_role;
VACUUM ANALYZE micromegas.jobs;
\else
\warn 'reset.sql: unknown variant'
SELECT 1/0 AS unknown_variant;
\endif
CHECKPOINT;
