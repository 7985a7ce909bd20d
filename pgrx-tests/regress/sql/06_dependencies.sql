-- DROP of a view another definition reads is refused (2BP01), on every path.
SELECT * FROM mmv_try($$SELECT micromegas.mm_drop_view('log_stats')$$);
SELECT * FROM mmv_try($$DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'$$);
SELECT view_set_name, status FROM micromegas.mm_drop_view('daily');
SELECT view_set_name, status FROM micromegas.mm_drop_view('log_stats');
SELECT count(*) AS definitions FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats';
-- log_stats can be recreated from what the extension shipped.
SELECT view_set_name, status FROM micromegas.mm_create_view(micromegas._mm_shipped_log_stats());
