"""Secrets stay out of output and files (`redact`), and a local Ray run refuses clients without its token."""
from __future__ import annotations

import os
import subprocess
import traceback
import sys

import pytest
import ray

from oracle_search.cli import main
from oracle_search.cluster import connect
from oracle_search.security import redact

@pytest.mark.parametrize("url, expected", [
    ("postgresql+psycopg2://optuna:s3cret@127.0.0.1:5432/optuna", "postgresql+psycopg2://optuna:***@127.0.0.1:5432/optuna"),
    ("postgresql://u:p@ss/w:rd@db.internal/x", "postgresql://u:***@db.internal/x"),  # '@' and '/' in the password
    ("mysql://root:@localhost/db", "mysql://root:@localhost/db"),  # an empty password: nothing to hide
    ("postgresql://optuna@127.0.0.1/optuna", "postgresql://optuna@127.0.0.1/optuna"),
    ("postgresql://h/db?user=u&password=hunter2&sslmode=require", "postgresql://h/db?user=u&password=***&sslmode=require"),
    ("s3://bucket/run?access_key=AKIA1&secret_key=abc/def&region=us-west-2",
     "s3://bucket/run?access_key=***&secret_key=***&region=us-west-2"),
    ("s3://AKIA1:abc@bucket/run", "s3://AKIA1:***@bucket/run"),
    ("s3://YOUR-BUCKET/oracle-search", "s3://YOUR-BUCKET/oracle-search"),
    ("/shared/tune", "/shared/tune"),
    ("sqlite:///out/optuna.db", "sqlite:///out/optuna.db"),
])
def test_redact_hides_passwords_and_secret_parameters_only(url, expected):
    assert redact(url) == expected


def test_a_failing_study_storage_does_not_leak_its_password(tmp_path, capfd):
    url = "postgresql+psycopg2://optuna:leak-me-not-42@127.0.0.1:1/optuna"  # nothing listens on port 1
    out = tmp_path / "out"
    try:
        code = main(["fit-silo", "--preset", "tiny", "--trials", "1", "--study-storage", url, "--out", str(out)])
        shown = ""
    except Exception as err:  # the command line prints one line, then re-raises for the traceback: shown too
        code, shown = 1, "".join(traceback.format_exception(err))
    captured = capfd.readouterr()
    assert code != 0
    assert "leak-me-not-42" not in captured.out + captured.err + shown
    assert not [p for p in out.rglob("*") if p.is_file() and b"leak-me-not-42" in p.read_bytes()]


@pytest.fixture
def local_ray(monkeypatch):
    """A local Ray as the command line starts it (`connect` without an address), not the tests' shared one: this
    process leaves the shared one (a disconnect; conftest reconnects it afterwards) and stops only its own."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if ray.is_initialized():
        ray.shutdown()  # a disconnect: the shared local Ray belongs to its Cluster fixture and stays up
    connect(None)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()  # this one this test started


def gcs_reply(address: str, **env: str) -> subprocess.CompletedProcess:
    """Ask the GCS at `address` for its keys from a fresh process with the given auth environment."""
    code = ("from ray._raylet import GcsClient\n"
            f"print('keys', len(GcsClient(address={address!r}).internal_kv_keys(b'', None, timeout=10)))")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return subprocess.run([sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_local_ray_has_no_dashboard_and_refuses_clients_without_its_token(local_ray):
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    assert is_token_auth_enabled()
    assert not ray._private.worker._global_node.address_info.get("webui_url")  # no dashboard, no job API
    for env in ({"RAY_AUTH_MODE": "disabled"}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "guessed"}):
        refused = gcs_reply(local_ray, **env)
        assert refused.returncode != 0 and "AuthenticationError" in refused.stderr, env
    allowed = gcs_reply(local_ray, RAY_AUTH_MODE="token")  # the token in ~/.ray/auth_token
    assert allowed.returncode == 0 and allowed.stdout.startswith("keys "), allowed.stderr
