"""Every string marked for translation has a zh-hans translation (none missing, none fuzzy)."""

import shutil
import subprocess
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

CATALOG = Path("zh_Hans") / "LC_MESSAGES" / "django.po"
SOURCES = ["apps", "portal", "templates"]
IGNORED = ["static", "*/migrations/*"]


def statistics(po_file: Path) -> str:
    result = subprocess.run(
        ["msgfmt", "--check", "--statistics", "-o", "/dev/null", str(po_file)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr.strip()


def test_committed_catalog_is_complete():
    stats = statistics(settings.BASE_DIR / "locale" / CATALOG)
    assert "untranslated" not in stats and "fuzzy" not in stats, stats


def test_no_marked_string_is_missing_from_the_catalog(tmp_path, settings, monkeypatch):
    # makemessages writes into the `locale` folder beside the sources it scans, so it runs in
    # a scratch tree: links to the sources and a copy of the catalog.
    for name in SOURCES:
        (tmp_path / name).symlink_to(settings.BASE_DIR / name)
    shutil.copytree(settings.BASE_DIR / "locale", tmp_path / "locale")
    settings.LOCALE_PATHS = [tmp_path / "locale"]
    monkeypatch.chdir(tmp_path)
    call_command(
        "makemessages", locale=["zh_Hans"], symlinks=True, ignore_patterns=IGNORED, verbosity=0
    )
    stats = statistics(tmp_path / "locale" / CATALOG)
    assert "untranslated" not in stats and "fuzzy" not in stats, (
        f"{stats}: run `bash locale/update.sh` and translate the new strings"
    )
