"""Host image recipes: parsed from their TOML, refused with the reason, and digested stably;
what pip's settings make the build bind into the image; the vendor's files an image needs."""

import json
import os
from pathlib import Path

import pytest
from loam_agent.cli import reported_images
from loam_agent.hosts import image
from loam_agent.hosts.image import (
    ImageError,
    VendorFile,
    image_digest,
    installed_packages,
    known_recipes,
    list_images,
    load_recipe,
    parse_recipe,
    vendor_files_for,
    venv_distributions,
)

from tests.agent.conftest import fake_image, run_agent


def test_the_shipped_recipes_parse_and_name_what_is_in_them():
    assert known_recipes() == ["ascend-cann", "debian-12", "pytorch"]
    pytorch = load_recipe("pytorch")
    assert pytorch.description == "PyTorch 2.13 · Python 3.11 · JupyterLab"
    assert pytorch.suite == "bookworm"
    assert "torch==2.13.0" in pytorch.pip
    assert {"jupyterlab", "tensorboard"} <= {req.split(">")[0] for req in pytorch.pip}
    assert dict(pytorch.services).keys() == {"jupyter", "tensorboard"}
    assert "--ServerApp.base_url=$LOAM_SERVICE_BASE_URL" in dict(pytorch.services)["jupyter"]
    overrides = dict(pytorch.files)["/opt/venv/share/jupyter/lab/settings/overrides.json"]
    notification = json.loads(overrides)["@jupyterlab/apputils-extension:notification"]
    assert notification == {"fetchNews": "false", "checkForUpdates": False}
    assert load_recipe("debian-12").pip == ()
    (cann,) = load_recipe("ascend-cann").vendor_files
    assert cann.pattern == "Ascend-cann-toolkit_*_linux-*.run"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('suite = "bookworm"\nsmoke = "true"\n', "description must be a non-empty string"),
        ('description = "x"\nsuite = "bookworm"\nsmoke = "true"\npackage = ["vim"]\n', "package"),
        ('description = "x"\nsuite = "bookworm"\nsmoke = "true"\npip = "torch"\n', "pip must be"),
        (
            'description = "x"\nsuite = "bookworm"\nsmoke = "true"\n[services]\nJ = "x"\n',
            "services",
        ),
        (
            'description = "x"\nsuite = "bookworm"\nsmoke = "true"\n[[vendor_files]]\nwhat = "x"\n',
            "what, pattern, install",
        ),
        (
            'description = "x"\nsuite = "bookworm"\nsmoke = "true"\n[files]\n"etc/x" = "y"\n',
            "files must map absolute paths",
        ),
        (
            'description = "x"\nsuite = "bookworm"\nsmoke = "true"\n[files]\n"/etc/../x" = "y"\n',
            "files must map absolute paths",
        ),
        ("description = \n", "recipe broken:"),
    ],
)
def test_a_broken_recipe_is_refused_naming_what_is_wrong(text, says):
    with pytest.raises(ImageError, match=says):
        parse_recipe("broken", text)


def test_an_unknown_image_lists_the_known_recipes():
    with pytest.raises(
        ImageError,
        match=r"unknown image 'ubuntu2204-cuda124'; known: ascend-cann, debian-12, pytorch",
    ):
        load_recipe("ubuntu2204-cuda124")
    with pytest.raises(ImageError, match="unknown image"):
        load_recipe("../debian-12")


def test_image_build_of_an_unknown_name_fails_with_the_known_ones(tmp_path, agent_env):
    result = run_agent("image", "build", "--name", "ubuntu", env=agent_env(tmp_path))
    assert result.returncode == 1
    assert "unknown image 'ubuntu'; known: ascend-cann, debian-12, pytorch" in result.stderr


def test_a_vendor_stack_says_exactly_what_to_supply(tmp_path, agent_env):
    result = run_agent("image", "build", "--name", "ascend-cann", env=agent_env(tmp_path))
    assert result.returncode == 1
    assert "needs the vendor's files, which the agent can't download" in result.stderr
    assert "the CANN toolkit installer" in result.stderr
    assert "named like Ascend-cann-toolkit_*_linux-*.run" in result.stderr
    assert "--vendor-file PATH" in result.stderr


def test_vendor_files_are_matched_by_name(tmp_path):
    recipe = load_recipe("ascend-cann")
    installer = tmp_path / "Ascend-cann-toolkit_8.0.0_linux-x86_64.run"
    installer.write_text("#!/bin/sh\n")
    (wanted,) = recipe.vendor_files
    assert vendor_files_for(recipe, [installer]) == {wanted: installer}
    with pytest.raises(ImageError, match="uses no such vendor file"):
        vendor_files_for(recipe, [installer, tmp_path / "driver.run"])
    with pytest.raises(ImageError, match="no such file"):
        vendor_files_for(recipe, [tmp_path / "Ascend-cann-toolkit_9_linux-aarch64.run"])
    assert vendor_files_for(load_recipe("pytorch"), []) == {}
    assert VendorFile(what="x", pattern="*", install="true") not in recipe.vendor_files


def test_the_digest_is_stable_and_follows_what_is_in_the_image():
    packages = ["openssh-server 1:9.2p1-2 amd64", "curl 7.88.1 amd64"]
    distributions = ["torch-2.13.0+cpu", "jupyterlab-4.2.0"]
    digest = image_digest("abc", packages, distributions)
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    # The order things are listed in doesn't matter; what is installed does.
    assert image_digest("abc", packages[::-1], distributions[::-1]) == digest
    assert image_digest("abd", packages, distributions) != digest
    assert image_digest("abc", packages, ["torch-2.13.0", "jupyterlab-4.2.0"]) != digest
    assert image_digest("abc", [*packages, "vim 9 amd64"], distributions) != digest


def test_the_recipes_digest_changes_with_the_recipe_only():
    text = load_recipe("debian-12").source
    assert parse_recipe("debian-12", text).digest == load_recipe("debian-12").digest
    assert (
        parse_recipe("debian-12", text + "# a comment\n").digest != load_recipe("debian-12").digest
    )


def test_only_images_of_the_current_recipe_are_listed_and_reported(tmp_path):
    images = tmp_path / "images"
    fake_image(images, "pytorch")
    fake_image(images, "debian-12", recipe="an-older-recipe")  # built again at the next build
    (images / "ubuntu").mkdir()  # no recipe of that name
    assert [(i.name, i.size_bytes) for i in list_images(images)] == [("pytorch", 2**30)]
    assert image.is_built(images, "pytorch") and not image.is_built(images, "debian-12")
    assert reported_images(images, tmp_path / "saved") == [
        {"name": "pytorch", "digest": "sha256:" + "ab" * 32}
    ]
    assert list_images(tmp_path / "none") == []


def test_image_list_prints_every_recipe_with_its_digest_and_size(tmp_path, agent_env):
    images = tmp_path / "images"
    fake_image(images, "pytorch")
    env = {**agent_env(tmp_path), "LOAM_AGENT_IMAGE_DIR": str(images)}
    result = run_agent("image", "list", env=env)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert lines.keys() == {"ascend-cann", "debian-12", "pytorch"}
    assert "sha256:" + "ab" * 32 in lines["pytorch"] and "1.00 GiB" in lines["pytorch"]
    assert "PyTorch 2.13 · Python 3.11 · JupyterLab" in lines["pytorch"]
    assert "not built" in lines["debian-12"]


def test_what_is_installed_is_read_from_dpkg_and_the_venv(tmp_path):
    root = tmp_path / "rootfs"
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(
        "Package: curl\nStatus: install ok installed\nArchitecture: amd64\nVersion: 7.88\n"
        "Description: a tool\n multi-line: text\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 1\n"
    )
    site = root / "opt/venv/lib/python3.11/site-packages"
    (site / "torch-2.13.0+cpu.dist-info").mkdir(parents=True)
    (site / "torch").mkdir()
    assert installed_packages(root) == ["curl 7.88 amd64"]
    assert venv_distributions(root) == ["torch-2.13.0+cpu"]
    assert venv_distributions(tmp_path) == []


def test_pip_in_the_image_gets_the_paths_pips_settings_name(tmp_path):
    """This machine's kind: a constraint in /etc/xdg/pip/pip.conf, PIP_FIND_LINKS=/opt/wheels."""
    xdg = tmp_path / "xdg"
    (xdg / "pip").mkdir(parents=True)
    constraints = xdg / "pip" / "constraints.txt"
    constraints.write_text("torch<=2.14.1\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    index = tmp_path / "pypi"
    (index / "simple").mkdir(parents=True)
    (xdg / "pip" / "pip.conf").write_text(
        f"[global]\nconstraint = {constraints}\nextra-index-url = file://{index}/simple\n"
    )
    environ = {
        "XDG_CONFIG_DIRS": str(xdg),
        "HOME": str(tmp_path / "home"),
        "PIP_FIND_LINKS": f"file://{wheels} https://example.org/wheels",
        "PIP_CERT": "/etc",  # never bound over the image's own
        "PIP_INDEX_URL": "https://pypi.example.org/simple",
        "PIP_NO_SUCH_PATH": str(tmp_path / "absent"),
    }
    paths = image._pip_paths(environ)
    assert Path("/etc") not in paths
    # This machine's /etc/pip.conf, should it have one, is bound too.
    assert [path for path in paths if tmp_path in path.parents] == sorted(
        [constraints, xdg / "pip" / "pip.conf", index, wheels], key=os.fspath
    )
