"""Host images: root file systems built once per server from recipes, loam-init as PID 1.

A recipe (recipes/<name>.toml) is data: the Debian suite, apt packages beyond the base, pip
requirements installed into /opt/venv, files written into the image (settings), the services
loam-init may start, a smoke command that must pass in the built image and, for an image of a
vendor's stack, the vendor's files it needs.
Every host's root is an overlay on an image, so an image is built once and never written to
again; host keys are generated per host at its first start (in its own upper layer).

An image's digest says what is in it: the recipe's digest with the Debian packages installed
(name, version, architecture) and the Python distributions in /opt/venv (as `pip freeze` lists
them). Two servers reporting one digest hold the same software however far apart they built
it, which the recipe alone doesn't say (the mirror moves on, requirements are ranges); a hash
of the files would take minutes over gigabytes and differ with every build's timestamps.
"""

from __future__ import annotations

import configparser
import fnmatch
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

logger = logging.getLogger(__name__)

RECIPES = Path(__file__).resolve().parent / "recipes"
NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{0,59}$")  # the portal's image code (a slug)
# In every image, whatever its recipe: what loam-init and the portal's readiness probe need.
BASE_PACKAGES = ("openssh-server", "iproute2", "procps")
VENV = "/opt/venv"
SERVICES = "/usr/local/lib/loam/services"
INIT = "/usr/local/sbin/loam-init"

# PID 1 in every host: /run is a fresh tmpfs under nspawn, and keys are made on first start.
# A service runs where the portal asked for it (its env file) and the image has it.
LOAM_INIT = f"""#!/bin/sh
mkdir -p /run/sshd
[ -s /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A
for env in /etc/loam/services/*.env; do
    [ -f "$env" ] || continue
    name=$(basename "$env" .env)
    [ -x "{SERVICES}/$name" ] || continue
    (set -a; . "$env"; exec "{SERVICES}/$name") </dev/null >>"/var/log/$name.log" 2>&1 &
done
exec /usr/sbin/sshd -D -e
"""
SSHD_CONFIG = "PermitRootLogin prohibit-password\nUseDNS no\n"
VENV_PATH = f'export PATH="{VENV}/bin:$PATH"\n'
# Paths pip's configuration may name that must never be bound over the image's own.
SYSTEM_DIRS = {
    "/",
    "/bin",
    "/etc",
    "/home",
    "/lib",
    "/opt",
    "/root",
    "/srv",
    "/tmp",
    "/usr",
    "/var",
}


class ImageError(Exception):
    pass


@dataclass(frozen=True)
class VendorFile:
    what: str  # what to download, and where from
    pattern: str  # the file's name, as a glob
    install: str  # run in the image; {path} is the file there


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    suite: str
    smoke: str
    packages: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    services: tuple[tuple[str, str], ...] = ()  # (name, shell command), for loam-init
    files: tuple[tuple[str, str], ...] = ()  # (absolute path in the image, its text)
    vendor_files: tuple[VendorFile, ...] = ()
    source: str = ""  # the recipe file as written

    @property
    def digest(self) -> str:
        """What the image is built from: an image built from another recipe is built again."""
        parts = [self.source, " ".join(BASE_PACKAGES), LOAM_INIT, SSHD_CONFIG, VENV_PATH]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BuiltImage:
    name: str
    digest: str  # "sha256:<hex>", see the module's docstring
    size_bytes: int


def _strings(value, key: str, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ImageError(f"recipe {name}: {key} must be a list of non-empty strings")
    return tuple(value)


def _text(data: dict, key: str, name: str, *, required: bool = True) -> str:
    value = data.get(key, None if required else "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise ImageError(f"recipe {name}: {key} must be a non-empty string")
    return value


RECIPE_KEYS = {
    "description",
    "suite",
    "smoke",
    "packages",
    "pip",
    "services",
    "files",
    "vendor_files",
}


def _image_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return path.startswith("/") and len(parts) > 1 and ".." not in parts


def parse_recipe(name: str, text: str) -> Recipe:
    """The recipe `name` from its TOML; an ImageError names what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ImageError(f"recipe {name}: {error}") from None
    if unknown := sorted(set(data) - RECIPE_KEYS):
        raise ImageError(f"recipe {name}: unknown keys {', '.join(unknown)}")
    services = data.get("services", {})
    if not isinstance(services, dict) or not all(
        NAME.match(key) and isinstance(command, str) and command.strip()
        for key, command in services.items()
    ):
        raise ImageError(f"recipe {name}: services must map service names to shell commands")
    files = data.get("files", {})
    if not isinstance(files, dict) or not all(
        _image_path(path) and isinstance(text, str) for path, text in files.items()
    ):
        raise ImageError(f"recipe {name}: files must map absolute paths (no ..) to their text")
    vendor_files = []
    for entry in data.get("vendor_files", []):
        if not isinstance(entry, dict) or set(entry) != {"what", "pattern", "install"}:
            raise ImageError(f"recipe {name}: each vendor_files entry has what, pattern, install")
        vendor_files.append(VendorFile(**{key: _text(entry, key, name) for key in entry}))
    return Recipe(
        name=name,
        description=_text(data, "description", name),
        suite=_text(data, "suite", name),
        smoke=_text(data, "smoke", name),
        packages=_strings(data.get("packages", []), "packages", name),
        pip=_strings(data.get("pip", []), "pip", name),
        services=tuple(sorted(services.items())),
        files=tuple(sorted(files.items())),
        vendor_files=tuple(vendor_files),
        source=text,
    )


def known_recipes(recipes: Path = RECIPES) -> list[str]:
    return sorted(path.stem for path in recipes.glob("*.toml"))


def load_recipe(name: str, recipes: Path = RECIPES) -> Recipe:
    path = recipes / f"{name}.toml"
    if not NAME.match(name) or not path.is_file():
        raise ImageError(f"unknown image {name!r}; known: {', '.join(known_recipes(recipes))}")
    return parse_recipe(name, path.read_text())


def images_dir(state_dir: Path, override: str | None = None) -> Path:
    """state_dir/images, or LOAM_AGENT_IMAGE_DIR (so CI keeps its built images across runs)."""
    return Path(override) if override else state_dir / "images"


def rootfs(images: Path, name: str) -> Path:
    return images / name / "rootfs"


def _facts_file(images: Path, name: str) -> Path:
    return images / name / "image.json"


def _built(images: Path, name: str, recipes: Path = RECIPES) -> BuiltImage | None:
    """The image, if it is built from the recipe as it is now."""
    try:
        facts = json.loads(_facts_file(images, name).read_text())
        if facts["recipe"] != load_recipe(name, recipes).digest:
            return None
        return BuiltImage(name=name, digest=facts["digest"], size_bytes=facts["size_bytes"])
    except (OSError, ValueError, KeyError, ImageError):
        return None


def is_built(images: Path, name: str) -> bool:
    return _built(images, name) is not None


def list_images(images: Path, recipes: Path = RECIPES) -> list[BuiltImage]:
    """The images built here from their current recipes, by name."""
    if not images.is_dir():
        return []
    found = (_built(images, path.name, recipes) for path in sorted(images.iterdir()))
    return [image for image in found if image is not None]


def image_digest(recipe_digest: str, packages: Sequence[str], distributions: Sequence[str]) -> str:
    """sha256 over the recipe's digest, the installed Debian packages and the venv's
    distributions, each list sorted: the same software gives the same digest."""
    lines = [f"recipe {recipe_digest}", *sorted(packages), "--", *sorted(distributions)]
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def installed_packages(root: Path) -> list[str]:
    """ "name version architecture" of each package dpkg has installed in `root`."""
    status = (root / "var/lib/dpkg/status").read_text(errors="replace")
    packages = []
    for stanza in status.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " "
        )
        if fields.get("Status", "").endswith(" installed"):
            packages.append(f"{fields['Package']} {fields['Version']} {fields['Architecture']}")
    return sorted(packages)


def venv_distributions(root: Path) -> list[str]:
    """The distributions in /opt/venv as "name-version" (none without a venv)."""
    venv = root / VENV.lstrip("/")
    return sorted(
        path.name.removesuffix(".dist-info")
        for path in venv.glob("lib/python3*/site-packages/*.dist-info")
    )


def _size_bytes(root: Path) -> int:
    """Disk used, as du counts it: each file's blocks once, however many links it has."""
    seen, total = set(), 0
    for folder, dirs, files in os.walk(root):
        for entry in (*dirs, *files):
            stat = os.lstat(os.path.join(folder, entry))
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return total


def vendor_files_for(recipe: Recipe, given: Sequence[Path]) -> dict[VendorFile, Path]:
    """Each vendor file the recipe needs, matched by name among `given`; what is missing is
    refused with what to download, where from, and how to pass it."""
    found, missing = {}, []
    for wanted in recipe.vendor_files:
        match = next((p for p in given if fnmatch.fnmatch(p.name, wanted.pattern)), None)
        if match is None:
            missing.append(wanted)
        elif not match.is_file():
            raise ImageError(f"{match}: no such file")
        else:
            found[wanted] = match.resolve()
    if missing:
        needed = "; ".join(f"{item.what}, named like {item.pattern}" for item in missing)
        raise ImageError(
            f"image {recipe.name!r} needs the vendor's files, which the agent can't download: "
            f"{needed}. Download them and pass each with "
            f"`loam-agent image build --name {recipe.name} --vendor-file PATH`"
        )
    unused = [str(p) for p in given if p.resolve() not in found.values()]
    if unused:
        raise ImageError(f"image {recipe.name!r} uses no such vendor file: {', '.join(unused)}")
    return found


def build_image(
    images: Path,
    name: str,
    mirror: str,
    *,
    rebuild: bool = False,
    vendor_files: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Build image `name` under `images` unless it is there already; return its rootfs.
    `environ`: where pip's settings are read (PIP_* and its configuration files), the
    agent's own environment by default."""
    recipe = load_recipe(name)
    supplied = vendor_files_for(recipe, vendor_files)
    target = rootfs(images, name)
    if is_built(images, name) and not rebuild:
        logger.info("image %s already built at %s", name, target)
        return target
    # Built beside the target and renamed, so a cut-short build never looks like an image.
    partial = images / name / "rootfs.partial"
    _unmount_under(partial)  # what a killed build left mounted, before anything is deleted
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    logger.info("building image %s from %s (minutes)", name, mirror)
    _run_build(
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        recipe.suite,
        str(partial),
        mirror,
    )
    _write(partial / INIT.lstrip("/"), LOAM_INIT, 0o755)
    _write(partial / "etc/ssh/sshd_config.d/loam.conf", SSHD_CONFIG, 0o644)
    try:
        with _chroot(partial):
            _install(partial, recipe, supplied, os.environ if environ is None else environ)
    finally:
        _unmount_under(partial)
    for key in (partial / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    distributions = venv_distributions(partial)
    digest = image_digest(recipe.digest, installed_packages(partial), distributions)
    size = _size_bytes(partial)
    _facts_file(images, name).unlink(missing_ok=True)  # not reported while it is swapped
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    facts = {
        "name": name,
        "recipe": recipe.digest,
        "digest": digest,
        "size_bytes": size,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "distributions": distributions,
    }
    _write(_facts_file(images, name), json.dumps(facts, indent=2) + "\n", 0o644)
    logger.info("image %s built: %s, %.1f GiB", name, digest, size / 2**30)
    return target


def _install(root: Path, recipe: Recipe, supplied: dict[VendorFile, Path], environ) -> None:
    """The recipe's packages, venv, vendor files and services in the chroot `root`; then its
    smoke command must pass."""
    base_env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
    }
    # No daemon starts in the image while it is built (Debian's policy-rc.d convention).
    policy = root / "usr/sbin/policy-rc.d"
    _write(policy, "#!/bin/sh\nexit 101\n", 0o755)
    apt_env = {**base_env, "DEBIAN_FRONTEND": "noninteractive"}
    if recipe.packages:
        _in_chroot(root, ["apt-get", "update", "-q"], apt_env)
        _in_chroot(
            root,
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *recipe.packages],
            apt_env,
        )
        _in_chroot(root, ["apt-get", "clean"], apt_env)
    policy.unlink()
    if recipe.pip:
        pip_env = {**base_env, **{k: v for k, v in environ.items() if k.startswith("PIP_")}}
        if "XDG_CONFIG_DIRS" in environ:
            pip_env["XDG_CONFIG_DIRS"] = environ["XDG_CONFIG_DIRS"]
        _in_chroot(root, ["python3", "-m", "venv", VENV], base_env)
        pip = [f"{VENV}/bin/pip", "install", "--no-cache-dir", "--progress-bar", "off"]
        with _bound(root, _pip_paths(environ)):
            _in_chroot(root, [*pip, *recipe.pip], pip_env)
        _write(root / "etc/profile.d/loam-venv.sh", VENV_PATH, 0o644)
    for wanted, path in supplied.items():
        command = wanted.install.format(path=shlex.quote(str(path)))
        with _bound(root, [path]):
            _in_chroot(root, ["/bin/sh", "-c", command], base_env)
    for path, text in recipe.files:
        _write(root / path.lstrip("/"), text, 0o644)
    for service, command in recipe.services:
        venv = VENV_PATH if recipe.pip else ""
        _write(root / SERVICES.lstrip("/") / service, f"#!/bin/sh\n{venv}{command}\n", 0o755)
    # A login shell, as a tenant's: /etc/profile puts the venv first on PATH.
    _in_chroot(root, ["/bin/sh", "-lc", recipe.smoke], base_env, what="the smoke command")


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.chmod(mode)
    partial.rename(path)


def _run_build(*command: str, env: Mapping[str, str] | None = None, what: str = "") -> None:
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-3000:]
        raise ImageError(f"{what or command[0]} failed ({result.returncode}): {output}")


def _in_chroot(root: Path, command: list[str], env: Mapping[str, str], *, what: str = "") -> None:
    logger.info("in the image: %s", shlex.join(command))
    _run_build("chroot", str(root), *command, env=dict(env), what=what or shlex.join(command))


def _pip_paths(environ: Mapping[str, str]) -> list[Path]:
    """The files and folders pip's settings name on this machine (its configuration files and
    the paths in them and in PIP_*: find-links, constraints, certificates), so that pip in the
    image finds the same wheels under the same names."""
    home = Path(environ.get("HOME", "/root"))
    xdg = environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    configs = [Path(folder) / "pip" / "pip.conf" for folder in xdg]
    configs += [Path("/etc/pip.conf"), home / ".config/pip/pip.conf", home / ".pip/pip.conf"]
    if environ.get("PIP_CONFIG_FILE"):
        configs.append(Path(environ["PIP_CONFIG_FILE"]))
    values = [value for key, value in environ.items() if key.startswith("PIP_")]
    paths = []
    for config in configs:
        if not config.is_file():
            continue
        paths.append(config)
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(config)
        except configparser.Error as error:
            raise ImageError(f"pip's configuration {config} can't be read: {error}") from None
        values += [value for section in parser.values() for value in section.values()]
    for value in values:
        for token in value.split():
            path = Path(token.removeprefix("file://"))
            # A local index's pages link to its files beside its simple/ folder (../../files/).
            if token.startswith("file://") and path.name == "simple":
                path = path.parent
            if path.is_absolute() and path.exists():
                paths.append(path)
    chosen = []
    for path in sorted({Path(os.path.normpath(path)) for path in paths}):
        if str(path) in SYSTEM_DIRS or path == Path(VENV) or Path(VENV) in path.parents:
            continue
        if not any(parent in path.parents for parent in chosen):
            chosen.append(path)
    return chosen


@contextmanager
def _chroot(root: Path) -> Iterator[None]:
    """/proc and /dev mounted in `root` while the image is built in it."""
    try:
        _run_build("mount", "-t", "proc", "proc", str(root / "proc"))
        _run_build("mount", "--bind", "/dev", str(root / "dev"))
        yield
    finally:
        _unmount_under(root)


@contextmanager
def _bound(root: Path, sources: Sequence[Path]) -> Iterator[None]:
    """`sources` bound read-only into `root` at the same paths; afterwards unbound, and what
    was made in the image to bind them on removed again."""
    made, targets = [], []
    try:
        for source in sources:
            target = root / str(source).lstrip("/")
            made += _make_mount_point(target, directory=source.is_dir())
            _run_build("mount", "--bind", str(source), str(target))
            targets.append(target)
            _run_build("mount", "-o", "remount,bind,ro", str(target))
        yield
    finally:
        for target in reversed(targets):
            _unmount_under(target)
        for path in reversed(made):
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink(missing_ok=True)


def _make_mount_point(target: Path, *, directory: bool) -> list[Path]:
    """Make `target` (and its missing parents); return what was made, outermost first."""
    made = [parent for parent in reversed(target.parents) if not parent.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.mkdir() if directory else target.touch()
        made.append(target)
    return made


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first (from /proc/self/mountinfo)."""
    prefix = str(root.resolve()) if root.exists() else str(root)
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=lambda point: point.count("/"), reverse=True)


def _unmount_under(root: Path) -> None:
    for point in _mounts_under(root):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)
