-- The privilege matrix (sql/privileges.sql) is the only source of grants.
-- Every function, table and view of the schema is named by it or is
-- internal (_mm_*), and each role's effective privileges on every object are
-- exactly what the matrix says, inherited rights included: a new object
-- cannot ship without a decision, and no grant can hide outside the matrix.
CREATE ROLE mmv_priv_nobody;

-- Objects the matrix does not name (none), and rows naming no object (none).
WITH objects AS (
  SELECT 'function' AS kind, p.proname::text AS name FROM pg_proc p
   WHERE p.pronamespace = 'micromegas'::regnamespace AND p.proname !~ '^_mm_'
  UNION
  SELECT 'table', c.relname::text FROM pg_class c
   WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind IN ('r', 'v', 'p'))
SELECT 'not in the matrix' AS problem, o.kind, o.name FROM objects o
 WHERE NOT EXISTS (SELECT 1 FROM micromegas.mm_privilege_matrix() m WHERE m.object_kind = o.kind AND m.object_name = o.name)
UNION ALL
SELECT 'no such object', m.object_kind, m.object_name FROM micromegas.mm_privilege_matrix() m
 WHERE NOT EXISTS (SELECT 1 FROM objects o WHERE m.object_kind = o.kind AND m.object_name = o.name)
   AND NOT EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = 'micromegas'::regnamespace
                    AND m.object_kind = 'function' AND p.proname = m.object_name);

-- Effective privileges against the matrix, for a role with no membership
-- (PUBLIC), the reader, the service and the admin; internal functions:
-- nothing for anyone.
WITH roles(role, columns) AS (VALUES
  ('mmv_priv_nobody', ARRAY['public']),
  ('micromegas_reader', ARRAY['public', 'reader']),
  ('micromegas_service', ARRAY['public', 'reader', 'service']),
  ('micromegas_admin', ARRAY['public', 'reader', 'admin'])),
expected AS (
  SELECT m.object_kind, m.object_name, r.role, trim(p) AS privilege
    FROM micromegas.mm_privilege_matrix() m, roles r,
         LATERAL unnest(ARRAY[m.public, m.reader, m.service, m.admin]) WITH ORDINALITY AS v(privs, i),
         LATERAL unnest(string_to_array(v.privs, ',')) AS p
   WHERE (ARRAY['public', 'reader', 'service', 'admin'])[v.i] = ANY (r.columns) AND trim(p) <> ''),
actual AS (
  SELECT 'function' AS object_kind, p.proname::text AS object_name, r.role, 'EXECUTE' AS privilege
    FROM pg_proc p, roles r
   WHERE p.pronamespace = 'micromegas'::regnamespace AND has_function_privilege(r.role, p.oid, 'EXECUTE')
  UNION
  SELECT 'table', c.relname::text, r.role, x.privilege
    FROM pg_class c, roles r, unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) x(privilege)
   WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind IN ('r', 'v', 'p')
     AND has_table_privilege(r.role, c.oid, x.privilege))
SELECT 'granted, not in the matrix' AS problem, * FROM (SELECT * FROM actual EXCEPT SELECT * FROM expected) extra
UNION ALL
SELECT 'in the matrix, not granted', * FROM (SELECT * FROM expected EXCEPT SELECT * FROM actual) missing
ORDER BY 1, 2, 3, 4, 5;

-- Every overload of a function has the same privileges (the matrix names
-- functions, not signatures).
SELECT p.proname, count(DISTINCT coalesce(p.proacl::text, '')) AS acl_variants
  FROM pg_proc p WHERE p.pronamespace = 'micromegas'::regnamespace
 GROUP BY p.proname HAVING count(DISTINCT coalesce(p.proacl::text, '')) > 1;

-- The admin is not a service, and neither is a member of the other.
SELECT pg_has_role('micromegas_admin', 'micromegas_service', 'MEMBER') AS admin_is_service,
       pg_has_role('micromegas_service', 'micromegas_admin', 'MEMBER') AS service_is_admin,
       pg_has_role('micromegas_admin', 'micromegas_reader', 'MEMBER') AS admin_reads,
       pg_has_role('micromegas_service', 'micromegas_reader', 'MEMBER') AS service_reads;

-- How many objects each role may use, for the record.
SELECT count(*) FILTER (WHERE public <> '') AS public, count(*) FILTER (WHERE reader <> '') AS reader,
       count(*) FILTER (WHERE service <> '') AS service, count(*) FILTER (WHERE admin <> '') AS admin,
       count(*) AS objects
  FROM micromegas.mm_privilege_matrix();

DROP ROLE mmv_priv_nobody;

-- An object the matrix does not name stops the install and every upgrade
-- (both apply the matrix with _mm_apply_privileges): it needs a decision.
BEGIN;
CREATE FUNCTION micromegas.mm_undeclared() RETURNS int LANGUAGE sql AS 'SELECT 1';
CREATE TABLE micromegas.undeclared_table (a int);
SELECT sqlstate, message FROM mmv_try('SELECT micromegas._mm_apply_privileges()');
ROLLBACK;
