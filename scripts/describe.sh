# Sourced by the upgrade tests: q runs psql quietly, unaligned, stopping at
# the first error; describe prints every object of the extension in a
# database (to compare an upgraded one with a fresh install).
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$@"; }

# Every object of the extension, described: functions with their bodies and
# settings, columns, constraints, indexes, triggers, privileges (in any
# order: an upgrade that grants again may list them differently; no ACL is
# the default one, as pg_dump and pg_upgrade leave it), comments.
describe() {
  q "$1" -c "
    SELECT 'function ' || p.oid::regprocedure || ' ' || md5(p.prosrc) || ' ' || coalesce(p.proconfig::text, '')
           || ' ' || p.prosecdef || ' ' || p.provolatile::text || ' ' || (SELECT array_agg(a::text ORDER BY a::text) FROM unnest(coalesce(p.proacl, acldefault('f', p.proowner))) a)::text
           || ' ' || coalesce(obj_description(p.oid, 'pg_proc'), '')
      FROM pg_proc p WHERE p.pronamespace = 'micromegas'::regnamespace
    UNION ALL
    SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
           || ' ' || a.attnotnull || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
      FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
     WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind IN ('r', 'v', 'c')
    UNION ALL
    SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid) FROM pg_class c
     WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind = 'v'
    UNION ALL
    SELECT 'constraint ' || conrelid::regclass || ' ' || pg_get_constraintdef(oid)
      FROM pg_constraint WHERE connamespace = 'micromegas'::regnamespace
    UNION ALL
    SELECT 'index ' || pg_get_indexdef(i.indexrelid) || ' ' || coalesce(c.reloptions::text, '')
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'micromegas'::regnamespace
    UNION ALL
    SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t
      JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = 'micromegas'::regnamespace AND NOT t.tgisinternal
    UNION ALL
    SELECT 'acl ' || c.relname || ' ' || (SELECT array_agg(a::text ORDER BY a::text) FROM unnest(coalesce(c.relacl, acldefault('r', c.relowner))) a)::text FROM pg_class c
     WHERE c.relnamespace = 'micromegas'::regnamespace AND c.relkind IN ('r', 'v')
    UNION ALL
    SELECT 'config ' || u.config::regclass || ' ' || coalesce(u.condition, '')
      FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(config, condition)
     WHERE e.extname = 'micromegas_views'
    UNION ALL
    SELECT 'extension schema ' || extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'micromegas_views'
    UNION ALL
    SELECT 'dependency ' || pg_describe_object(classid, objid, 0) || ' -> ' || pg_describe_object(refclassid, refobjid, 0) || ' ' || deptype::text
      FROM pg_depend
     WHERE (classid = 'pg_extension'::regclass AND objid = (SELECT oid FROM pg_extension WHERE extname = 'micromegas_views')
            AND refclassid = 'pg_namespace'::regclass)
        OR (classid = 'pg_namespace'::regclass AND refclassid = 'pg_extension'::regclass
            AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'micromegas_views'))
    ORDER BY 1"
}
