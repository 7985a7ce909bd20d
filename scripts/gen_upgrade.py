#!/usr/bin/env python3
"""Writes sql/micromegas_views--FROM--TO.sql from the template
scripts/upgrade-FROM--TO.template.sql, the current sql/ files and the
generated install script (for the Rust functions' declarations): every
changed or new function exactly as a fresh install creates it, so
scripts/upgrade_test.sh finds identical objects. Run after
`cargo pgrx install` (or scripts/cluster.sh install) while TO is the
development version; a released upgrade script is never regenerated.

A template names what changes, one line each: --@new / --@replace a
function of sql/ (with the COMMENT beside its CREATE), --@rust a function
declared by a #[pg_extern] (with the COMMENT of the extension_sql! block
beside it), --@comment a function whose COMMENT alone changed, --@verbatim
a marked section of a source file, --@file a whole one. Grants are not
retyped: a template ends with SELECT micromegas._mm_apply_privileges(),
which applies the privilege matrix of sql/privileges.sql.

usage: gen_upgrade.py PG_CONFIG FROM TO"""
import re, subprocess, sys, pathlib

root = pathlib.Path(__file__).resolve().parent.parent
pg_config, old, new = sys.argv[1:4]
sharedir = subprocess.check_output([pg_config, '--sharedir'], text=True).strip()
generated = pathlib.Path(sharedir, 'extension', f'micromegas_views--{new}.sql').read_text()
sources = {name: (root / 'sql' / name).read_text() for name in sorted(p.name for p in (root / 'sql').glob('*.sql') if not p.name.startswith('micromegas_views--')) if (root / 'sql' / name).exists()}
body = pathlib.Path(root / 'scripts' / f'upgrade-{old}--{new}.template.sql').read_text()

def literal_end(text, k):
    """The end of the statement whose string literal opens at text[k] ('')."""
    k += 1
    while True:
        k = text.index("'", k)
        if text.startswith("''", k):
            k += 2
            continue
        return text.index(';', k) + 1

def block(start, comment=False):
    """A function as its source file creates it; with comment, the COMMENT
    that follows it there too (every object's COMMENT is beside its CREATE),
    so a template never retypes one."""
    for text in sources.values():
        if start in text:
            i = text.index(start)
            j = text.index('$$;', text.index('$$', text.index(' AS $$', i)) + 2) + 3
            m = comment and re.compile(r"\nCOMMENT ON FUNCTION [^\n]*? IS\s*'").match(text, j)
            if m:
                j = literal_end(text, m.end() - 1)
            return text[i:j]
    raise SystemExit(f'not found: {start!r}')

def comment(name):
    """A function's COMMENT as the generated install script gives it."""
    c = re.search(r"^COMMENT ON FUNCTION micromegas\." + name + r"\([^\n]*? IS\s*'", generated, re.M)
    if not c:
        raise SystemExit(f'no comment: {name!r}')
    return generated[c.start():literal_end(generated, c.end() - 1)]

def rust(name):
    """A Rust function as the generated install script declares it, with
    the COMMENT its extension_sql! block beside the #[pg_extern] gives."""
    m = re.search(r'CREATE  FUNCTION "' + name + r'"\(.*?AS \'MODULE_PATHNAME\', \'\w+\';', generated, re.S)
    out = m.group(0).replace(f'CREATE  FUNCTION "{name}"', f'CREATE FUNCTION micromegas."{name}"')
    return out + '\n' + comment(name)

def expand(match):
    kind, arg = match.group(1), match.group(2).replace('\\n', '\n')
    if kind == 'rust':
        return rust(arg)
    if kind == 'comment':
        return comment(arg)
    if kind == 'new':
        return block(arg, comment=True)
    if kind == 'replace':
        return block(arg, comment=True).replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION', 1)
    if kind == 'file':
        return sources[arg].rstrip('\n')
    if kind == 'verbatim':
        # a whole section of a source file, between two marker comments
        name, section = arg.split(':', 1)
        text = sources[name]
        begin = f'-- <{section}>\n'
        end = f'-- </{section}>\n'
        return text[text.index(begin) + len(begin):text.index(end)].rstrip('\n')
    raise SystemExit(kind)

out = re.sub(r'^--@(rust|comment|new|replace|verbatim|file) (.+)$', expand, body, flags=re.M)
(root / 'sql' / f'micromegas_views--{old}--{new}.sql').write_text(out)
