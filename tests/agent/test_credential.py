import stat

import pytest
from loam_agent.credential import Credential, CredentialError, load_credential, save_credential

CREDENTIAL = Credential(portal_url="https://portal.example.cn", server_id="srv-7", secret="s3cret")


def test_saved_owner_only_and_read_back(tmp_path):
    path = tmp_path / "new-folder" / "credential.json"

    save_credential(path, CREDENTIAL)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_credential(path) == CREDENTIAL
    assert [entry.name for entry in path.parent.iterdir()] == ["credential.json"]


def test_saving_again_replaces_the_file_whole(tmp_path):
    path = tmp_path / "credential.json"
    save_credential(path, CREDENTIAL)
    replacement = Credential(portal_url="https://other.example.cn", server_id="srv-8", secret="x")

    save_credential(path, replacement)

    assert load_credential(path) == replacement
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_file_others_can_read_is_refused(tmp_path):
    path = tmp_path / "credential.json"
    save_credential(path, CREDENTIAL)
    path.chmod(0o644)

    with pytest.raises(CredentialError, match="chmod 600"):
        load_credential(path)


def test_a_missing_file_says_to_enrol(tmp_path):
    with pytest.raises(CredentialError, match="enrol this server first"):
        load_credential(tmp_path / "credential.json")


def test_the_secret_stays_out_of_its_repr():
    assert "s3cret" not in repr(CREDENTIAL)
