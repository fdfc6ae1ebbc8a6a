"""A small, typed client for slurmrestd's REST API, OpenAPI v0.0.38 (Slurm 22.05).

Pure Python (no Django): the Slurm driver builds on it. Checked against the real Slurm 22.05.8
that deploy/slurm/start.sh runs; the quirks of that version are noted where they matter:

- slurmrestd answers 500 (not 401) when slurmctld refuses the token, with a body that does not
  say so ("Unspecified error", error -1; "Zero Bytes were transmitted or received", 5005; for
  GET /job/{id} even "Unable to find JobId=…"). A stopped slurmctld gives the same bodies.
  The accounting API (slurmdbd) does name the problem (error 1007, "Protocol authentication
  error"), so on such an ambiguous answer the client asks it to tell the two apart.
- Errors are in the body's ``errors`` list, keyed ``error_number`` (``error_code`` for job
  submission, ``errno`` for some), also on 200 answers of the accounting API.
- A job's ``exit_code`` is the raw wait status (768 is exit 3; 9 is killed by SIGKILL), its
  ``gres_detail`` (GPU indices) is filled only while it runs, ``start_time``/``end_time`` are
  estimates until it starts/ends, and ``standard_output`` is the unexpanded pattern.
- The accounting API's ``exit_code`` reads ``SUCCESS``/0 for a job that exited non-zero (sacct
  shows the right code): for such records ``SlurmJob.exit_code`` is None rather than a wrong 0.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

API_VERSION = "v0.0.38"
SLURM_PREFIX = f"/slurm/{API_VERSION}"
SLURMDB_PREFIX = f"/slurmdb/{API_VERSION}"

# Slurm error numbers (slurm/slurm_errno.h) that the client acts on.
ERR_UNSPECIFIED = -1
ERR_AUTHENTICATION = 1007  # SLURM_PROTOCOL_AUTHENTICATION_ERROR
ERR_NODE_CONFIG_UNAVAILABLE = 2014  # ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE
ERR_INVALID_JOB_ID = 2017  # ESLURM_INVALID_JOB_ID
ERR_NOTHING_FOUND = 9003  # slurmdbd: "Nothing found with query"
# Talking to slurmctld/slurmdbd failed (1000-1008 but 1007; SLURMCTLD_COMMUNICATIONS_*): retry.
_COMMUNICATION_ERRORS = frozenset({1000, 1001, 1002, 1003, 1004, 1006, 1008, 1800, 1801, 1802})
# What slurmrestd 22.05 reports both for a refused token and for an unreachable slurmctld:
# "Unspecified error" and the socket errors (5000-5005, "Zero Bytes were transmitted…").
_AMBIGUOUS_ERRORS = frozenset({ERR_UNSPECIFIED, 5000, 5001, 5002, 5003, 5004, 5005})
_TRANSIENT_HTTP = frozenset({502, 503, 504})

# Job states in which Slurm's start/end times are still estimates, and exit codes meaningless.
_NOT_STARTED = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
# COMPLETING: the job is ending (a cancel shows it for a couple of seconds); not over yet.
_NOT_ENDED = _NOT_STARTED | {
    "RUNNING",
    "SUSPENDED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "COMPLETING",
}

DEFAULT_ENVIRONMENT: Mapping[str, str] = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint_of(url: str) -> str:
    """slurmrestd's URL as one key for the cluster behind it: scheme and host lowercased, the
    scheme's default port left out, no trailing slash (names are not resolved: "localhost" and
    "127.0.0.1" stay two keys). ValueError for a URL without a scheme and host."""
    parts = urlsplit(str(url).strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if not scheme or not host:
        raise ValueError(f"not a URL: {url!r}")
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    port = parts.port  # ValueError for a port out of range
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


# --- tokens -----------------------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def make_token(key: bytes, user: str, lifetime_s: int) -> str:
    """An HS256 JWT for `user`, valid for `lifetime_s` seconds, as `scontrol token` makes it.

    Slurm's auth/jwt checks the signature against its ``jwt_key`` and reads the user name from
    the ``sun`` claim and the expiry from ``exp``.
    """
    if lifetime_s <= 0:
        raise ValueError("lifetime_s must be positive")
    now = int(time.time())
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"iat": now, "exp": now + lifetime_s, "sun": user}
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = f"{header}.{payload}".encode("ascii")
    signature = _b64url(hmac.new(key, signing_input, hashlib.sha256).digest())
    return f"{header}.{payload}.{signature}"


# --- errors -----------------------------------------------------------------------------------


class SlurmError(Exception):
    """A failed call. `transient`: the same call may succeed later (retry); otherwise it will not
    (bad credentials, a request Slurm cannot satisfy, an unknown job)."""

    def __init__(
        self,
        message: str,
        transient: bool = False,
        *,
        status_code: int | None = None,
        error_numbers: tuple[int, ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient
        self.status_code = status_code
        self.error_numbers = error_numbers

    @property
    def job_not_found(self) -> bool:
        """Slurm does not know the job (never existed, or finished longer ago than MinJobAge)."""
        return ERR_INVALID_JOB_ID in self.error_numbers

    def __str__(self) -> str:
        return self.message


# --- parsing ----------------------------------------------------------------------------------

# One GRES entry: name[:type][:count][(extra)], e.g. "gpu:a100:4(S:0)" or "gpu(IDX:0,2)".
_GRES_ENTRY = re.compile(
    r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))??(?::(?P<count>\d+))?(?P<extra>(?:\([^)]*\))*)$"
)
_IDX = re.compile(r"IDX:([^)]*)")
UNTYPED_GPU = "gpu"  # the key for GPUs whose GRES has no type ("gpu:4")


def _split_gres(gres: str | None) -> list[str]:
    """Split a GRES string on the commas that are not inside parentheses."""
    if not gres or gres in ("(null)", "N/A"):
        return []
    parts, depth, current = [], 0, []
    for ch in gres:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_gpu_gres(gres: str | None) -> dict[str, int]:
    """GPU counts by model from a node's GRES (`gres` or `gres_used`).

    "gpu:a100:4" -> {"a100": 4}; "gpu:a100:4(S:0)" -> {"a100": 4};
    "gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:3)" -> {"a100": 2, "v100": 1}; "gpu:4" -> {"gpu": 4};
    "gpu:a100:0(IDX:N/A)" -> {"a100": 0}. Other GRES (e.g. "mps:100") are left out.
    """
    gpus: dict[str, int] = {}
    for entry in _split_gres(gres):
        m = _GRES_ENTRY.match(entry)
        if not m or m["name"] != "gpu":
            continue
        model = m["type"] or UNTYPED_GPU
        count = int(m["count"]) if m["count"] is not None else 1
        gpus[model] = gpus.get(model, 0) + count
    return gpus


def parse_index_list(text: str) -> tuple[int, ...]:
    """Slurm's index lists: "0-1,3" -> (0, 1, 3); "N/A" or "" -> ()."""
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part or part == "N/A":
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            indices.extend(range(int(lo), int(hi) + 1))
        else:
            indices.append(int(part))
    return tuple(sorted(set(indices)))


def parse_gpu_indices(gres_detail: list[str] | str | None) -> tuple[int, ...]:
    """GPU indices from a job's `gres_detail`: ["gpu:a100:2(IDX:0-1)"] -> (0, 1);
    "gpu(IDX:0,2)" -> (0, 2). Empty when the job does not run (Slurm clears it at the end)."""
    entries = [gres_detail] if isinstance(gres_detail, str) else list(gres_detail or [])
    indices: list[int] = []
    for detail in entries:
        for entry in _split_gres(detail):
            m = _GRES_ENTRY.match(entry)
            if m and m["name"] == "gpu":
                for idx in _IDX.findall(m["extra"]):
                    indices.extend(parse_index_list(idx))
    return tuple(sorted(set(indices)))


def decode_wait_status(raw: int | None) -> tuple[int | None, int | None]:
    """(exit code, signal) from a raw wait status as slurmctld reports it: 768 -> (3, None),
    9 -> (None, 9) (killed by SIGKILL), 0 -> (0, None)."""
    if raw is None or raw < 0:
        return None, None
    signal = raw & 0x7F
    if signal == 0:
        return (raw >> 8) & 0xFF, None
    if signal == 0x7F:  # stopped, not ended
        return None, None
    return None, signal


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, int | float) or value <= 0:
        return None
    return datetime.fromtimestamp(value, tz=UTC)


def _expand_output_path(pattern: str, job_id: int, name: str, user: str, node: str) -> str:
    """Expand the filename patterns Slurm accepts in --output (%j, %x, %u, %N, %%)."""
    values = {"j": str(job_id), "J": str(job_id), "x": name, "u": user, "N": node, "%": "%"}
    return re.sub(r"%([jJxuN%])", lambda m: values[m[1]], pattern)


# --- data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # Slurm's base state in upper case: IDLE, MIXED, ALLOCATED, DOWN, …
    drained: bool  # DRAIN flag set (draining or drained): takes no new jobs
    cpus: int
    memory_mb: int
    features: tuple[str, ...]
    gpus: dict[str, int]  # model -> count, from GRES "gpu:a100:4"
    gpus_used: dict[str, int]  # model -> count in use, from gres_used
    reason: str = ""

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> SlurmNode:
        flags = {str(f).upper() for f in data.get("state_flags") or ()}
        state = str(data.get("state") or "UNKNOWN").upper()
        features = data.get("active_features") or data.get("features") or ""
        return cls(
            name=str(data["name"]),
            state=state,
            drained="DRAIN" in flags or state.startswith("DRAIN"),
            cpus=int(data.get("cpus") or 0),
            memory_mb=int(data.get("real_memory") or 0),
            features=tuple(f for f in str(features).split(",") if f),
            gpus=parse_gpu_gres(data.get("gres")),
            gpus_used=parse_gpu_gres(data.get("gres_used")),
            reason=str(data.get("reason") or ""),
        )


@dataclass(frozen=True)
class JobRequest:
    """A batch job for POST /job/submit: `nodes` nodes (one task on each), with `gpus` GPUs
    (gres ``gpu[:model]:N``), `cpus_per_task` CPUs and `memory_mb` on each of them."""

    script: str
    working_dir: str
    name: str = "loam"
    partition: str | None = None
    cpus_per_task: int = 1
    memory_mb: int | None = None  # per node; None: Slurm's DefMemPerCPU
    gpus: int = 0
    nodes: int = 1
    gpu_model: str | None = None
    time_limit_min: int | None = None
    constraints: str | None = None  # node features, e.g. a node's own name to pin the job
    standard_output: str | None = None  # path; Slurm's patterns (%j) allowed
    standard_error: str | None = None
    account: str | None = None  # the Slurm account charged; None: the user's default
    qos: str | None = None  # None: the association's default ("normal")
    environment: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ENVIRONMENT))

    def to_api(self) -> dict[str, Any]:
        """The request body, with the key names v0.0.38 accepts (it rejects unknown ones)."""
        job: dict[str, Any] = {
            "name": self.name,
            "tasks": self.nodes,
            "cpus_per_task": self.cpus_per_task,
            "current_working_directory": self.working_dir,
            # v0.0.38 requires an environment; the job gets exactly this one.
            "environment": dict(self.environment),
        }
        if self.nodes > 1:
            # sbatch's --nodes=N --ntasks-per-node=1: all N or none (Slurm starts a job whole).
            job["nodes"] = [self.nodes, self.nodes]
            job["tasks_per_node"] = 1
        if self.partition:
            job["partition"] = self.partition
        if self.memory_mb is not None:
            job["memory_per_node"] = self.memory_mb
        if self.gpus:
            # "gres" is per node in v0.0.38 (it shows up as tres_per_node "gres:gpu:N").
            job["gres"] = (
                f"gpu:{self.gpu_model}:{self.gpus}" if self.gpu_model else f"gpu:{self.gpus}"
            )
        if self.time_limit_min is not None:
            job["time_limit"] = self.time_limit_min
        if self.constraints:
            job["constraints"] = self.constraints
        if self.standard_output:
            job["standard_output"] = self.standard_output
        if self.standard_error:
            job["standard_error"] = self.standard_error
        if self.account:
            job["account"] = self.account
        if self.qos:
            job["qos"] = self.qos
        return {"script": self.script, "job": job}


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, …
    reason: str | None  # why it is pending or failed ("Resources", "NonZeroExitCode"), or None
    node: str | None  # the node(s) it runs/ran on, as Slurm writes them
    gpu_indices: tuple[int, ...]  # while it runs
    exit_code: int | None  # once ended and exited; None when killed by a signal or unknown
    signal: int | None  # the signal that ended it, if any
    start_time: datetime | None  # aware UTC; None until it starts
    end_time: datetime | None  # aware UTC; None until it ends
    standard_output: str | None  # the output file's path, patterns expanded

    @property
    def finished(self) -> bool:
        return self.state not in _NOT_ENDED

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> SlurmJob:
        """From GET /slurm/v0.0.38/job/{id} (slurmctld's view)."""
        job_id = int(data["job_id"])
        state = str(data.get("job_state") or "UNKNOWN").upper()
        name = str(data.get("name") or "")
        node = str(data.get("nodes") or "") or None
        ended = state not in _NOT_ENDED
        exit_code, signal = decode_wait_status(data.get("exit_code")) if ended else (None, None)
        stdout = str(data.get("standard_output") or "")
        cwd = str(data.get("current_working_directory") or "")
        if not stdout and cwd:
            stdout = f"{cwd.rstrip('/')}/slurm-%j.out"  # sbatch's default
        reason = str(data.get("state_reason") or "")
        return cls(
            job_id=job_id,
            name=name,
            state=state,
            reason=None if reason in ("", "None") else reason,
            node=node,
            gpu_indices=parse_gpu_indices(data.get("gres_detail")),
            exit_code=exit_code,
            signal=signal,
            start_time=None if state in _NOT_STARTED else _timestamp(data.get("start_time")),
            end_time=_timestamp(data.get("end_time")) if ended else None,
            standard_output=_expand_output_path(
                stdout, job_id, name, str(data.get("user_name") or ""), (node or "").split(",")[0]
            )
            if stdout
            else None,
        )

    @classmethod
    def from_accounting(cls, data: Mapping[str, Any]) -> SlurmJob:
        """From GET /slurmdb/v0.0.38/job/{id} (slurmdbd's record)."""
        state_info = data.get("state") or {}
        state = str(state_info.get("current") or "UNKNOWN").upper()
        times = data.get("time") or {}
        ended = state not in _NOT_ENDED
        exit_code, signal = None, None
        exit_info = data.get("exit_code") or {}
        status = str(exit_info.get("status") or "")
        if ended and status == "SIGNALED":
            signal = (exit_info.get("signal") or {}).get("signal_id")
        elif ended and status in ("SUCCESS", "FAILED"):
            exit_code = exit_info.get("return_code")
            # 22.05 reports SUCCESS/0 for jobs that exited non-zero: do not pass that on.
            if status == "SUCCESS" and state != "COMPLETED":
                exit_code = None
        reason = str(state_info.get("reason") or "")
        return cls(
            job_id=int(data["job_id"]),
            name=str(data.get("name") or ""),
            state=state,
            reason=None if reason in ("", "None") else reason,
            node=str(data.get("nodes") or "") or None,
            gpu_indices=(),
            exit_code=exit_code,
            signal=signal,
            start_time=None if state in _NOT_STARTED else _timestamp(times.get("start")),
            end_time=_timestamp(times.get("end")) if ended else None,
            standard_output=None,
        )


# --- client -----------------------------------------------------------------------------------


def _slurm_errors(body: Any) -> list[dict[str, Any]]:
    if not isinstance(body, dict):
        return []
    return [e for e in body.get("errors") or () if isinstance(e, dict) and e]


def _error_number(error: Mapping[str, Any]) -> int | None:
    for key in ("error_number", "error_code", "errno"):
        value = error.get(key)
        if isinstance(value, int):
            return value
    return None


def _describe(errors: list[dict[str, Any]]) -> str:
    texts = []
    for e in errors:
        number = _error_number(e)
        text = str(e.get("error") or "")
        description = str(e.get("description") or "")
        if description and description != text:
            text = f"{text}: {description}" if text else description
        texts.append(f"Slurm error {number}: {text}" if number is not None else text)
    return "; ".join(t for t in texts if t) or "no error details"


class SlurmClient:
    """slurmrestd, OpenAPI v0.0.38, with JWT auth.

    Pass either `key` (the cluster's HS256 ``jwt_key``: the client mints its own tokens and
    renews them before they expire) or a ready `token`.
    """

    def __init__(
        self,
        base_url: str,
        user: str,
        key: bytes | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        *,
        token_lifetime_s: int = 3600,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if (key is None) == (token is None):
            raise ValueError("pass exactly one of key and token")
        self.user = user
        self._key = key
        self._token = token
        self._token_lifetime_s = token_lifetime_s
        self._token_expires = 0.0
        self._lock = threading.Lock()
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SlurmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- credentials --

    def _current_token(self) -> str:
        if self._key is None:
            assert self._token is not None
            return self._token
        with self._lock:
            # Renew with a margin, so a token never expires between here and slurmctld.
            margin = min(60.0, self._token_lifetime_s / 4)
            if self._token is None or time.time() > self._token_expires - margin:
                self._token = make_token(self._key, self.user, self._token_lifetime_s)
                self._token_expires = time.time() + self._token_lifetime_s
            return self._token

    def _headers(self) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self._current_token()}

    def _credentials_error(self, detail: str, status_code: int | None) -> SlurmError:
        return SlurmError(
            f"slurmrestd refused the credentials for user {self.user!r} ({detail}); check the "
            "JWT key or token and that the user exists on the cluster",
            transient=False,
            status_code=status_code,
            error_numbers=(ERR_AUTHENTICATION,),
        )

    # -- transport --

    def _raw(self, method: str, path: str, json_body: Any = None) -> tuple[httpx.Response, Any]:
        try:
            response = self._http.request(method, path, json=json_body, headers=self._headers())
        except httpx.TimeoutException as exc:
            raise SlurmError(f"slurmrestd timed out on {method} {path}: {exc}", True) from exc
        except httpx.TransportError as exc:
            raise SlurmError(f"cannot reach slurmrestd for {method} {path}: {exc}", True) from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        return response, body

    def _request(self, method: str, path: str, json_body: Any = None) -> dict[str, Any]:
        """The JSON body of a successful call; SlurmError otherwise. Slurm's "errors" count even
        on a 200 (the accounting API answers 200 with an authentication error)."""
        response, body = self._raw(method, path, json_body)
        status = response.status_code
        errors = _slurm_errors(body)
        what = f"{method} {path}"
        if status in (401, 403):
            raise self._credentials_error(f"HTTP {status}", status)
        if status in _TRANSIENT_HTTP:
            raise SlurmError(
                f"slurmrestd is unavailable (HTTP {status}) for {what}", True, status_code=status
            )
        if body is None or not isinstance(body, dict):
            snippet = response.text[:200]
            raise SlurmError(
                f"slurmrestd answered HTTP {status} without JSON for {what}: {snippet!r}",
                status >= 500,
                status_code=status,
            )
        numbers = tuple(n for n in (_error_number(e) for e in errors) if n is not None)
        if status < 300 and not errors:
            return body
        if ERR_AUTHENTICATION in numbers:
            raise self._credentials_error(_describe(errors), status)
        if status == 404:
            raise SlurmError(
                f"slurmrestd does not serve {what} (HTTP 404; is the openapi "
                f"plugin for {API_VERSION} loaded?)",
                False,
                status_code=status,
            )
        if status == 400:
            raise SlurmError(
                f"slurmrestd rejected {what}: {_describe(errors)}",
                False,
                status_code=status,
                error_numbers=numbers,
            )
        if not numbers or set(numbers) <= _AMBIGUOUS_ERRORS:
            # A refused token or a stopped slurmctld: ask slurmdbd, which names the former.
            if self._credentials_refused():
                raise self._credentials_error(_describe(errors), status)
            raise SlurmError(
                f"slurmctld did not answer {what} ({_describe(errors)}); it may be "
                "down or overloaded",
                True,
                status_code=status,
                error_numbers=numbers,
            )
        transient = bool(set(numbers) & _COMMUNICATION_ERRORS)
        raise SlurmError(
            f"Slurm refused {what}: {_describe(errors)}",
            transient,
            status_code=status,
            error_numbers=numbers,
        )

    def _credentials_refused(self) -> bool:
        """Whether slurmdbd (through slurmrestd) rejects our token. False when it cannot tell."""
        try:
            _, body = self._raw("GET", f"{SLURMDB_PREFIX}/tres")
        except SlurmError:
            return False
        return any(_error_number(e) == ERR_AUTHENTICATION for e in _slurm_errors(body))

    # -- API --

    def ping(self) -> None:
        """Raises SlurmError unless slurmrestd accepts our credentials and slurmctld is UP."""
        body = self._request("GET", f"{SLURM_PREFIX}/ping")
        pings = body.get("pings") or []
        if not any(str(p.get("ping", "")).upper() == "UP" for p in pings):
            raise SlurmError(f"slurmctld is not up: {pings}", True)

    def nodes(self) -> list[SlurmNode]:
        body = self._request("GET", f"{SLURM_PREFIX}/nodes")
        return [SlurmNode.from_api(n) for n in body.get("nodes") or []]

    def submit(self, job: JobRequest) -> int:
        """Submit a batch job; its Slurm job id."""
        body = self._request("POST", f"{SLURM_PREFIX}/job/submit", job.to_api())
        job_id = body.get("job_id")
        if not isinstance(job_id, int):
            raise SlurmError(f"slurmrestd accepted the job but gave no job id: {body}", False)
        return job_id

    def job(self, job_id: int) -> SlurmJob:
        """slurmctld's view of a job (kept MinJobAge after it ends; then `job_not_found`)."""
        body = self._request("GET", f"{SLURM_PREFIX}/job/{int(job_id)}")
        jobs = body.get("jobs") or []
        if not jobs:
            raise SlurmError(
                f"no job {job_id} in slurmctld's answer", False, error_numbers=(ERR_INVALID_JOB_ID,)
            )
        return SlurmJob.from_api(jobs[0])

    def cancel(self, job_id: int) -> None:
        """Cancel a job (SIGTERM, then SIGKILL after KillWait). A finished job is left alone."""
        self._request("DELETE", f"{SLURM_PREFIX}/job/{int(job_id)}")

    def accounting(self, job_id: int) -> SlurmJob | None:
        """slurmdbd's record of a job (start/end times, exit), or None if it has none (yet:
        slurmctld sends it with a short delay)."""
        try:
            body = self._request("GET", f"{SLURMDB_PREFIX}/job/{int(job_id)}")
        except SlurmError as exc:
            if exc.error_numbers == (ERR_NOTHING_FOUND,):
                return None
            raise
        records = [j for j in body.get("jobs") or [] if j.get("job_id") == int(job_id)]
        if not records:
            return None
        # A requeued job has several records: the latest submission is the current one.
        latest = max(records, key=lambda j: (j.get("time") or {}).get("submission") or 0)
        return SlurmJob.from_accounting(latest)
