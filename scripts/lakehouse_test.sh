#!/usr/bin/env bash
# The catalog meets data, on the running cluster: a sample lake (one day),
# the shipped log_stats and five views over the other sources and over a
# view, materialized by micromegas-views-daemon; then
#  - every view's rows, as `query` answers them from the partitions, equal
#    exactly DuckDB's aggregation straight from the source Parquet files
#    (scripts/lake/oracle.py; DuckDB shares no code with the daemon);
#  - log_stats' files are sorted by its merge_sort_order, which its
#    partitions record;
#  - a view's 24 hourly partitions merged into its day, then the day
#    regenerated from the source (--regenerate);
#  - a lake without sources is refused; when sources shrink (a day's blocks
#    hidden) the partitions are left as they are;
#  - a second materialization of the day writes nothing;
#  - rows appended late to a source (a new metrics block, written by
#    pyarrow) make exactly the buckets they fall in stale, and only those
#    are rewritten;
#  - a REPLACE that changes a view's schema leaves its old partitions
#    unread, list_incompatible_partitions names them and
#    retire_incompatible_partitions retires them (their files queued);
#  - two daemons share one day's materialize_partitions jobs: every bucket
#    written once; a daemon killed with SIGKILL mid-refresh leaves no
#    partition row without its file, and after its lease another daemon
#    takes the job again and completes the view;
#  - `run`'s ticks keep a view with auto_refresh fresh over its last two
#    whole buckets (a sample of the last hours), and not one without it;
#  - gc deletes the expired files the catalog hands out and an orphan
#    object past its grace period, and no recorded file;
#  - a running job's row shows its progress;
#  - a refresh job run by `run --once` over a source file whose column type
#    differs from the catalog's fails, not retryable, naming the file and
#    the column, and records nothing;
#  - on S3 (moto's server on loopback): a sample written there, every view
#    equal to DuckDB's over a local copy of the same seed, a second run
#    writes nothing, every object under views/ is a recorded partition.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
root="$(cd "$here/.." && pwd)"
status=0
fail() { echo "lakehouse: $*"; status=1; }

py="$(lake_venv)"

(cd "$root" && cargo build --quiet -p micromegas_views_daemon)
daemon="$CARGO_TARGET_DIR/debug/micromegas-views-daemon"

db=mmv_lakehouse
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -d "$db" -c "$MMV_INSTALL_SQL"
dsn="host=$PGHOST port=$PGPORT user=postgres dbname=$db"
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" "$@"; }
lake="$MMV_RUN/lake"
rm -rf "$lake"
begin=2026-12-01T00:00:00Z
end=2026-12-02T00:00:00Z
views="log_stats measures_hourly blocks_per_process processes_seen streams_by_format log_levels_daily"

"$daemon" sample --lake "file://$lake" --begin "$begin" --end "$end" --processes 4 --rate 8 --seed 7
q -f "$root/scripts/lake/views.sql" >/dev/null

materialize() {
  "$daemon" materialize --lake "file://$lake" --dsn "$dsn" --begin "$begin" --end "$end" 2>"$1"
}
partitions() {
  q -c "SELECT view_set_name, begin_insert_time, coalesce(file_path, '-'), updated
          FROM micromegas.lakehouse_partitions ORDER BY 1, 2"
}

materialize "$MMV_RUN/lake-first.log" || fail "the first materialization: $(tail -5 "$MMV_RUN/lake-first.log")"
echo "lakehouse: first materialization: $(grep -c 'decision=create' "$MMV_RUN/lake-first.log") buckets created, $(q -c "SELECT count(*) FROM micromegas.lakehouse_partitions") partitions"
"$py" "$root/scripts/lake/oracle.py" "$daemon" "file://$lake" "$lake" "$dsn" "$begin" "$end" $views || status=1

# log_stats' partition records its sort order, and its file is sorted by it.
log_stats_file=$(q -c "SELECT file_path FROM micromegas.lakehouse_partitions
                        WHERE view_set_name = 'log_stats' AND sort_order = '{time_bin,process_id,level,target}'")
[ -n "$log_stats_file" ] || fail "log_stats' partition does not record its sort order"
"$py" - "$lake/$log_stats_file" <<'PY' || fail "log_stats' file is not sorted by its merge_sort_order"
import sys, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1]).to_pydict()
keys = list(zip(t["time_bin"], t["process_id"], t["level"], t["target"]))
assert keys == sorted(keys) and len(keys) > 100, len(keys)
print(f"lakehouse: log_stats' file: {len(keys)} rows sorted by (time_bin, process_id, level, target)")
PY

# Hourly buckets merged into a day: measures_merged is measures_hourly with
# merge_partition_delta = '1 day'. Its 24 hourly partitions (counts
# matching) are merged into one; --regenerate then writes the day from the
# source, retiring the merged partition.
psql -X -q -v ON_ERROR_STOP=1 -d "$db" >/dev/null <<'SQL'
SELECT status FROM micromegas.mm_create_view(replace(replace(
  (SELECT definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'measures_hourly'),
  'VIEW measures_hourly', 'VIEW measures_merged'), 'merge_partition_delta = ''1 hour''', 'merge_partition_delta = ''1 day'''));
SQL
"$daemon" materialize --view measures_merged --lake "file://$lake" --dsn "$dsn" --begin "$begin" --end "$end" \
  2>"$MMV_RUN/lake-merged.log" || fail "materializing measures_merged: $(tail -3 "$MMV_RUN/lake-merged.log")"
merged=$(q -c "SELECT count(*) || ' ' || min(begin_insert_time) || ' ' || max(end_insert_time) || ' ' || sum(num_rows)
                 FROM micromegas.lakehouse_partitions WHERE view_set_name = 'measures_merged'")
merges=$(awk '/decision=merge/ { n++ } END { print n + 0 }' "$MMV_RUN/lake-merged.log")
[ "${merged%% *}" = 1 ] && [ "$merges" = 1 ] || fail "measures_merged after a merge: $merged ($merges merges)"
"$py" "$root/scripts/lake/oracle.py" "$daemon" "file://$lake" "$lake" "$dsn" "$begin" "$end" measures_merged:measures_hourly || status=1
old_file=$(q -c "SELECT file_path FROM micromegas.lakehouse_partitions WHERE view_set_name = 'measures_merged'")
"$daemon" materialize --regenerate --view measures_merged --lake "file://$lake" --dsn "$dsn" --begin "$begin" --end "$end" \
  2>"$MMV_RUN/lake-regenerated.log" || fail "regenerating measures_merged: $(tail -3 "$MMV_RUN/lake-regenerated.log")"
new=$(q -c "SELECT count(*) || ' ' || (file_path <> '$old_file') FROM micromegas.lakehouse_partitions
             WHERE view_set_name = 'measures_merged' GROUP BY file_path")
[ "$new" = "1 true" ] || fail "measures_merged after --regenerate: $new"
"$py" "$root/scripts/lake/oracle.py" "$daemon" "file://$lake" "$lake" "$dsn" "$begin" "$end" measures_merged:measures_hourly || status=1
echo "lakehouse: 24 hourly partitions merged into one day ($merged), then the day regenerated from the source"

# A lake that is not the one (a typo, an unmounted volume) is refused before
# anything is decided; sources that shrank leave the partitions as they are.
before=$(partitions)
if "$daemon" materialize --lake "file://$lake-typo" --dsn "$dsn" --begin "$begin" --end "$end" 2>"$MMV_RUN/lake-typo.log"; then
  fail "materialize over an empty lake succeeded"
fi
grep -q "no Parquet file under sources/blocks/" "$MMV_RUN/lake-typo.log" || fail "the empty lake: $(tail -2 "$MMV_RUN/lake-typo.log")"
[ ! -e "$lake-typo" ] || fail "opening a lake created its directory"
hidden="$MMV_RUN/lake-hidden"
rm -rf "$hidden" && mkdir -p "$hidden"
mv "$lake/sources/blocks/2026-12-01" "$hidden/"
materialize "$MMV_RUN/lake-shrunk.log" || fail "materializing over shrunk sources: $(tail -3 "$MMV_RUN/lake-shrunk.log")"
mv "$hidden/2026-12-01" "$lake/sources/blocks/"
[ "$(partitions)" = "$before" ] || fail "sources that shrank changed partitions"
fell=$(awk '/source count fell below the recorded one/ { n++ } END { print n + 0 }' "$MMV_RUN/lake-shrunk.log")
[ "$fell" -gt 0 ] || fail "no bucket was skipped for its shrunk source count"
echo "lakehouse: an empty lake refused (nothing created); with the day's blocks hidden, $fell buckets kept as they were (their source count fell)"

# A second materialization of the same day writes nothing.
before=$(partitions)
materialize "$MMV_RUN/lake-second.log" || fail "the second materialization: $(tail -5 "$MMV_RUN/lake-second.log")"
[ "$(partitions)" = "$before" ] || fail "the second materialization changed partitions"
created=$(awk '/decision=(create|merge)/ { n++ } END { print n + 0 }' "$MMV_RUN/lake-second.log")
[ "$created" = 0 ] || fail "the second materialization wrote $created buckets"
echo "lakehouse: second materialization: nothing written ($(grep -c 'decision=skip' "$MMV_RUN/lake-second.log") buckets up to date)"

# Rows appended late: a metrics block of three measures inserted at 05:30.
"$py" - "$lake" <<'PY'
import datetime, glob, os, sys, pyarrow as pa, pyarrow.parquet as pq, pyarrow.compute as pc
lake = sys.argv[1]
os.makedirs(f"{lake}/sources/measures/late", exist_ok=True)
os.makedirs(f"{lake}/sources/blocks/late", exist_ok=True)
late = pa.scalar(datetime.datetime(2026, 12, 1, 5, 30, tzinfo=datetime.timezone.utc), pa.timestamp("ns", tz="+00:00"))
m = pq.read_table(sorted(glob.glob(f"{lake}/sources/measures/**/*.parquet", recursive=True))[0]).slice(0, 3)
block = "late-block-0000"
m = m.set_column(m.schema.get_field_index("insert_time"), m.schema.field("insert_time"),
                 pa.array([late.value] * 3, pa.timestamp("ns", tz="+00:00")))
m = m.set_column(m.schema.get_field_index("block_id"), m.schema.field("block_id"),
                 pa.array([block] * 3).dictionary_encode().cast(m.schema.field("block_id").type))
b = pq.read_table(sorted(glob.glob(f"{lake}/sources/blocks/**/*.parquet", recursive=True))[0])
b = b.filter(pc.equal(b["stream_id"], m["stream_id"][0].as_py())).slice(0, 1)
assert b.num_rows == 1
b = b.set_column(b.schema.get_field_index("insert_time"), b.schema.field("insert_time"),
                 pa.array([late.value], pa.timestamp("ns", tz="+00:00")))
b = b.set_column(b.schema.get_field_index("block_id"), b.schema.field("block_id"), pa.array([block]))
b = b.set_column(b.schema.get_field_index("nb_objects"), b.schema.field("nb_objects"), pa.array([3], pa.int32()))
pq.write_table(m, f"{lake}/sources/measures/late/measures-late.parquet")
pq.write_table(b, f"{lake}/sources/blocks/late/blocks-late.parquet")
PY
before=$(partitions)
materialize "$MMV_RUN/lake-late.log" || fail "the materialization after late rows: $(tail -5 "$MMV_RUN/lake-late.log")"
after=$(partitions)
# The (view, bucket) rows whose file is new: comm lists what only "after" has.
rewritten=$(comm -13 <(echo "$before" | cut -d'|' -f1-3 | sort) <(echo "$after" | cut -d'|' -f1-3 | sort) \
            | cut -d'|' -f1-2 | tr '\n' ';')
want="blocks_per_process|2026-12-01 00:00:00+00;measures_hourly|2026-12-01 05:00:00+00;measures_merged|2026-12-01 00:00:00+00;processes_seen|2026-12-01 00:00:00+00;streams_by_format|2026-12-01 00:00:00+00;"
[ "$rewritten" = "$want" ] || fail "late rows rewrote [$rewritten], expected [$want] (the buckets whose count query counts the new block)"
[ "$rewritten" = "$want" ] && echo "lakehouse: late rows at 05:30: rewritten exactly $(echo "$rewritten" | tr ';' ' ')"
"$py" "$root/scripts/lake/oracle.py" "$daemon" "file://$lake" "$lake" "$dsn" "$begin" "$end" measures_hourly blocks_per_process || status=1

# A REPLACE that changes the schema: old partitions unread, then retired.
q -c "SELECT status FROM micromegas.mm_create_view(\$\$
CREATE OR REPLACE MATERIALIZED VIEW measures_hourly WITH (
  extract_query = 'SELECT date_bin(''1 hour'', time) AS hour, process_id, name, unit, count(*) AS n,
                          min(value) AS lo, max(value) AS hi, max(time) AS last_time
                     FROM measures WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''
                    GROUP BY 1, process_id, name, unit',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks
                      WHERE array_has(\"streams.tags\", ''metrics'')
                        AND insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT hour, process_id, name, unit, sum(n) AS n, min(lo) AS lo, max(hi) AS hi,
                                   max(last_time) AS last_time
                              FROM {source} GROUP BY hour, process_id, name, unit',
  update_group = 3100, time_column = 'hour',
  source_partition_delta = '1 hour', merge_partition_delta = '1 hour')\$\$)" >/dev/null
rows=$("$daemon" query --lake "file://$lake" --dsn "$dsn" "SELECT count(*) AS n FROM measures_hourly" | tail -1)
[ "$rows" = 0 ] || fail "after the REPLACE, measures_hourly still reads $rows rows of the old schema"
old=$(q -c "SELECT count(*) FROM micromegas.list_incompatible_partitions('measures_hourly')")
[ "$old" = 24 ] || fail "list_incompatible_partitions names $old partitions of measures_hourly, not 24"
retired=$(q -c "SELECT partitions_retired FROM micromegas.retire_incompatible_partitions('measures_hourly')")
[ "$retired" = 24 ] || fail "retire_incompatible_partitions retired $retired, not 24"
queued=$(q -c "SELECT count(*) FROM micromegas.temporary_files WHERE file_path LIKE 'views/measures_hourly/%'")
[ "$queued" -ge 24 ] || fail "the retired files are not queued for deletion ($queued)"
materialize "$MMV_RUN/lake-replaced.log" || fail "the materialization after the REPLACE: $(tail -5 "$MMV_RUN/lake-replaced.log")"
"$py" "$root/scripts/lake/oracle.py" "$daemon" "file://$lake" "$lake" "$dsn" "$begin" "$end" measures_hourly:measures_hourly_v2 || status=1
echo "lakehouse: a REPLACE changing the schema: old partitions unread, 24 named incompatible and retired, the day written again"

# Two daemons over the same day: materialize_partitions queues one job per
# hour and two `run --once` share them through the leases; every bucket is
# written exactly once (an object is never reused, so a bucket written twice
# would leave two objects).
psql -X -q -v ON_ERROR_STOP=1 -d "$db" >/dev/null <<'SQL'
SELECT status FROM micromegas.mm_create_view(replace(
  (SELECT definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'measures_hourly'),
  'VIEW measures_hourly', 'VIEW measures_twice'));
SQL
q -c "SELECT count(*) FROM micromegas.materialize_partitions('measures_twice', '$begin', '$end', 3600)" >/dev/null
"$daemon" run --once --worker daemon-a --lake "file://$lake" --dsn "$dsn" 2>"$MMV_RUN/lake-daemon-a.log" &
a=$!
"$daemon" run --once --worker daemon-b --lake "file://$lake" --dsn "$dsn" 2>"$MMV_RUN/lake-daemon-b.log" &
b=$!
wait $a || fail "daemon a: $(tail -3 "$MMV_RUN/lake-daemon-a.log")"
wait $b || fail "daemon b: $(tail -3 "$MMV_RUN/lake-daemon-b.log")"
jobs_done=$(q -c "SELECT count(*) FILTER (WHERE state = 'done' AND attempts = 1) || '/' || count(*)
                    FROM micromegas.list_jobs(view_set_name => 'measures_twice')")
objects=$(find "$lake/views/measures_twice" -name '*.parquet' | wc -l)
recorded=$(q -c "SELECT count(file_path) || '/' || count(*) FROM micromegas.lakehouse_partitions WHERE view_set_name = 'measures_twice'")
[ "$jobs_done" = 24/24 ] || fail "two daemons: jobs done once / all: $jobs_done"
[ "$objects" = 24 ] && [ "$recorded" = 24/24 ] || fail "two daemons: $objects objects written, $recorded partitions recorded (files/rows), 24 expected"
by=$(q -c "SELECT string_agg(worker || ' ' || n, ', ' ORDER BY worker) FROM (SELECT worker, count(*) AS n
           FROM micromegas.list_jobs(view_set_name => 'measures_twice') GROUP BY worker) w")
"$py" "$root/scripts/lake/oracle.py" "$daemon" "file://$lake" "$lake" "$dsn" "$begin" "$end" measures_twice:measures_hourly_v2 || status=1
echo "lakehouse: two daemons over one day: 24 buckets, each written once ($by)"

# A daemon killed with SIGKILL in the middle of a refresh: no partition row
# points at a missing file; once its lease runs out, another daemon takes
# the job again and the view ends complete.
psql -X -q -v ON_ERROR_STOP=1 -d "$db" >/dev/null <<'SQL'
ALTER DATABASE mmv_lakehouse SET micromegas_views.job_lease = '3s';
SELECT status FROM micromegas.mm_create_view(replace(
  (SELECT definition_sql FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'measures_hourly'),
  'VIEW measures_hourly', 'VIEW measures_killed'));
SQL
job=$(q -c "SELECT micromegas.mm_refresh_view('measures_killed', '$begin', '$end')")
"$daemon" run --once --worker doomed --heartbeat-seconds 1 --lake "file://$lake" --dsn "$dsn" 2>"$MMV_RUN/lake-doomed.log" &
doomed=$!
# The running job's row shows its progress (sent with each heartbeat): it
# is killed once that says three buckets are done.
progress=""
for _ in $(seq 1 300); do
  progress=$(q -c "SELECT progress FROM micromegas.jobs WHERE job_id = '$job' AND (progress->>'buckets_done')::int >= 3")
  [ -n "$progress" ] && break
  sleep 0.05
done
kill -9 $doomed
[ -n "$progress" ] || fail "the running job's row never showed three buckets done"
doomed_status=0
wait $doomed 2>/dev/null || doomed_status=$?
[ $doomed_status = 137 ] || fail "the doomed daemon ended with $doomed_status before it was killed: $(tail -3 "$MMV_RUN/lake-doomed.log")"
written=$(q -c "SELECT count(*) FROM micromegas.lakehouse_partitions WHERE view_set_name = 'measures_killed'")
[ "$written" -ge 3 ] && [ "$written" -lt 24 ] || fail "the kill came at $written of 24 buckets, not in the middle"
missing=0
for f in $(q -c "SELECT file_path FROM micromegas.lakehouse_partitions WHERE view_set_name = 'measures_killed' AND file_path IS NOT NULL"); do
  [ -s "$lake/$f" ] || { missing=$((missing + 1)); echo "lakehouse: $f is recorded but missing"; }
done
[ $missing = 0 ] || fail "$missing recorded partitions of the killed daemon have no file"
sleep 3.5
"$daemon" run --once --worker rescuer --heartbeat-seconds 1 --lake "file://$lake" --dsn "$dsn" 2>"$MMV_RUN/lake-rescuer.log" \
  || fail "the rescuing daemon: $(tail -3 "$MMV_RUN/lake-rescuer.log")"
state=$(q -c "SELECT state || ' ' || worker || ' ' || attempts FROM micromegas.mm_job('$job')")
[ "$state" = "done rescuer 2" ] || fail "the killed daemon's job: $state"
[ "$(q -c "SELECT count(*) FROM micromegas.lakehouse_partitions WHERE view_set_name = 'measures_killed'")" = 24 ] \
  || fail "the view killed midway is not complete"
"$py" "$root/scripts/lake/oracle.py" "$daemon" "file://$lake" "$lake" "$dsn" "$begin" "$end" measures_killed:measures_hourly_v2 || status=1
q -c "ALTER DATABASE mmv_lakehouse RESET micromegas_views.job_lease" >/dev/null
done_reported=$(echo "$progress" | python3 -c "import json,sys; print(json.load(sys.stdin)['buckets_done'])")
[ "$done_reported" -le "$written" ] || fail "the job's row said $done_reported buckets done, but only $written were recorded"
echo "lakehouse: a daemon killed after $written of 24 buckets (its row said: $progress): every recorded file present; the job taken again after its lease ($state), the view complete"

# A record the catalog refuses (a trigger here, for one bucket) fails the
# range naming the bucket; the partition already there stays, the next
# bucket is not written (its record would have waited on this one), every
# row still names a file, and the refused bucket's object is an orphan.
q <<'SQL' >/dev/null
CREATE FUNCTION public.refuse_one_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.view_set_name = 'measures_killed' AND NEW.begin_insert_time = '2026-12-01T05:00:00Z' THEN
    RAISE EXCEPTION 'this bucket is refused';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_one_record BEFORE INSERT ON micromegas.lakehouse_partitions
  FOR EACH ROW EXECUTE FUNCTION public.refuse_one_record();
SQL
before_refusal=$(q -c "SELECT string_agg(file_path, ',' ORDER BY begin_insert_time) FROM micromegas.lakehouse_partitions WHERE view_set_name = 'measures_killed'")
if "$daemon" materialize --regenerate --view measures_killed --lake "file://$lake" --dsn "$dsn" --begin "$begin" --end "$end" \
     2>"$MMV_RUN/lake-refused.log"; then
  fail "a refused record did not fail the range"
fi
grep -q '"measures_killed" \[2026-12-01T05:00:00+00:00, 2026-12-01T06:00:00+00:00): the partition was not recorded (its object is an orphan, for gc): .*this bucket is refused' "$MMV_RUN/lake-refused.log" \
  || fail "the refused record's error: $(grep -i error "$MMV_RUN/lake-refused.log" | tail -2)"
q -c "DROP TRIGGER refuse_one_record ON micromegas.lakehouse_partitions; DROP FUNCTION public.refuse_one_record()" >/dev/null
after_refusal=$(q -c "SELECT string_agg(file_path, ',' ORDER BY begin_insert_time) FROM micromegas.lakehouse_partitions WHERE view_set_name = 'measures_killed'")
rows=$(q -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE begin_insert_time = '2026-12-01T05:00:00Z') FROM micromegas.lakehouse_partitions WHERE view_set_name = 'measures_killed'")
[ "$rows" = "24 1" ] || fail "after the refused record: $rows partitions (24, one at 05:00, expected)"
kept=$(echo "$before_refusal" | tr ',' '\n' | sed -n 6p)
[ "$(echo "$after_refusal" | tr ',' '\n' | sed -n 6p)" = "$kept" ] || fail "the refused bucket's partition changed"
[ "$(echo "$after_refusal" | tr ',' '\n' | sed -n 7,24p)" = "$(echo "$before_refusal" | tr ',' '\n' | sed -n 7,24p)" ] \
  || fail "a bucket after the refused one was written"
[ "$(echo "$after_refusal" | tr ',' '\n' | sed -n 1,5p)" != "$(echo "$before_refusal" | tr ',' '\n' | sed -n 1,5p)" ] \
  || fail "the buckets before the refused one were not written again"
missing=0
for f in $(echo "$after_refusal" | tr ',' ' '); do [ -s "$lake/$f" ] || missing=$((missing + 1)); done
[ $missing = 0 ] || fail "$missing partitions name a missing file after the refused record"
echo "lakehouse: a refused record fails its range naming the bucket; the buckets before it rewritten, the one refused and those after it unchanged, every file present"

# gc: the expired files the catalog hands out (deleted after its
# transaction), then the objects no row names, past the grace period.
orphan="views/measures_killed/orphan-written-never-recorded.parquet"
cp "$lake/$(q -c "SELECT file_path FROM micromegas.lakehouse_partitions
                   WHERE view_set_name = 'measures_killed' AND file_path IS NOT NULL LIMIT 1")" "$lake/$orphan"
touch -d '2 hours ago' "$lake/$orphan"
q -c "UPDATE micromegas.temporary_files SET expiration = now() - interval '1 second'" >/dev/null
queued=$(q -c "SELECT file_path FROM micromegas.temporary_files ORDER BY 1")
[ -n "$queued" ] || fail "no file was queued for deletion by the retirements above"
present=0
for f in $queued; do [ -e "$lake/$f" ] && present=$((present + 1)); done
[ "$present" = "$(echo "$queued" | wc -l)" ] || fail "only $present of the queued files exist before gc"
"$daemon" gc --dry-run --lake "file://$lake" --dsn "$dsn" >"$MMV_RUN/lake-gc-dry.out"
grep -qx "orphan $orphan" "$MMV_RUN/lake-gc-dry.out" || fail "gc --dry-run does not list the orphan: $(tail -3 "$MMV_RUN/lake-gc-dry.out")"
[ -f "$lake/$orphan" ] && [ "$(q -c "SELECT count(*) FROM micromegas.temporary_files")" = "$(echo "$queued" | wc -l)" ] \
  || fail "gc --dry-run deleted or handed out something"
"$daemon" gc --grace-seconds 10800 --lake "file://$lake" --dsn "$dsn" >"$MMV_RUN/lake-gc-young.out"
[ -f "$lake/$orphan" ] || fail "gc deleted an object younger than its grace period"
"$daemon" gc --lake "file://$lake" --dsn "$dsn" >"$MMV_RUN/lake-gc.out"
[ ! -e "$lake/$orphan" ] || fail "gc kept the orphan"
still=0
for f in $queued; do [ -e "$lake/$f" ] && still=$((still + 1)); done
[ $still = 0 ] || fail "gc left $still expired files on disk"
gone=0
for f in $(q -c "SELECT file_path FROM micromegas.lakehouse_partitions WHERE file_path IS NOT NULL"); do
  [ -s "$lake/$f" ] || gone=$((gone + 1))
done
[ $gone = 0 ] || fail "gc deleted $gone files that partitions still record"
echo "lakehouse: gc: $(echo "$queued" | wc -l) expired files deleted after the catalog handed them out, the orphan deleted past its grace period (kept within it, listed by --dry-run), every recorded file kept (gc with a 3 h grace: $(tail -1 "$MMV_RUN/lake-gc-young.out"); then with 1 h: $(tail -1 "$MMV_RUN/lake-gc.out"))"

# The daemon's ticks: `run` keeps the views with auto_refresh fresh over
# their last two whole buckets; a view without it is left to its jobs.
tickdb=mmv_lakehouse_tick
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $tickdb" -c "CREATE DATABASE $tickdb"
psql -X -q -d "$tickdb" -c "$MMV_INSTALL_SQL"
tickdsn="host=$PGHOST port=$PGPORT user=postgres dbname=$tickdb"
ticklake="$MMV_RUN/lake-recent"
rm -rf "$ticklake"
now=$(date -u +%s)
hour_end=$(( now / 3600 * 3600 ))
"$daemon" sample --lake "file://$ticklake" --begin "$(date -u -d "@$(( hour_end - 3 * 3600 ))" +%Y-%m-%dT%H:%M:%SZ)" \
  --end "$(date -u -d "@$now" +%Y-%m-%dT%H:%M:%SZ)" --processes 2 --rate 4 --seed 3 >/dev/null
for v in recent_auto:true recent_manual:false; do
  psql -X -q -v ON_ERROR_STOP=1 -d "$tickdb" >/dev/null -c "SELECT status FROM micromegas.mm_create_view(\$\$
CREATE MATERIALIZED VIEW ${v%%:*} WITH (
  extract_query = 'SELECT date_bin(''1 minute'', time) AS minute, process_id, level, count(*) AS n FROM log_entries
                    WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}'' GROUP BY 1, 2, 3',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE array_has(\"streams.tags\", ''log'')
                      AND insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT minute, process_id, level, sum(n) AS n FROM {source} GROUP BY 1, 2, 3',
  update_group = 3000, time_column = 'minute', source_partition_delta = '1 hour',
  merge_partition_delta = '1 hour', auto_refresh = ${v##*:})\$\$)"
done
"$daemon" run --tick-seconds 1 --worker ticker --lake "file://$ticklake" --dsn "$tickdsn" 2>"$MMV_RUN/lake-tick.log" &
ticker=$!
want="$(date -u -d "@$(( hour_end - 7200 ))" '+%Y-%m-%d %H:%M:%S')+00;$(date -u -d "@$(( hour_end - 3600 ))" '+%Y-%m-%d %H:%M:%S')+00;"
got=""
for _ in $(seq 1 150); do
  got=$(psql -X -A -t -d "$tickdb" -c "SELECT begin_insert_time FROM micromegas.lakehouse_partitions
                                       WHERE view_set_name = 'recent_auto' ORDER BY 1" | head -2 | tr '\n' ';')
  [ "$got" = "$want" ] && break
  sleep 0.2
done
kill -INT $ticker
tick_status=0
wait $ticker || tick_status=$?
[ "$got" = "$want" ] || fail "the ticks wrote recent_auto's buckets [$got], expected [$want]: $(tail -3 "$MMV_RUN/lake-tick.log")"
[ $tick_status = 0 ] || fail "run stopped by Ctrl-C exited with $tick_status"
manual=$(psql -X -A -t -d "$tickdb" -c "SELECT count(*) FROM micromegas.lakehouse_partitions WHERE view_set_name = 'recent_manual'")
[ "$manual" = 0 ] || fail "the ticks wrote $manual partitions of a view without auto_refresh"
echo "lakehouse: run's ticks kept the auto_refresh view fresh over its last two hours ($got), left the other to its jobs, and stopped on Ctrl-C"

# A source file whose column type differs from the catalog's: the refresh
# job fails, not retryable, naming the file and the column.
"$py" - "$lake" <<'PY'
import glob, os, sys, pyarrow as pa, pyarrow.parquet as pq
lake = sys.argv[1]
os.makedirs(f"{lake}/sources/measures/bad", exist_ok=True)
m = pq.read_table(sorted(glob.glob(f"{lake}/sources/measures/2026-*/*.parquet"))[0]).slice(0, 1)
i = m.schema.get_field_index("value")
m = m.set_column(i, pa.field("value", pa.int64(), nullable=False), pa.array([1], pa.int64()))
pq.write_table(m, f"{lake}/sources/measures/bad/typed-wrong.parquet")
PY
before=$(partitions)
job=$(q -c "SELECT micromegas.mm_refresh_view('measures_hourly', '$begin', '$end')")
"$daemon" run --once --lake "file://$lake" --dsn "$dsn" 2>"$MMV_RUN/lake-job.log" || fail "run --once: $(tail -3 "$MMV_RUN/lake-job.log")"
state=$(q -c "SELECT state || '|' || attempts || '|' || coalesce(failure_message, '') FROM micromegas.mm_job('$job')")
case "$state" in
  failed\|1\|*typed-wrong.parquet*value*) echo "lakehouse: a source file of the wrong type: the job failed once, not retried: ${state#failed|1|}" ;;
  *) fail "the refresh over a wrongly typed source file: $state" ;;
esac
[ "$(partitions)" = "$before" ] || fail "the failed job recorded partitions"

# The same on S3: an S3-compatible server (moto) on loopback, a bucket, the
# sample written there with the same seed as a local copy DuckDB reads.
s3_port=$((MMV_PORT + 300))
"$(dirname "$py")/moto_server" -H 127.0.0.1 -p "$s3_port" >"$MMV_RUN/moto.log" 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null' EXIT
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$s3_port" AWS_ALLOW_HTTP=true
for _ in $(seq 1 50); do
  "$py" -c "import boto3; boto3.client('s3').list_buckets()" 2>/dev/null && break
  sleep 0.2
done
"$py" -c "import boto3; boto3.client('s3').create_bucket(Bucket='mmv-lake')"
s3db=mmv_lakehouse_s3
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $s3db" -c "CREATE DATABASE $s3db"
psql -X -q -d "$s3db" -c "$MMV_INSTALL_SQL"
s3dsn="host=$PGHOST port=$PGPORT user=postgres dbname=$s3db"
psql -X -q -v ON_ERROR_STOP=1 -d "$s3db" -f "$root/scripts/lake/views.sql" >/dev/null
s3lake="s3://mmv-lake/tenant-a"
local_copy="$MMV_RUN/lake-s3-copy"
rm -rf "$local_copy"
"$daemon" sample --lake "$s3lake" --begin "$begin" --end "$end" --processes 4 --rate 8 --seed 11 >/dev/null
"$daemon" sample --lake "file://$local_copy" --begin "$begin" --end "$end" --processes 4 --rate 8 --seed 11 >/dev/null
"$daemon" materialize --lake "$s3lake" --dsn "$s3dsn" --begin "$begin" --end "$end" 2>"$MMV_RUN/lake-s3.log" \
  || fail "the materialization on S3: $(tail -5 "$MMV_RUN/lake-s3.log")"
"$py" "$root/scripts/lake/oracle.py" "$daemon" "$s3lake" "$local_copy" "$s3dsn" "$begin" "$end" $views || status=1
"$daemon" materialize --lake "$s3lake" --dsn "$s3dsn" --begin "$begin" --end "$end" 2>"$MMV_RUN/lake-s3-second.log" \
  || fail "the second materialization on S3: $(tail -5 "$MMV_RUN/lake-s3-second.log")"
s3_written=$(awk '/decision=(create|merge)/ { n++ } END { print n + 0 }' "$MMV_RUN/lake-s3-second.log")
[ "$s3_written" = 0 ] || fail "the second materialization on S3 wrote $s3_written buckets"
objects=$("$py" -c "
import boto3
keys = [o['Key'] for o in boto3.client('s3').list_objects_v2(Bucket='mmv-lake', Prefix='tenant-a/views/').get('Contents', [])]
print(len(keys))")
recorded=$(psql -X -A -t -d "$s3db" -c "SELECT count(file_path) FROM micromegas.lakehouse_partitions")
[ "$objects" = "$recorded" ] || fail "S3 holds $objects partition objects, the catalog records $recorded"
echo "lakehouse: on S3 (moto on loopback): every view equal to DuckDB's, a second run writes nothing, $objects objects recorded"

[ $status = 0 ] && echo "lakehouse: passed"
exit $status
