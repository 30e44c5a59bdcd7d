"""Export a fleet's memory to files people and other servers can read, and import it back.

- `layout`: the archive's file names, format version and line encoding (one definition).
- `rows`: the fleet's rows as exported dicts (natural keys, never database ids or secrets).
- `markdown`: the copy for people: promoted claims by subject, attributed, with evidence.
- `archive`: build the files and the manifest; write a directory or a tar; read either back.
- `check`: parse and validate every line of an archive before anything is written.
- `load`: write a checked archive into a new fleet, or merge it into one as proposals.

It lives in ctxlake_site because it reads both apps (fleet never imports claims).
"""
