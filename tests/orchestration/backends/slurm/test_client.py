"""The slurmrestd client: pure unit tests, then tests against the real test cluster
(marked `slurm`; see conftest.py)."""

import base64
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from apps.orchestration.backends.slurm.client import (
    JobRequest,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
    decode_wait_status,
    endpoint_of,
    make_token,
    parse_gpu_gres,
    parse_gpu_indices,
    parse_index_list,
)

# --- pure unit tests ---------------------------------------------------------------------------


def _b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_make_token_is_an_hs256_jwt_with_slurm_claims():
    before = int(time.time())
    token = make_token(b"secret-key", "alice", 600)
    header, payload, signature = token.split(".")
    assert json.loads(_b64decode(header)) == {"alg": "HS256", "typ": "JWT"}
    claims = json.loads(_b64decode(payload))
    assert claims["sun"] == "alice"
    assert before <= claims["iat"] <= int(time.time())
    assert claims["exp"] == claims["iat"] + 600
    expected = hmac.new(b"secret-key", f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert _b64decode(signature) == expected
    assert "=" not in token


def test_make_token_rejects_a_non_positive_lifetime():
    with pytest.raises(ValueError):
        make_token(b"k", "alice", 0)


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:a100:4", {"a100": 4}),
        ("gpu:a100:4(S:0)", {"a100": 4}),
        ("gpu:a100:4(S:0-1)", {"a100": 4}),
        ("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:3)", {"a100": 2, "v100": 1}),
        ("gpu:a100:0(IDX:N/A)", {"a100": 0}),
        ("gpu:4", {"gpu": 4}),
        ("mps:100,gpu:h100:8", {"h100": 8}),
        ("(null)", {}),
        ("", {}),
        (None, {}),
    ],
)
def test_parse_gpu_gres(gres, expected):
    assert parse_gpu_gres(gres) == expected


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        (["gpu:a100:2(IDX:0-1)"], (0, 1)),
        (["gpu:a100:1(IDX:2)"], (2,)),
        ("gpu(IDX:0,2)", (0, 2)),
        (["gpu:a100:3(IDX:0-1,3)"], (0, 1, 3)),
        (["gpu:a100(CNT:2)(IDX:1,3)"], (1, 3)),
        (["gpu:a100:0(IDX:N/A)"], ()),
        ([], ()),
        (None, ()),
    ],
)
def test_parse_gpu_indices(detail, expected):
    assert parse_gpu_indices(detail) == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6820",
        "HTTP://127.0.0.1:6820/",
        " http://127.0.0.1:6820// ",
    ],
)
def test_endpoint_of_names_one_slurmrestd_however_its_url_is_spelled(url):
    assert endpoint_of(url) == "http://127.0.0.1:6820"


def test_endpoint_of_leaves_out_the_default_port_and_keeps_a_path():
    assert endpoint_of("https://Slurm.Example:443/rest/") == "https://slurm.example/rest"
    assert endpoint_of("http://slurm.example:80") == "http://slurm.example"
    assert endpoint_of("http://[::1]:6820") == "http://[::1]:6820"
    # Names are not resolved: two spellings of one machine stay two keys.
    assert endpoint_of("http://localhost:6820") != endpoint_of("http://127.0.0.1:6820")


@pytest.mark.parametrize("url", ["slurm-head:6820", "not a url", "http://h:99999"])
def test_endpoint_of_refuses_what_is_not_a_url(url):
    with pytest.raises(ValueError):
        endpoint_of(url)


def test_parse_index_list():
    assert parse_index_list("0-2,5") == (0, 1, 2, 5)
    assert parse_index_list("N/A") == ()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (0, (0, None)),
        (768, (3, None)),
        (256, (1, None)),
        (9, (None, 9)),
        (15, (None, 15)),
        (None, (None, None)),
    ],
)
def test_decode_wait_status(raw, expected):
    assert decode_wait_status(raw) == expected


def test_node_from_api_reads_gpus_features_and_drain():
    node = SlurmNode.from_api(
        {
            "name": "gpu-node2",
            "state": "mixed",
            "state_flags": ["DRAIN"],
            "cpus": 16,
            "real_memory": 64000,
            "features": "gpu-node2,a100",
            "active_features": "gpu-node2,a100",
            "gres": "gpu:a100:4",
            "gres_used": "gpu:a100:3(IDX:0-2)",
            "reason": "maintenance",
        }
    )
    assert node.state == "MIXED" and node.drained
    assert node.features == ("gpu-node2", "a100")
    assert node.gpus == {"a100": 4} and node.gpus_used == {"a100": 3}
    assert (node.cpus, node.memory_mb) == (16, 64000)


def test_job_from_api_ignores_estimates_and_expands_the_output_path():
    running = SlurmJob.from_api(
        {
            "job_id": 7,
            "name": "t",
            "job_state": "RUNNING",
            "nodes": "gpu-node1",
            "gres_detail": ["gpu:a100:2(IDX:1-2)"],
            "exit_code": 0,
            "start_time": 1_700_000_000,
            "end_time": 1_700_003_600,
            "standard_output": "/jobs/%x-%j.out",
            "state_reason": "None",
        }
    )
    assert running.start_time == datetime.fromtimestamp(1_700_000_000, tz=UTC)
    assert running.end_time is None and running.exit_code is None  # estimates until it ends
    assert running.gpu_indices == (1, 2)
    assert running.standard_output == "/jobs/t-7.out"
    assert running.reason is None and not running.finished

    pending = SlurmJob.from_api(
        {
            "job_id": 8,
            "job_state": "PENDING",
            "start_time": 1_700_000_000,
            "end_time": 0,
            "standard_output": "",
            "current_working_directory": "/jobs",
        }
    )
    assert pending.start_time is None
    assert pending.standard_output == "/jobs/slurm-8.out"  # sbatch's default

    failed = SlurmJob.from_api(
        {
            "job_id": 9,
            "job_state": "FAILED",
            "exit_code": 768,
            "state_reason": "NonZeroExitCode",
            "end_time": 1_700_000_010,
        }
    )
    assert (failed.exit_code, failed.signal, failed.reason) == (3, None, "NonZeroExitCode")
    assert failed.finished and failed.end_time is not None


def test_job_from_accounting_does_not_trust_success_for_a_failed_job():
    def record(state, exit_code):
        return {
            "job_id": 4,
            "name": "t",
            "state": {"current": state, "reason": "None"},
            "exit_code": exit_code,
            "nodes": "gpu-node2",
            "time": {"start": 1_700_000_000, "end": 1_700_000_005, "submission": 1},
        }

    failed = SlurmJob.from_accounting(record("FAILED", {"status": "SUCCESS", "return_code": 0}))
    assert failed.exit_code is None  # Slurm 22.05 reports SUCCESS/0 for `exit 3`
    assert failed.end_time == datetime.fromtimestamp(1_700_000_005, tz=UTC)
    done = SlurmJob.from_accounting(record("COMPLETED", {"status": "SUCCESS", "return_code": 0}))
    assert done.exit_code == 0
    killed = SlurmJob.from_accounting(
        record(
            "FAILED",
            {
                "status": "SIGNALED",
                "return_code": None,
                "signal": {"signal_id": 9, "name": "Killed"},
            },
        )
    )
    assert (killed.exit_code, killed.signal) == (None, 9)


def test_job_request_uses_the_v0_0_38_keys():
    body = JobRequest(
        script="#!/bin/bash\ntrue\n",
        working_dir="/jobs",
        name="n",
        gpus=2,
        gpu_model="a100",
        memory_mb=2048,
        time_limit_min=5,
        constraints="gpu-node2",
        partition="gpu",
        standard_output="/jobs/%j.out",
    ).to_api()
    assert body["script"].startswith("#!")
    assert body["job"] == {
        "name": "n",
        "tasks": 1,
        "cpus_per_task": 1,
        "current_working_directory": "/jobs",
        "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
        "partition": "gpu",
        "memory_per_node": 2048,
        "gres": "gpu:a100:2",
        "time_limit": 5,
        "constraints": "gpu-node2",
        "standard_output": "/jobs/%j.out",
    }


def _client_answering(handler) -> SlurmClient:
    return SlurmClient(
        "http://slurm.test", "alice", key=b"k" * 32, transport=httpx.MockTransport(handler)
    )


@pytest.mark.parametrize(
    ("status", "body", "transient", "text"),
    [
        (503, {}, True, "unavailable"),
        (502, {}, True, "unavailable"),
        (401, None, False, "refused the credentials"),
        (403, None, False, "refused the credentials"),
        (
            500,
            {
                "errors": [
                    {"error_code": 2014, "error": "Requested node configuration is not available"}
                ]
            },
            False,
            "Requested node configuration is not available",
        ),
        (
            500,
            {"errors": [{"error_number": 1001, "error": "Unable to contact slurm controller"}]},
            True,
            "Unable to contact",
        ),
        (
            400,
            {
                "errors": [
                    {"description": 'Unknown key "x"', "source": "hsearch_r"},
                    {"error_code": 9001, "error": "Failure during parsing"},
                ]
            },
            False,
            'Unknown key "x"',
        ),
    ],
)
def test_http_errors_are_classified(status, body, transient, text):
    def handler(request):
        if body is None:
            return httpx.Response(status, text="Authentication failure")
        return httpx.Response(status, json=body)

    with _client_answering(handler) as client, pytest.raises(SlurmError) as info:
        client.nodes()
    assert info.value.transient is transient
    assert text in str(info.value)


def test_an_ambiguous_500_is_a_credentials_error_when_slurmdbd_says_so():
    """slurmrestd 22.05 hides a refused token behind "Unspecified error"; slurmdbd names it."""

    def handler(request):
        if request.url.path == "/slurmdb/v0.0.38/tres":
            return httpx.Response(
                200,
                json={"errors": [{"error_number": 1007, "error": "Protocol authentication error"}]},
            )
        return httpx.Response(500, json={"errors": [{"error": "Unspecified error", "errno": -1}]})

    with _client_answering(handler) as client, pytest.raises(SlurmError) as info:
        client.nodes()
    assert not info.value.transient
    assert "refused the credentials" in str(info.value)


def test_an_ambiguous_500_is_transient_when_the_credentials_are_fine():
    """The same body when slurmctld is down: retry later."""

    def handler(request):
        if request.url.path == "/slurmdb/v0.0.38/tres":
            return httpx.Response(200, json={"errors": [], "TRES": []})
        return httpx.Response(500, json={"errors": [{"error": "Unspecified error", "errno": -1}]})

    with _client_answering(handler) as client, pytest.raises(SlurmError) as info:
        client.nodes()
    assert info.value.transient


def test_connection_errors_are_transient():
    def handler(request):
        raise httpx.ConnectError("connection refused", request=request)

    with _client_answering(handler) as client, pytest.raises(SlurmError) as info:
        client.ping()
    assert info.value.transient


def test_the_client_sends_and_renews_its_token():
    seen = []

    def handler(request):
        seen.append((request.headers["X-SLURM-USER-NAME"], request.headers["X-SLURM-USER-TOKEN"]))
        return httpx.Response(200, json={"errors": [], "pings": [{"ping": "UP"}]})

    client = SlurmClient(
        "http://slurm.test",
        "alice",
        key=b"k" * 32,
        token_lifetime_s=2,
        transport=httpx.MockTransport(handler),
    )
    with client:
        client.ping()
        client.ping()
        assert seen[0] == seen[1]  # reused while fresh
        time.sleep(1.6)  # within the renewal margin (a quarter of the lifetime)
        client.ping()
    assert seen[0][0] == "alice"
    assert seen[2][1] != seen[0][1]
    claims = json.loads(_b64decode(seen[2][1].split(".")[1]))
    assert claims["sun"] == "alice"


def test_key_or_token_but_not_both():
    with pytest.raises(ValueError):
        SlurmClient("http://slurm.test", "alice")
    with pytest.raises(ValueError):
        SlurmClient("http://slurm.test", "alice", key=b"k", token="t")


# --- against the test cluster -------------------------------------------------------------------

JOB_WAIT_S = 20


def _wait(client, job_id, states, limit=JOB_WAIT_S, poll=0.2):
    end = time.monotonic() + limit
    while True:
        job = client.job(job_id)
        if job.state in states:
            return job
        if time.monotonic() > end:
            pytest.fail(f"job {job_id} is {job.state} ({job.reason}), never reached {states}")
        time.sleep(poll)


def _request(cluster, script, **kwargs):
    kwargs.setdefault("name", "loam-test")
    kwargs.setdefault("time_limit_min", 2)
    kwargs.setdefault("standard_output", str(cluster.jobs_dir / "test-%j.out"))
    return JobRequest(script=script, working_dir=str(cluster.jobs_dir), **kwargs)


@pytest.mark.slurm
def test_the_token_works(slurm):
    slurm.ping()


@pytest.mark.slurm
def test_a_ready_made_token_works(slurm_cluster):
    token = make_token(slurm_cluster.key, slurm_cluster.user, 60)
    with SlurmClient(slurm_cluster.url, slurm_cluster.user, token=token) as client:
        assert client.nodes()


@pytest.mark.slurm
@pytest.mark.parametrize("method", ["nodes", "submit", "job"])
def test_a_bad_token_is_a_non_transient_error(slurm_cluster, method):
    wrong_key = SlurmClient(slurm_cluster.url, slurm_cluster.user, key=b"not-the-key" * 3)
    args = {"nodes": (), "submit": (_request(slurm_cluster, "#!/bin/bash\ntrue\n"),), "job": (1,)}
    with wrong_key, pytest.raises(SlurmError) as info:
        getattr(wrong_key, method)(*args[method])
    assert not info.value.transient
    assert "slurmrestd refused the credentials" in str(info.value)


@pytest.mark.slurm
def test_nodes(slurm):
    nodes = {n.name: n for n in slurm.nodes()}
    assert sorted(nodes) == ["gpu-node1", "gpu-node2", "gpu-node3"]
    for name, node in nodes.items():
        assert node.gpus == {"a100": 4}
        assert name in node.features
        assert node.cpus == 16 and node.memory_mb == 64000
        assert not node.drained
        assert node.state in {"IDLE", "MIXED", "ALLOCATED"}


@pytest.mark.slurm
def test_a_gpu_job_pinned_to_a_node(slurm, slurm_cluster):
    job_id = slurm.submit(
        _request(
            slurm_cluster,
            "#!/bin/bash\necho CUDA=$CUDA_VISIBLE_DEVICES\nsleep 2\n",
            gpus=2,
            constraints="gpu-node2",
            cpus_per_task=2,
            memory_mb=1024,
        )
    )
    # The job sleeps 2 s: long enough to be seen running (gres_detail is only there meanwhile).
    running = _wait(slurm, job_id, {"RUNNING", "COMPLETED", "FAILED"}, poll=0.1)
    assert running.state == "RUNNING"
    assert running.node == "gpu-node2"
    assert len(running.gpu_indices) == 2
    assert running.start_time is not None and running.end_time is None
    assert {n.name: n for n in slurm.nodes()}["gpu-node2"].gpus_used["a100"] >= 2
    done = _wait(slurm, job_id, {"COMPLETED", "FAILED"})
    assert (done.state, done.exit_code, done.node) == ("COMPLETED", 0, "gpu-node2")
    assert done.standard_output == str(slurm_cluster.jobs_dir / f"test-{job_id}.out")
    output = Path(done.standard_output).read_text()
    assert output.startswith("CUDA=")
    visible = output.strip().removeprefix("CUDA=").split(",")
    assert tuple(int(i) for i in visible) == running.gpu_indices


@pytest.mark.slurm
def test_a_failing_job_reports_its_exit_code(slurm, slurm_cluster):
    job_id = slurm.submit(_request(slurm_cluster, "#!/bin/bash\nexit 3\n"))
    job = _wait(slurm, job_id, {"COMPLETED", "FAILED"})
    assert (job.state, job.exit_code, job.signal) == ("FAILED", 3, None)
    assert job.reason == "NonZeroExitCode"
    assert job.start_time is not None and job.end_time is not None


@pytest.mark.slurm
def test_cancel(slurm, slurm_cluster):
    job_id = slurm.submit(_request(slurm_cluster, "#!/bin/bash\nsleep 60\n"))
    _wait(slurm, job_id, {"RUNNING"})
    slurm.cancel(job_id)
    job = _wait(slurm, job_id, {"CANCELLED"})
    assert job.end_time is not None
    slurm.cancel(job_id)  # again: a finished job is left alone


@pytest.mark.slurm
def test_accounting_has_the_times_of_a_finished_job(slurm, slurm_cluster):
    job_id = slurm.submit(_request(slurm_cluster, "#!/bin/bash\nsleep 1\n"))
    live = _wait(slurm, job_id, {"COMPLETED", "FAILED"})
    end = time.monotonic() + 10  # slurmctld sends the record to slurmdbd with a short delay
    while (record := slurm.accounting(job_id)) is None or record.end_time is None:
        assert time.monotonic() < end, f"no finished accounting record for job {job_id}"
        time.sleep(0.3)
    assert record.job_id == job_id and record.state == "COMPLETED"
    assert record.exit_code == 0 and record.node == live.node
    assert record.start_time is not None and record.start_time.tzinfo is UTC
    assert record.end_time >= record.start_time
    assert abs((record.start_time - live.start_time).total_seconds()) <= 1


@pytest.mark.slurm
def test_accounting_of_an_unknown_job_is_none(slurm):
    assert slurm.accounting(987_654_321) is None


@pytest.mark.slurm
def test_an_unknown_job(slurm):
    with pytest.raises(SlurmError) as info:
        slurm.job(987_654_321)
    assert info.value.job_not_found and not info.value.transient


@pytest.mark.slurm
def test_an_impossible_request_is_a_non_transient_error(slurm, slurm_cluster):
    with pytest.raises(SlurmError) as info:
        slurm.submit(_request(slurm_cluster, "#!/bin/bash\ntrue\n", gpus=64))
    assert not info.value.transient
    assert 2014 in info.value.error_numbers
    assert "Requested node configuration is not available" in str(info.value)
