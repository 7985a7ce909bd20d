-- A service registers its code's current schema for a built-in view set.
SELECT view_set_name, encode(schema_hash, 'hex') = encode((SELECT b.schema_hash FROM micromegas.builtin_view_sets b WHERE b.view_set_name = 'blocks'), 'hex') AS same_hash
  FROM micromegas.mm_register_builtin_view_set('blocks',
        (SELECT schema_json::text FROM micromegas.builtin_view_sets WHERE view_set_name = 'blocks'), 1000, 'raw');
-- JSON and base64 Arrow IPC are both accepted; the stored forms agree.
SELECT view_set_name, length(schema_hash) FROM micromegas.mm_register_builtin_view_set('static_hosts',
  '{"fields": [{"name": "host", "type": "Utf8"}, {"name": "process_id", "type": "Utf8", "nullable": false}]}', 500);
SELECT v.view_set_name, v.schema_hash = b.schema_hash AS same_hash
  FROM micromegas.builtin_view_sets b,
       micromegas.mm_register_builtin_view_set('static_hosts_copy', b.schema_ipc, 500) v
 WHERE b.view_set_name = 'static_hosts';
SELECT micromegas._mm_format_schema(schema_ipc) FROM micromegas.builtin_view_sets WHERE view_set_name = 'static_hosts';
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_register_builtin_view_set('bad', '[{"name": "x", "type": "Nope"}]', 1)$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_register_builtin_view_set('bad', 'bm90IGFycm93', 1)$$);
SELECT * FROM mmv_try($$SELECT * FROM micromegas.mm_register_builtin_view_set('log_stats', '[]', 1)$$);
DELETE FROM micromegas.builtin_view_sets WHERE view_set_name IN ('static_hosts', 'static_hosts_copy');
