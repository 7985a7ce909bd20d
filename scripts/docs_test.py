#!/usr/bin/env python3
"""Runs the examples of README.md and docs/*.md as a reader would paste them.

Every fenced ```sql block is run with psql, in the page's order, on a fresh
database per page, as the role the line before the block names:

    <!-- test: as alice -->

(`postgres` when it names none). A page whose examples assume a state the
page describes in prose says how to reach it, in a comment the reader does
not see, run as postgres before the page's first block:

    <!-- test setup: SQL... -->

Output shown in an example is compared with what psql prints: the lines
starting with "--  " (two spaces) right after a statement are its result,
one row per line with cells separated by "|" (the first line may be the
header), or "ERROR: message" for the error it answers. A "…" in a shown cell
or message stands for any text. A statement shown without output must not
fail.

A fenced ```sh block is either run (`<!-- test: run -->`, with bash in the
repository's root), or a synopsis (`<!-- test: synopsis -->`): each line
that calls one of the project's commands must name a subcommand and flags
that command's --help lists. Any other block says why it is not run
(`<!-- test: skip, because … -->`); a sql block is never skipped.

  docs_test.py [FILE...]      (PGHOST/PGPORT name the cluster; default: README.md docs/*.md)
  docs_test.py --self-test    a page of known disagreements: each must be caught

Prints one line per block and fails when any example disagrees.
"""

import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Login roles the examples name: dropped before each page, which makes the
# ones it uses (in its text, or in its setup).
ROLES = ["alice", "flightsql", "maintenance_daemon", "bob"]
# The project's commands, and how to ask each for its help.
COMMANDS = {
    "micromegas-views": ["cargo", "run", "-q", "-p", "micromegas_views_cli", "--"],
    "micromegas-views-daemon": ["cargo", "run", "-q", "-p", "micromegas_views_daemon", "--"],
    "micromegas-views-flight": ["cargo", "run", "-q", "-p", "micromegas_views_flight", "--"],
}


def psql(db, role, script, check=False):
    cmd = ["psql", "-X", "-q", "-A", "-F", "|", "-P", "footer=off", "-v", "ON_ERROR_STOP=0",
           "-U", role, "-d", db, "-f", "-"]
    r = subprocess.run(cmd, input=script, capture_output=True, text=True)
    if check and (r.returncode != 0 or "ERROR" in r.stderr):
        sys.exit(f"docs_test: {role}@{db}: {r.stderr.strip()}")
    return r


def blocks(path):
    """(kind, marker, setup list, first line, text) for every fenced block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, setups, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("<!-- test setup:"):
            text = line
            while "-->" not in text and i + 1 < len(lines):
                i += 1
                text += "\n" + lines[i]
            setups.append(text[len("<!-- test setup:"):text.rindex("-->")].strip())
        elif line.startswith("```") and len(line) > 3:
            kind = line[3:].strip()
            marker = None
            j = i - 1
            while j >= 0 and lines[j].strip() == "":
                j -= 1
            if j >= 0:
                m = re.match(r"^<!--\s*test:\s*(.*?)\s*-->$", lines[j].strip())
                if m:
                    marker = m.group(1)
            start = i + 1
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append((kind, marker, list(setups), start, body))
            setups = []
        i += 1
    return out


def statements(body):
    """Splits a psql script into statements: (first line, lines, shown
    output), and the lines of shown output that follow no statement."""
    result, current, stray = [], [], []
    quote = None  # None, "'", '"', "/*" or a dollar tag
    first = None
    attach = False  # the line before was a statement's end or its output
    for n, line in enumerate(body):
        if not current and quote is None and line.startswith("--  "):
            if attach:
                result[-1][2].append(line[4:])
            else:
                stray.append(n)
            continue
        attach = False
        if not current and quote is None and (line.strip() == "" or line.lstrip().startswith("--")):
            continue
        if first is None:
            first = n
        current.append(line)
        ended = False
        k = 0
        while k < len(line):
            c = line[k]
            if quote is None:
                if line.startswith("--", k):
                    break
                if line.startswith("/*", k):
                    quote = "/*"
                    k += 1
                elif c in "'\"":
                    quote = c
                elif c == "$":
                    m = re.match(r"\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$", line[k:])
                    if m:
                        quote = m.group(0)
                        k += len(quote) - 1
                elif c == ";":
                    ended = True
                elif c == "\\":
                    ended = True  # a meta-command (\gset, \g, \echo) ends the statement
                    break
            elif quote == "/*":
                if line.startswith("*/", k):
                    quote = None
                    k += 1
            elif quote in ("'", '"'):
                if c == quote:
                    quote = None
            elif line.startswith(quote, k):
                k += len(quote) - 1
                quote = None
            k += 1
        if ended and quote is None:
            result.append((first, current, []))
            current, first, attach = [], None, True
    if current:
        result.append((first, current, []))
    return result, stray


def cells(row):
    return [c.strip() for c in row.split("|")]


def matches(shown, actual):
    pattern = "^" + ".*".join(re.escape(p) for p in shown.split("…")) + "$"
    return re.match(pattern, actual, re.S) is not None


LEVELS = ("ERROR:", "WARNING:", "DETAIL:", "HINT:")


def events_of(stderr, statement_of):
    """What psql reported on stderr, per statement: [level, message,
    {DETAIL/HINT: text}] with level ERROR, WARNING or error (psql's own)."""
    events, last = {}, None
    for line in stderr.split("\n"):
        m = re.match(r"^psql:<stdin>:(\d+): (ERROR|WARNING|error):\s+(.*)$", line)
        if m:
            last = [m.group(2), m.group(3), {}]
            events.setdefault(statement_of(int(m.group(1))), []).append(last)
            continue
        m = re.match(r"^(DETAIL|HINT):\s+(.*)$", line)
        if m and last is not None:
            last[2][m.group(1)] = m.group(2)
    return events


def compare(shown, out_lines, events):
    """A reason the statement's output differs from what is shown, or None."""
    client = [e for e in events if e[0] == "error"]
    if client:
        return f"psql: {client[0][1]}"
    # What is shown of errors and warnings, each with the DETAIL/HINT shown under it.
    said, rows = [], []
    for line in shown:
        level = next((lv for lv in LEVELS if line.startswith(lv)), None)
        if level in ("ERROR:", "WARNING:"):
            said.append([level[:-1], line[len(level):].strip(), {}])
        elif level and said:
            said[-1][2][level[:-1]] = line[len(level):].strip()
        else:
            rows.append(line)
    got = [e for e in events if e[0] in ("ERROR", "WARNING")]
    if [s[0] for s in said] != [g[0] for g in got]:
        shown_text = "; ".join(f"{s[0]}: {s[1]}" for s in said) or "no error or warning"
        got_text = "; ".join(f"{g[0]}: {g[1]}" for g in got) or "none"
        return f"shown {shown_text}, got {got_text}"
    for s, g in zip(said, got):
        if not matches(s[1], g[1]):
            return f"shown {s[0]} {s[1]!r}, got {g[1]!r}"
        for key, text in s[2].items():
            if not matches(text, g[2].get(key, "")):
                return f"shown {key} {text!r}, got {g[2].get(key)!r}"
    if any(g[0] == "ERROR" for g in got) or not rows:
        return None
    out = [cells(r) for r in out_lines]
    want = [cells(r) for r in rows]
    if out and len(want) == len(out) and len(want[0]) == len(out[0]) \
            and all(matches(w, a) for w, a in zip(want[0], out[0])):
        pass  # the header is shown and compared
    else:
        out = out[1:]
    if len(out) != len(want):
        return f"shown {len(want)} row(s), got {len(out)}: {out}"
    for w, a in zip(want, out):
        if len(w) != len(a) or not all(matches(x, y) for x, y in zip(w, a)):
            return f"shown {' | '.join(w)!r}, got {' | '.join(a)!r}"
    return None


def run_sql(db, role, body, where):
    stmts, stray = statements(body)
    script, line_of = [], {}
    for k, (_, lines, _) in enumerate(stmts):
        script.append(f"\\echo @@{k}")
        for line in lines:
            script.append(line)
            line_of[len(script)] = k
    r = psql(db, role, "\n".join(script) + "\n")
    outputs, k = {}, None
    for line in r.stdout.split("\n"):
        m = re.match(r"^@@(\d+)$", line)
        if m:
            k = int(m.group(1))
            outputs[k] = []
        elif k is not None and line != "":
            outputs[k].append(line)
    events = events_of(r.stderr, lambda n: max((k for ln, k in line_of.items() if ln <= n), default=0))
    problems = [f"{where + n}: output shown after no statement (a comment or a blank line between)"
                for n in stray]
    for k, (first, lines, shown) in enumerate(stmts):
        why = compare(shown, outputs.get(k, []), events.get(k, []))
        if why:
            problems.append(f"{where + first}: {lines[0].strip()[:60]}…: {why}")
    return problems, len(stmts)


def helps(command, sub):
    cmd = COMMANDS[command] + ([sub] if sub else []) + ["--help"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return r.returncode, r.stdout + r.stderr


def check_synopsis(body, where):
    problems, checked = [], 0
    text = "\n".join(body).replace("\\\n", " ")
    for n, line in enumerate(text.split("\n")):
        words = line.split("#")[0].split()
        # Environment assignments before the command (PGUSER=bob micromegas-views …).
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if not words:
            continue
        if words[0] not in COMMANDS:
            near = [c for c in COMMANDS if words[0].startswith("micromegas-")]
            if near:
                problems.append(f"{where + n}: {words[0]} is none of the project's commands {sorted(COMMANDS)}")
            continue
        command = words[0]
        code, top = helps(command, None)
        if code != 0:
            problems.append(f"{where + n}: {command} --help failed: {top.strip()[-300:]}")
            continue
        subs = set(re.findall(r"^\s{2,}([a-z][a-z-]*)\s", top.split("Commands:")[-1], re.M)) \
            if "Commands:" in top else set()
        sub = next((w for w in words[1:] if w in subs), None)
        text_help = top
        if sub is not None:
            code, text_help = helps(command, sub)
            if code != 0:
                problems.append(f"{where + n}: {command} {sub} --help failed: {text_help.strip()[-300:]}")
                continue
        elif subs:
            problems.append(f"{where + n}: {command}: names none of its subcommands {sorted(subs)}")
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", " ".join(words)):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text_help):
                problems.append(f"{where + n}: {command} {sub or ''}: no flag {flag} in its --help")
        checked += 1
    return problems, checked


SELF_TEST = r"""
<!-- test setup: CREATE SCHEMA btree_gist; CREATE EXTENSION btree_gist SCHEMA btree_gist;
CREATE EXTENSION micromegas_views; -->
<!-- test: as postgres -->
```sql
SELECT 1 AS a, 'x' AS b;
--  a | b
--  1 | x
SELECT micromegas.mm_drop_view('nope');
--  ERROR: materialized view "nope" does not exist
```
<!-- test: as postgres -->
```sql
SELECT 2;
--  3
```
<!-- test: as postgres -->
```sql
SELECT micromegas.mm_drop_view('nope');
--  ERROR: materialized view "nope" does not exis
```
<!-- test: as postgres -->
```sql
DO $$BEGIN RAISE WARNING 'unshown'; END$$;
```
<!-- test: as postgres -->
```sql
SELECT 1;
-- a comment
--  2
```
<!-- test: as postgres -->
```sql
SELECT 1 /* it's one */;
--  2
```
<!-- test: as postgres -->
```sql
SELECT $q1$a;b$q1$ AS t;
--  c;d
```
<!-- test: as postgres -->
```sql
SELECT 1 WHERE false \gset
```
<!-- test: as postgres -->
```sql
SELECT micromegas.mm_drop_view('nope');
```
<!-- test: synopsis -->
```sh
micromegas-views plan --pru views/
```
<!-- test: synopsis -->
```sh
PGUSER=bob micromegas-views aply views/
```
"""


def self_test():
    """The harness catches what it must: the first block agrees, every other
    one disagrees in one way."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        page = os.path.join(d, "self_test.md")
        open(page, "w").write(SELF_TEST)
        r = subprocess.run([sys.executable, os.path.abspath(__file__), page],
                           capture_output=True, text=True, cwd=ROOT)
    lines = [l for l in r.stdout.split("\n") if l.startswith(("ok ", "FAIL "))]
    verdicts = [l.split()[0] for l in lines]
    expected = ["ok"] + ["FAIL"] * (SELF_TEST.count("<!-- test:") - 1)
    if verdicts != expected:
        sys.exit(f"docs_test self-test: expected {expected}, got:\n{r.stdout}{r.stderr}")
    print(f"docs_test self-test: {len(lines)} blocks, every disagreement caught")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    files = sys.argv[1:] or ["README.md"] + sorted(glob.glob("docs/*.md"))
    failures, ran, skipped = 0, 0, 0
    for path in files:
        found = blocks(path if os.path.isabs(path) else os.path.join(ROOT, path))
        if not found:
            continue
        db = "mmv_docs_" + re.sub(r"\W", "_", os.path.basename(path)[:-3].lower())
        psql("postgres", "postgres", f'DROP DATABASE IF EXISTS "{db}";\nCREATE DATABASE "{db}";', check=True)
        # Each page makes the roles it names: none is left by another page.
        psql("postgres", "postgres", f"DROP ROLE IF EXISTS {', '.join(ROLES)};", check=True)
        for kind, marker, setups, start, body in found:
            where = f"{path}:{start + 1}"
            for setup in setups:
                psql(db, "postgres", setup, check=True)
            if kind == "sql":
                role = "postgres"
                if marker and marker.startswith("as "):
                    role = marker[3:].strip()
                elif marker:
                    print(f"FAIL {where}: a sql block is run as a role (<!-- test: as ROLE -->), not {marker!r}")
                    failures += 1
                    continue
                problems, n = run_sql(db, role, body, start + 1)
                label = f"sql as {role}, {n} statements"
            elif marker == "synopsis":
                problems, n = check_synopsis(body, start + 1)
                label = f"synopsis, {n} command lines"
                if n == 0:
                    problems = [f"{where}: a synopsis that names none of the project's commands"]
            elif marker == "run":
                r = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(body)],
                                   capture_output=True, text=True, cwd=ROOT)
                problems = [] if r.returncode == 0 else [f"{where}: exit {r.returncode}: {r.stderr.strip()[-400:]}"]
                label = "sh, run"
            elif marker and marker.startswith("skip, "):
                print(f"skip {where} ({kind}): {marker[6:]}")
                skipped += 1
                continue
            else:
                problems = [f"{where}: a {kind} block says neither run, synopsis nor skip (<!-- test: … -->)"]
                label = kind
            ran += 1
            if problems:
                failures += 1
                print(f"FAIL {where} ({label})")
                for p in problems:
                    print(f"  {path}:{p}" if not str(p).startswith(path) else f"  {p}")
            else:
                print(f"ok   {where} ({label})")
        psql("postgres", "postgres", f'DROP DATABASE IF EXISTS "{db}";')
    psql("postgres", "postgres", f"DROP ROLE IF EXISTS {', '.join(ROLES)};")
    print(f"docs examples: {ran} blocks checked, {skipped} skipped, {failures} disagree")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
