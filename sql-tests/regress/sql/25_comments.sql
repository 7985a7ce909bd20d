-- Every object of the extension is documented where psql users look:
-- \df+ (functions), \d+ (tables, views, their columns), \dT+ (composite
-- types, the domain), \du+ (roles), and SHOW/pg_settings for the settings.
-- A new object without a COMMENT fails here.
LOAD 'micromegas_views';
SELECT kind, name FROM (
  SELECT 'function' AS kind, p.oid::regprocedure::text AS name FROM pg_proc p
   WHERE p.pronamespace = 'micromegas'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL
  UNION ALL
  SELECT 'relation', c.oid::regclass::text FROM pg_class c
   WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind IN ('r', 'v', 'c')
     AND CASE c.relkind WHEN 'c' THEN obj_description(c.reltype, 'pg_type') ELSE obj_description(c.oid, 'pg_class') END IS NULL
  UNION ALL
  SELECT 'column', c.oid::regclass::text || '.' || a.attname FROM pg_class c
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
   WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind IN ('r', 'v', 'c') AND col_description(c.oid, a.attnum) IS NULL
  UNION ALL
  SELECT 'type', t.oid::regtype::text FROM pg_type t
   WHERE t.typnamespace = 'micromegas'::regnamespace AND t.typtype IN ('d', 'e') AND obj_description(t.oid, 'pg_type') IS NULL
  UNION ALL
  SELECT 'role', r.rolname::text FROM pg_roles r
   WHERE r.rolname IN ('micromegas_reader', 'micromegas_service', 'micromegas_admin') AND shobj_description(r.oid, 'pg_authid') IS NULL
  UNION ALL
  SELECT 'setting', s.name FROM pg_settings s
   WHERE s.name LIKE 'micromegas\_views.%' AND coalesce(s.short_desc, '') = ''
) x ORDER BY 1, 2;
