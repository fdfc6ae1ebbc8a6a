"""Fill translations into a .po file from a JSON object and clear their fuzzy flags.

    python locale/fill.py locale/zh_Hans/LC_MESSAGES/django.po translations.json

The JSON maps each msgid (with "context\\u0004" in front for a pgettext entry) to its msgstr;
plural entries are left to a hand edit. Run `bash locale/update.sh` first (it lists what is
missing) and again after.
"""

import json
import sys
from pathlib import Path


def entry_key(lines: list[str]) -> str | None:
    """The msgctxt\\x04msgid key of one .po entry, or None for the header and plurals."""
    context, msgid, reading_msgid = None, [], False
    for line in lines:
        if line.startswith("msgctxt "):
            context = json.loads(line[len("msgctxt ") :])
        elif line.startswith("msgid_plural"):
            return None
        elif line.startswith("msgid "):
            msgid, reading_msgid = [json.loads(line[len("msgid ") :])], True
        elif line.startswith('"') and reading_msgid:
            msgid.append(json.loads(line))
        elif line.startswith("msgstr"):
            reading_msgid = False
    text = "".join(msgid)
    if not text:
        return None
    return f"{context}\x04{text}" if context else text


def filled(lines: list[str], translation: str) -> list[str]:
    """The entry with `translation` as its msgstr, no fuzzy flag and no previous-msgid lines."""
    result, in_msgstr = [], False
    for line in lines:
        if line.startswith("#, "):
            flags = [flag.strip() for flag in line[3:].split(",") if flag.strip() != "fuzzy"]
            if flags:
                result.append("#, " + ", ".join(flags))
        elif line.startswith("#| "):
            continue
        elif line.startswith("msgstr "):
            result.append("msgstr " + json.dumps(translation, ensure_ascii=False))
            in_msgstr = True
        elif in_msgstr and line.startswith('"'):
            continue
        else:
            in_msgstr = False
            result.append(line)
    return result


def main(po_path: str, mapping_path: str) -> None:
    mapping = json.loads(Path(mapping_path).read_text(encoding="utf-8"))
    po = Path(po_path)
    entries, done = [], set()
    for block in po.read_text(encoding="utf-8").split("\n\n"):
        lines = block.split("\n")
        key = entry_key(lines)
        if key in mapping:
            lines = filled(lines, mapping[key])
            done.add(key)
        entries.append("\n".join(lines))
    po.write_text("\n\n".join(entries), encoding="utf-8")
    missing = sorted(set(mapping) - done)
    print(f"filled {len(done)}; not found in the catalog: {missing or 'none'}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
