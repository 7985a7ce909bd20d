#!/usr/bin/env bash
# Prints the privilege matrix (micromegas.mm_privilege_matrix(), declared in
# sql/privileges.sql) as the Markdown table the README shows between its
# <!-- privileges --> markers (docs/operations.md). With --check FILE, fails when its
# table differs from the one a fresh install declares.
#   privileges_doc.sh DB            print the table
#   privileges_doc.sh DB --check F  compare with F's table
set -euo pipefail
db="$1"
table=$(psql -X -A -t -v ON_ERROR_STOP=1 -d "$db" -c "
  SELECT '| object | PUBLIC | micromegas_reader | micromegas_service | micromegas_admin |' UNION ALL
  SELECT '|---|---|---|---|---|' UNION ALL
  (SELECT format('| %s \`%s\` | %s | %s | %s | %s |', object_kind, object_name,
                 nullif(public, ''), nullif(reader, ''), nullif(service, ''), nullif(admin, ''))
     FROM micromegas.mm_privilege_matrix() ORDER BY object_kind, object_name)")
if [ "${2:-}" = --check ]; then
  documented=$(sed -n '/^<!-- privileges -->$/,/^<!-- \/privileges -->$/p' "$3" | sed '1d;$d')
  if ! diff <(echo "$documented") <(echo "$table"); then
    echo "$3: the privilege table differs from the matrix (regenerate it with scripts/privileges_doc.sh)"
    exit 1
  fi
  echo "$3: the privilege table matches the matrix ($(echo "$table" | wc -l) lines)"
else
  echo "$table"
fi
