"""One walk through the server with the Lance Namespace spec's generated
Python client (lance-namespace-urllib3-client, pinned by
scripts/lance_python_test.sh): create -> describe -> list -> refresh ->
drop, and the error a client gets for a table that is gone.

usage: python_walk.py BASE_URL ADMIN_KEY OUTPUT_SCHEMA_IPC"""
import json
import sys

from lance_namespace_urllib3_client import ApiClient, Configuration
from lance_namespace_urllib3_client.api.materialized_view_api import MaterializedViewApi
from lance_namespace_urllib3_client.api.table_api import TableApi
from lance_namespace_urllib3_client.exceptions import ApiException
from lance_namespace_urllib3_client.models import (
    CreateMaterializedViewRequest,
    DescribeTableRequest,
    RefreshMaterializedViewRequest,
)

base, admin_key, schema_ipc = sys.argv[1:4]
client = ApiClient(Configuration(host=base, access_token=admin_key))
views = MaterializedViewApi(client)
tables = TableApi(client)

ddl = """CREATE MATERIALIZED VIEW py_walk WITH (
  extract_query = 'SELECT time, process_id, level FROM log_entries WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT time, process_id, level FROM {source}',
  update_group = 4000, time_column = 'time')"""

created = views.create_materialized_view(
    "micromegas$py_walk",
    CreateMaterializedViewRequest(kind="query", source_query=ddl, output_schema=schema_ipc),
)
assert created.version > 0, created

described = tables.describe_table("micromegas$py_walk", DescribeTableRequest(), load_detailed_metadata=True)
assert described.table == "py_walk", described
assert described.version == created.version, described
assert [f.name for f in described.var_schema.fields] == ["time", "process_id", "level"], described
assert described.properties["micromegas.load_status"] == "ok", described

listed = tables.list_tables("micromegas", limit=1000)
assert "py_walk" in listed.tables, listed

refreshed = views.refresh_materialized_view("py_walk", refresh_materialized_view_request=RefreshMaterializedViewRequest())
assert len(refreshed.job_id) == 36, refreshed

tables.drop_table("py_walk")
try:
    tables.describe_table("py_walk", DescribeTableRequest())
    raise SystemExit("python client walk: py_walk still exists after DropTable")
except ApiException as e:
    body = json.loads(e.body)
    assert e.status == 404 and body["code"] == 4, (e.status, body)

print("python client walk: create, describe, list, refresh and drop done")
