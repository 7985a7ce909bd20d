-- Audience grants: the table's rules on every path, granting and
-- revoking, and list_audience_grants' visibility rule.

-- 1. The seeded rows.
SELECT audience, axis, selector, created_by FROM micromegas.audience_grants ORDER BY 1, 2, 3;

-- 2. Granting and revoking; the rules with their messages.
SELECT micromegas.mm_grant_audience('team-alpha', 'read', 'user:ann@example.com');
SELECT micromegas.mm_grant_audience('team-alpha', 'read', 'user:ann@example.com');
SELECT micromegas.mm_grant_audience('team-alpha', 'read', 'group:sre');
SELECT micromegas.mm_grant_audience('team-alpha', 'mint', 'user:bob@example.com');
SELECT micromegas.mm_grant_audience('team_beta', 'read', 'group:data');
SELECT micromegas.mm_grant_audience('public', 'read', 'user:carl@example.com');
SELECT * FROM mmv_try($$SELECT micromegas.mm_grant_audience('team alpha', 'read', '*')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_grant_audience('', 'read', '*')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_grant_audience(repeat('a', 256), 'read', '*')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_grant_audience('team-alpha', 'write', '*')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_grant_audience('team-alpha', 'read', 'role:x')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_grant_audience('team-alpha', 'read', 'user:')$$);
SELECT * FROM mmv_try($$SELECT micromegas.mm_grant_audience('team-alpha', NULL, '*')$$);
-- The same rules on a direct write.
SELECT * FROM mmv_try($$INSERT INTO micromegas.audience_grants (audience, axis, selector) VALUES ('a b', 'read', '*')$$);
SELECT * FROM mmv_try($$UPDATE micromegas.audience_grants SET selector = 'everyone' WHERE audience = 'team_beta'$$);
SELECT * FROM mmv_try($$TRUNCATE micromegas.audience_grants$$);
SELECT micromegas.mm_revoke_audience('team_beta', 'read', 'group:data');
SELECT micromegas.mm_revoke_audience('team_beta', 'read', 'group:data');
SELECT audience, axis, selector FROM micromegas.audience_grants ORDER BY 1, 2, 3;

-- 3. Visibility. Who may read grants is decided by privileges: services and
-- admins read the table and the snapshot, a plain reader neither.
CREATE ROLE mmv_grants_reader IN ROLE micromegas_reader;
CREATE ROLE mmv_grants_admin IN ROLE micromegas_admin;
CREATE ROLE mmv_grants_service IN ROLE micromegas_service;
SET ROLE mmv_grants_reader;
SELECT * FROM mmv_try($$SELECT * FROM micromegas.audience_grants$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_audience_grants_snapshot()$$);
-- A reader's claims are ignored: the listing is empty, whatever it claims.
SELECT count(*) AS reader_sees FROM micromegas.list_audience_grants();
SET micromegas_views.caller_is_admin = 'on';
SELECT count(*) AS reader_claiming_admin_sees FROM micromegas.list_audience_grants();
RESET micromegas_views.caller_is_admin;
SET micromegas_views.caller_email = 'ann@example.com';
SELECT count(*) AS reader_claiming_ann_sees FROM micromegas.list_audience_grants();
RESET micromegas_views.caller_email;
SELECT * FROM mmv_try($$SELECT micromegas.mm_grant_audience('team-alpha', 'read', 'user:me')$$);
RESET ROLE;
-- An admin in psql (no claims) sees every row, decided by the role running
-- the statement (SET ROLE counts; the login role does not).
SET ROLE mmv_grants_admin;
SELECT count(*) AS admin_sees FROM micromegas.list_audience_grants();
SELECT count(*) AS admin_snapshot_rows FROM micromegas.mm_audience_grants_snapshot();
RESET ROLE;
-- The service that enforces reads sees every grant in the table and the
-- snapshot; its listing shows what the end user it claims may see.
SET ROLE mmv_grants_service;
SELECT count(*) AS service_table_rows FROM micromegas.audience_grants;
SELECT count(*) AS service_snapshot_rows FROM micromegas.mm_audience_grants_snapshot();
-- No end user claimed: nothing.
SELECT count(*) AS service_unclaimed_sees FROM micromegas.list_audience_grants();
-- ann holds (team-alpha, read) through her user selector: she sees every
-- row of that pair, not the mint pair, and not the seeded public rows.
SET micromegas_views.caller_email = 'ann@example.com';
SELECT audience, axis, selector FROM micromegas.list_audience_grants();
-- carl also holds (public, read) another way: the '*' row of that pair shows.
SET micromegas_views.caller_email = 'carl@example.com';
SELECT audience, axis, selector FROM micromegas.list_audience_grants();
-- Groups: a member of sre, through caller_groups (comma-separated).
SET micromegas_views.caller_email = '';
SET micromegas_views.caller_groups = 'dev, sre';
SELECT audience, axis, selector FROM micromegas.list_audience_grants();
-- A claimed '*' selector or group '*' never makes the seeded rows a held pair.
SET micromegas_views.caller_groups = '*';
SELECT count(*) AS star_group_sees FROM micromegas.list_audience_grants();
-- An end user the service says is an admin sees every row.
SET micromegas_views.caller_is_admin = 'true';
SELECT count(*) AS claimed_admin_sees FROM micromegas.list_audience_grants();
RESET micromegas_views.caller_is_admin;
RESET ROLE;
-- A service whose role is also an admin member shows an end user only what
-- that end user holds (0.1.4 showed every grant to every end user).
GRANT micromegas_admin TO mmv_grants_service;
SET ROLE mmv_grants_service;
SET micromegas_views.caller_email = 'ann@example.com';
SET micromegas_views.caller_groups = '';
SELECT count(*) AS admin_service_for_ann_sees FROM micromegas.list_audience_grants();
RESET micromegas_views.caller_email;
RESET micromegas_views.caller_groups;
RESET ROLE;
REVOKE micromegas_admin FROM mmv_grants_service;

-- An invalid value is quoted up to 80 characters, however long (0.1.10).
SELECT sqlstate, length(message) < 200 AS short, left(message, 40) AS message
  FROM mmv_try(format($$SELECT micromegas.mm_grant_audience('team-x', 'read', %L)$$, 'user ' || repeat('x', 100000)));

SELECT micromegas.mm_revoke_audience(audience, axis, selector) FROM micromegas.audience_grants
 WHERE created_by <> 'micromegas_views' ORDER BY 1;
DROP ROLE mmv_grants_reader, mmv_grants_admin, mmv_grants_service;
