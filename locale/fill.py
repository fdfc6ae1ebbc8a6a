"""Fill translations into a .po file from a JSON object and clear their fuzzy flags.

    python locale/fill.py locale/zh_Hans/LC_MESSAGES/django.po translations.json

The JSON maps each msgid (with "context\u0004" in front for a pgettext entry) to its msgstr.
Run `bash locale/update.sh` first (it lists what is missing) and again after.
"""

import json
import sys

po_path, mapping_path = sys.argv[1], sys.argv[2]
mapping = json.load(open(mapping_path, encoding="utf-8"))
text = open(po_path, encoding="utf-8").read()
blocks = text.split("\n\n")


def unquote(lines):
    return "".join(json.loads(l) for l in lines)


out = []
filled = set()
for block in blocks:
    lines = block.split("\n")
    ctx = None
    msgid_lines = []
    mode = None
    for l in lines:
        if l.startswith("msgctxt "):
            ctx = json.loads(l[8:])
            mode = "ctx"
        elif l.startswith("msgid "):
            msgid_lines = [l[6:]]
            mode = "id"
        elif l.startswith("msgstr") or l.startswith("msgid_plural"):
            mode = None
        elif l.startswith('"') and mode == "id":
            msgid_lines.append(l)
    if msgid_lines:
        mid = unquote(msgid_lines)
        key = f"{ctx}\x04{mid}" if ctx else mid
        if key in mapping and mid:
            new = []
            skip = False
            for l in lines:
                if l.startswith("#, fuzzy"):
                    flags = [f.strip() for f in l[2:].split(",") if f.strip() != "fuzzy"]
                    if flags:
                        new.append("#, " + ", ".join(flags))
                    continue
                if l.startswith("#| "):
                    continue
                if l.startswith("msgstr "):
                    new.append("msgstr " + json.dumps(mapping[key], ensure_ascii=False))
                    skip = True
                    continue
                if skip and l.startswith('"'):
                    continue
                skip = False
                new.append(l)
            lines = new
            filled.add(key)
    out.append("\n".join(lines))
open(po_path, "w", encoding="utf-8").write("\n\n".join(out))
missing = set(mapping) - filled
print("filled", len(filled), "missing", missing)
