"""What a partner's server downloads to install the host agent, public and unauthenticated (it
holds no secret; the join token is what admits a server):

- /agent/install.sh: the installer (agent/install.sh), which a partner pipes into bash;
- /agent/loam-agent.tar.gz: the agent as an sdist (agent/'s pyproject, README and package,
  under loam_agent-<version>/), which pip builds with its backend (setuptools), plus the two
  files the installer takes from it: deploy/agent/install.sh (the Debian packages the hosts
  need) and deploy/agent/loam-agent.service.

Both are read from this checkout, so a portal serves the agent it was deployed with. The archive
is built in memory, byte for byte the same for the same files (fixed times, owners and order),
and kept until one of them changes; an ETag lets a client skip a download it has.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import condition, require_safe

AGENT_DIR = Path(settings.BASE_DIR) / "agent"
INSTALLER = AGENT_DIR / "install.sh"
# What the installer takes from the archive besides the package, at the same paths.
DEPLOY_FILES = ("deploy/agent/install.sh", "deploy/agent/loam-agent.service")
ARCHIVE_TYPE = "application/gzip"
SCRIPT_TYPE = "text/x-shellscript; charset=utf-8"
# The archive's file times: fixed, so the same sources give the same bytes (and ETag).
EPOCH = 315532800  # 1980-01-01, the earliest a wheel's zip can record


@dataclass(frozen=True)
class Built:
    content: bytes
    filename: str
    etag: str


def _sources() -> list[tuple[str, Path]]:
    """(path in the archive below its top folder, file here), sorted."""
    files = [
        ("pyproject.toml", AGENT_DIR / "pyproject.toml"),
        ("README.md", AGENT_DIR / "README.md"),
    ]
    for path in sorted((AGENT_DIR / "loam_agent").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files.append((path.relative_to(AGENT_DIR).as_posix(), path))
    files += [(name, Path(settings.BASE_DIR) / name) for name in DEPLOY_FILES]
    return files


def agent_archive() -> Built:
    """The sdist of the agent as the checkout holds it now."""
    sources = _sources()
    stamp = tuple(
        (name, str(path), path.stat().st_mtime_ns, path.stat().st_size) for name, path in sources
    )
    return _build(stamp)


@lru_cache(maxsize=1)
def _build(stamp: tuple) -> Built:
    project = tomllib.loads((AGENT_DIR / "pyproject.toml").read_text())["project"]
    top = f"{project['name'].replace('-', '_')}-{project['version']}"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path, _mtime, _size in stamp:
            data = Path(path).read_bytes()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mtime = EPOCH
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    content = gzip.compress(raw.getvalue(), mtime=0)
    return Built(
        content=content,
        filename=f"{top}.tar.gz",
        etag=hashlib.sha256(content).hexdigest()[:32],
    )


def installer() -> Built:
    content = INSTALLER.read_bytes()
    return Built(
        content=content, filename="install.sh", etag=hashlib.sha256(content).hexdigest()[:32]
    )


def _serve(built: Built, content_type: str, disposition: str) -> HttpResponse:
    response = HttpResponse(built.content, content_type=content_type)
    response["Content-Disposition"] = f'{disposition}; filename="{built.filename}"'
    # A deploy may change it: a client asks again each time, and the ETag spares the bytes.
    response["Cache-Control"] = "public, no-cache"
    return response


@require_safe
@condition(etag_func=lambda request: installer().etag)
def install_script(request):
    return _serve(installer(), SCRIPT_TYPE, "inline")


@require_safe
@condition(etag_func=lambda request: agent_archive().etag)
def agent_source(request):
    return _serve(agent_archive(), ARCHIVE_TYPE, "attachment")
