"""Where the slurmrestd token comes from, and that it never shows (no Slurm needed).

SSM and Secrets Manager through moto (in process); GCP Secret Manager through a session that
answers like its REST API (``:access`` -> ``payload.data`` base64).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from topocast.slurm.rest import SlurmRest, SlurmRestError, updater_from_cli
from topocast.slurm.rest_token import SlurmToken, TokenError, read_token, token_from_text


def jwt(user: str) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sun': user, 'exp': 2, 'iat': 1})}.c2lnbmF0dXJl"


TOKEN = jwt("slurm")


def test_a_file_holding_what_scontrol_token_prints(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text(f"SLURM_JWT={TOKEN}\n")
    path.chmod(0o600)
    for source in (str(path), f"file://{path}"):
        token = read_token(source)
        assert token.value == TOKEN and token.user == "slurm"
        assert token.headers() == {"X-SLURM-USER-TOKEN": TOKEN, "X-SLURM-USER-NAME": "slurm"}
        assert TOKEN not in repr(token) and TOKEN not in str(token) and TOKEN not in f"{token!r} {[token]}"


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text(TOKEN)
    path.chmod(0o644)
    with pytest.raises(TokenError, match="readable by other users") as info:
        read_token(str(path))
    assert TOKEN not in str(info.value)


def test_ssm_securestring_and_secrets_manager_by_name_and_arn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        boto3.client("ssm").put_parameter(Name="/slurm/jwt", Value=f"SLURM_JWT={TOKEN}", Type="SecureString")
        arn = boto3.client("secretsmanager").create_secret(Name="slurm-jwt", SecretString=TOKEN)["ARN"]
        for source in ("ssm:///slurm/jwt", "secretsmanager://slurm-jwt", arn):
            assert read_token(source).value == TOKEN, source
        with pytest.raises(TokenError, match="ssm:///missing: cannot read the token"):
            read_token("ssm:///missing")


class FakeGsm:
    def __init__(self, payload: str, status: int = 200) -> None:
        self.payload, self.status, self.urls = payload, status, []  # type: ignore[var-annotated]

    def get(self, url: str, timeout: float, allow_redirects: bool = True) -> Any:
        assert not allow_redirects  # the credential is never carried to another host
        self.urls.append(url)
        data = {"payload": {"data": base64.b64encode(self.payload.encode()).decode()}}
        return type("Resp", (), {"status_code": self.status, "json": lambda _self: data})()


def test_gcp_secret_manager_latest_or_a_version() -> None:
    gsm = FakeGsm(TOKEN)
    assert read_token("gsm://projects/p1/secrets/slurm-jwt", gcp_session=gsm).value == TOKEN
    assert read_token("gsm://projects/p1/secrets/slurm-jwt/versions/3", gcp_session=gsm).user == "slurm"
    assert gsm.urls == [
        "https://secretmanager.googleapis.com/v1/projects/p1/secrets/slurm-jwt/versions/latest:access",
        "https://secretmanager.googleapis.com/v1/projects/p1/secrets/slurm-jwt/versions/3:access",
    ]
    with pytest.raises(TokenError, match="HTTP 403"):
        read_token("gsm://projects/p1/secrets/slurm-jwt", gcp_session=FakeGsm(TOKEN, 403))
    with pytest.raises(TokenError, match="expected gsm://projects/PROJECT/secrets/SECRET"):
        read_token("gsm://p1/slurm-jwt")


def test_bad_sources_and_flags_are_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(TokenError, match="unsupported token source"):
        read_token("vault://x")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    os.chmod(empty, 0o600)
    with pytest.raises(TokenError, match="does not hold one token"):
        read_token(str(empty))
    with pytest.raises(Exception, match="--token-from needs --via"):
        updater_from_cli(None, "x")
    with pytest.raises(Exception, match="needs --token-from"):
        updater_from_cli(["slurmrestd", "http://127.0.0.1:1"], None)
    with pytest.raises(SlurmRestError, match="not an http"):
        SlurmRest("unix:/run/x", SlurmToken(TOKEN))


def test_an_unreachable_server_names_the_url_not_the_token() -> None:
    from topocast.slurm.rest import connect

    with pytest.raises(
        SlurmRestError, match=r"slurmrestd http://127.0.0.1:9: GET diag \(token check\): cannot connect"
    ) as info:
        connect("http://127.0.0.1:9", SlurmToken(TOKEN, "slurm"), timeout=2)
    assert TOKEN not in str(info.value)


# ----- issue 29: expiry, characters a header cannot carry, empty sources ------------------------------


def jwt_expiring(exp: int) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256'})}.{part({'sun': 'slurm', 'exp': exp})}.c2lnbmF0dXJl"


def refusing_slurmrestd(h: Any) -> None:
    """What slurmrestd 26.05 answers a token slurmctld does not accept (diag, HTTP 401, error 1007)."""
    body = json.dumps({"errors": [{"error_number": 1007, "error": "Protocol authentication error"}]}).encode()
    h.send_response(401)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def test_an_expired_token_is_named_with_its_expiry_and_warned_about_before_sending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from http_fixtures import serve

    from topocast.slurm.rest import connect

    expired = token_from_text(jwt_expiring(1_767_225_600), "test")  # 2026-01-01 00:00:00 UTC
    assert expired.expires is not None and expired.expires.isoformat() == "2026-01-01T00:00:00+00:00"
    with serve(refusing_slurmrestd) as (url, seen), pytest.raises(SlurmRestError) as info:
        connect(url, expired, version="v0.0.45", timeout=5)
    assert "the token for user slurm was refused: it expired at 2026-01-01 00:00:00 UTC" in str(info.value)
    assert "HTTP 401" in str(info.value) and len(seen) == 1
    assert any("expired at 2026-01-01 00:00:00 UTC" in r.getMessage() for r in caplog.records)


def test_a_token_refused_before_its_expiry_is_a_wrong_key_or_user() -> None:
    from http_fixtures import serve

    from topocast.slurm.rest import connect

    valid = token_from_text(jwt_expiring(4_102_444_800), "test")  # 2100
    with serve(refusing_slurmrestd) as (url, _), pytest.raises(SlurmRestError) as info:
        connect(url, valid, version="v0.0.45", timeout=5)
    assert "the token for user slurm was refused (wrong key or user) (HTTP 401: error 1007" in str(info.value)
    assert "expired" not in str(info.value)


def test_a_token_with_a_character_no_header_carries_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text("SLURM_JWT=eyJ\u00e9abc\n")
    path.chmod(0o600)
    with pytest.raises(TokenError, match=r"not printable ASCII \(at position 4\); not a Slurm token") as info:
        read_token(str(path))
    assert "eyJ" not in str(info.value).replace(str(path), "")


def test_empty_secret_names_are_one_line() -> None:
    for source in ("secretsmanager://", "secretsmanager:///", "ssm:///", "ssm://"):
        with pytest.raises(TokenError) as info:
            read_token(source)
        assert "\n" not in str(info.value) and str(info.value).startswith(f"{source}: expected"), info.value
