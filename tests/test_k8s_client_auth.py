"""Kubernetes connection modes, EKS/GKE tokens, the rate limiter and Retry-After parsing."""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import pytest
from k8s_fake_apiserver import FakeKubeApiServer
from lightkube.resources.core_v1 import Node
from pydantic import ValidationError
from tls_helpers import self_signed_cert

from topocast.k8s import auth
from topocast.k8s.auth import (
    KubernetesAuthError,
    RefreshingTokenSource,
    eks_cluster_endpoint,
    eks_token,
    gke_cluster_endpoint,
    make_gke_token_source,
)
from topocast.k8s.client import ClientSettings, K8sConnection, TokenBucket, build_client, retry_after_seconds

AK, SK = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
FIXED = dt.datetime(2026, 3, 4, 5, 6, 7)


# ----- EKS token -------------------------------------------------------------------------------------------


@pytest.fixture
def frozen_sigv4_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.auth

    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: FIXED)


def decode_token(token: str) -> str:
    assert token.startswith("k8s-aws-v1.")
    body = token.removeprefix("k8s-aws-v1.")
    assert "=" not in body  # base64url without padding
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def sigv4_by_hand(url: str, cluster: str, secret: str, region: str) -> str:
    """The SigV4 query signature STS will recompute (independent of botocore)."""
    parts = urlsplit(url)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    params.pop("X-Amz-Signature")
    enc = lambda s: quote(s, safe="-_.~")  # noqa: E731
    query = "&".join(f"{enc(k)}={enc(v)}" for k, v in sorted(params.items()))
    headers = f"host:{parts.netloc}\nx-k8s-aws-id:{cluster}\n"
    payload = hashlib.sha256(b"").hexdigest()
    canonical = "\n".join(["GET", parts.path or "/", query, headers, "host;x-k8s-aws-id", payload])
    stamp = params["X-Amz-Date"]
    scope = f"{stamp[:8]}/{region}/sts/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{secret}".encode()
    for part in (stamp[:8], region, "sts", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def test_eks_token_is_a_presigned_sts_get_caller_identity_url(frozen_sigv4_clock: None) -> None:
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    token = eks_token("gpu-prod", "us-west-2", Credentials(AK, SK))

    url = decode_token(token)
    parts = urlsplit(url)
    params = dict(parse_qsl(parts.query))
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == "https://sts.us-west-2.amazonaws.com/"
    assert parts.query.startswith("Action=GetCallerIdentity&Version=2011-06-15&")
    assert params["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert params["X-Amz-Credential"] == f"{AK}/20260304/us-west-2/sts/aws4_request"
    assert params["X-Amz-Date"] == "20260304T050607Z"
    assert params["X-Amz-Expires"] == "60"
    assert params["X-Amz-SignedHeaders"] == "host;x-k8s-aws-id"
    assert params["X-Amz-Signature"] == sigv4_by_hand(url, "gpu-prod", SK, "us-west-2")
    # botocore's own signer, same credentials and clock, produces the same URL
    again = AWSRequest(
        method="GET",
        url="https://sts.us-west-2.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
        headers={"x-k8s-aws-id": "gpu-prod"},
    )
    SigV4QueryAuth(Credentials(AK, SK), "sts", "us-west-2", expires=60).add_auth(again)
    assert again.url == url
    # the cluster name is really signed: another cluster gives another signature
    other = dict(parse_qsl(urlsplit(decode_token(eks_token("gpu-dev", "us-west-2", Credentials(AK, SK)))).query))
    assert other["X-Amz-Signature"] != params["X-Amz-Signature"]


def test_eks_token_carries_the_session_token_of_temporary_credentials(frozen_sigv4_clock: None) -> None:
    from botocore.credentials import Credentials

    url = decode_token(eks_token("c", "eu-central-1", Credentials(AK, SK, "SESSION/TOKEN")))

    params = dict(parse_qsl(urlsplit(url).query))
    assert params["X-Amz-Security-Token"] == "SESSION/TOKEN"
    assert params["X-Amz-Signature"] == sigv4_by_hand(url, "c", SK, "eu-central-1")


def test_eks_token_source_refreshes_before_the_60s_url_expires() -> None:
    now = [1000.0]
    minted: list[float] = []

    def fetch() -> tuple[str, float]:
        minted.append(now[0])
        return f"t{len(minted)}", now[0] + 60

    source = RefreshingTokenSource(fetch, refresh_margin=15, clock=lambda: now[0])
    assert source.token() == "t1"
    now[0] += 44
    assert source.token() == "t1"  # still 16 s of validity left
    now[0] += 1
    assert source.token() == "t2"  # within the margin: mint a new one
    source.invalidate()
    assert source.token() == "t3"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": AK,
        "AWS_SECRET_ACCESS_KEY": SK,
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        server.add_node("n1", {"kubernetes.io/hostname": "n1"})
        yield server


def test_eks_mode_sends_the_eks_token_from_the_default_credential_chain(aws_env: None, fake: FakeKubeApiServer) -> None:
    conn = K8sConnection(eks_cluster="gpu-prod", region="us-west-2", endpoint=fake.url)
    assert conn.resolved_auth() == "eks"

    kc = build_client(conn)
    try:
        assert [n.metadata.name for n in kc.lk.list(Node)] == ["n1"]
    finally:
        kc.close()

    header = fake.requests[0].authorization
    assert header.startswith("Bearer k8s-aws-v1.")
    url = decode_token(header.removeprefix("Bearer "))
    assert urlsplit(url).netloc == "sts.us-west-2.amazonaws.com"
    assert dict(parse_qsl(urlsplit(url).query))["X-Amz-Credential"].startswith(f"{AK}/")


def test_eks_endpoint_and_ca_come_from_describe_cluster(aws_env: None) -> None:
    import boto3
    from moto import mock_aws

    with mock_aws():
        eks = boto3.client("eks", region_name="us-west-2")
        eks.create_cluster(name="gpu-prod", roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={})
        described = eks.describe_cluster(name="gpu-prod")["cluster"]

        found = eks_cluster_endpoint("gpu-prod", "us-west-2")

        assert found.endpoint == described["endpoint"].rstrip("/")
        assert found.ca_data == described["certificateAuthority"]["data"]
        with pytest.raises(KubernetesAuthError, match="eks:DescribeCluster 'nope' in us-west-2"):
            eks_cluster_endpoint("nope", "us-west-2")


def test_missing_aws_credentials_are_reported_by_cluster_name() -> None:
    class NoCreds:
        def get_credentials(self) -> None:
            return None

    source = auth.make_eks_token_source("gpu-prod", "us-west-2", session=NoCreds())
    with pytest.raises(KubernetesAuthError, match="'gpu-prod': no AWS credentials"):
        source.token()


# ----- GKE ---------------------------------------------------------------------------------------------------


class StubGoogleCredentials:
    def __init__(self) -> None:
        self.token: str | None = None
        self.expiry: dt.datetime | None = None
        self.refreshes = 0

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        self.token = f"ya29.token-{self.refreshes}"
        self.expiry = dt.datetime(2030, 1, 1, 0, 0, 0)  # naive UTC, like google.auth


def test_gke_token_source_refreshes_near_expiry() -> None:
    creds = StubGoogleCredentials()
    expiry = dt.datetime(2030, 1, 1, tzinfo=dt.UTC).timestamp()
    now = [expiry - 3600]
    source = make_gke_token_source(creds, request=object(), refresh_margin=300, clock=lambda: now[0])

    assert source.token() == "ya29.token-1"
    now[0] = expiry - 301
    assert source.token() == "ya29.token-1"
    now[0] = expiry - 299
    assert source.token() == "ya29.token-2"


def test_gke_endpoint_and_ca_come_from_get_cluster() -> None:
    class Session:
        url = ""

        def get(self, url: str, timeout: float, allow_redirects: bool = True) -> Any:
            assert not allow_redirects and timeout > 0  # the credential never follows a redirect
            Session.url = url

            class Resp:
                def raise_for_status(self) -> None:
                    pass

                def json(self) -> dict[str, Any]:
                    return {"endpoint": "34.1.2.3", "masterAuth": {"clusterCaCertificate": "Q0E="}, "status": "RUNNING"}

            return Resp()

    found = gke_cluster_endpoint("projects/p1/locations/us-central1/clusters/gpu", session=Session())

    assert Session.url == "https://container.googleapis.com/v1/projects/p1/locations/us-central1/clusters/gpu"
    assert (found.endpoint, found.ca_data) == ("https://34.1.2.3", "Q0E=")
    with pytest.raises(KubernetesAuthError, match="expected projects/<project>/locations/<location>/clusters/<name>"):
        gke_cluster_endpoint("gpu", session=Session())


def test_gke_mode_sends_the_google_token(fake: FakeKubeApiServer) -> None:
    creds = StubGoogleCredentials()
    conn = K8sConnection(gke_cluster="projects/p/locations/l/clusters/c", endpoint=fake.url)

    kc = build_client(conn, token_source=make_gke_token_source(creds, request=object()))
    try:
        list(kc.lk.list(Node))
    finally:
        kc.close()

    assert fake.requests[0].authorization == "Bearer ya29.token-1"


# ----- connection modes, TLS, 401 -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_cert(tmp_path_factory.mktemp("tls"), "fake-kube-apiserver")


@pytest.fixture
def tls_fake(tls_files: tuple[Path, Path]) -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="sa-token", tls=(str(tls_files[0]), str(tls_files[1]))) as server:
        server.add_node("n1", {"kubernetes.io/hostname": "n1"})
        yield server


def test_explicit_endpoint_ca_and_token_over_tls(tls_fake: FakeKubeApiServer, tls_files: tuple[Path, Path]) -> None:
    ca_data = base64.b64encode(tls_files[0].read_bytes()).decode()  # what Terraform passes
    kc = build_client(K8sConnection(endpoint=tls_fake.url, ca_data=ca_data, token="sa-token"))
    try:
        assert [n.metadata.name for n in kc.lk.list(Node)] == ["n1"]
        assert kc.get_json("/version") is not None
    finally:
        kc.close()


def test_wrong_ca_fails_verification(tls_fake: FakeKubeApiServer) -> None:
    import httpx2

    kc = build_client(K8sConnection(endpoint=tls_fake.url, token="sa-token"), ClientSettings(max_attempts=1))
    try:
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            list(kc.lk.list(Node))
    finally:
        kc.close()


def test_in_cluster_service_account(
    tls_fake: FakeKubeApiServer, tls_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "namespace").write_text("topocast")
    (tmp_path / "ca.crt").write_bytes(tls_files[0].read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", tls_fake.url.rsplit(":", 1)[1])
    conn = K8sConnection(service_account_dir=str(tmp_path))
    assert conn.resolved_auth() == "in-cluster"

    kc = build_client(conn)
    try:
        assert [n.metadata.name for n in kc.lk.list(Node)] == ["n1"]
    finally:
        kc.close()
    assert tls_fake.requests[-1].authorization == "Bearer sa-token"


def test_kubeconfig_file(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{fake.url}"}}}}]
users: [{{name: me, user: {{token: kc-token}}}}]
contexts: [{{name: ctx, context: {{cluster: fake, user: me}}}}]
current-context: ctx
"""
    )
    kc = build_client(K8sConnection(auth="kubeconfig", kubeconfig=str(path)))
    try:
        list(kc.lk.list(Node))
        kc.get_json("/apis")
    finally:
        kc.close()
    assert [r.authorization for r in fake.requests] == ["Bearer kc-token", "Bearer kc-token"]


def test_unreadable_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    from topocast.k8s.client import KubernetesConfigError

    with pytest.raises(KubernetesConfigError, match="cannot load Kubernetes kubeconfig configuration"):
        build_client(K8sConnection(auth="kubeconfig", kubeconfig=str(tmp_path / "missing")))


def test_401_mints_a_fresh_token_once(fake: FakeKubeApiServer) -> None:
    fake.token = "fresh"
    tokens = iter(["expired", "fresh"])
    source = RefreshingTokenSource(lambda: (next(tokens), time.time() + 600), refresh_margin=0)
    kc = build_client(
        K8sConnection(auth="eks", eks_cluster="c", region="us-east-1", endpoint=fake.url), token_source=source
    )
    try:
        assert [n.metadata.name for n in kc.lk.list(Node)] == ["n1"]
    finally:
        kc.close()
    assert [(r.status, r.authorization) for r in fake.requests] == [(401, "Bearer expired"), (200, "Bearer fresh")]
    assert source.fetches == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"auth": "eks", "eks_cluster": "c"}, "auth=eks needs eks_cluster and region"),
        ({"auth": "gke"}, "auth=gke needs gke_cluster"),
        ({"endpoint": "https://k"}, "auth=token needs token or token_file"),
        ({"auth": "token", "token": "t"}, "auth=token needs endpoint"),
        ({"endpoint": "https://k", "token": "t", "ca_data": "x", "ca_file": "y"}, "ca_data or ca_file, not both"),
    ],
)
def test_incomplete_connection_settings_are_rejected(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        K8sConnection(**kwargs)


def test_connection_from_env() -> None:
    conn = K8sConnection.from_env(
        {"TOPOCAST_K8S_EKS_CLUSTER": "gpu", "TOPOCAST_K8S_REGION": "us-east-2", "TOPOCAST_K8S_ENDPOINT": "https://x"}
    )
    assert (conn.resolved_auth(), conn.eks_cluster, conn.region, conn.endpoint) == (
        "eks",
        "gpu",
        "us-east-2",
        "https://x",
    )
    assert K8sConnection.from_env({}).resolved_auth({}) == "kubeconfig"


# ----- politeness ------------------------------------------------------------------------------------------------


def test_token_bucket_allows_the_burst_then_holds_qps() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    bucket = TokenBucket(qps=10, burst=5, clock=lambda: now[0], sleep=sleep)
    waits = [bucket.acquire() for _ in range(15)]

    assert waits[:5] == [0.0] * 5
    assert now[0] == pytest.approx(1.0)  # 10 more requests at 10/s
    assert TokenBucket(qps=0, burst=1).acquire() == 0.0


def test_rate_limit_applies_to_real_requests(fake: FakeKubeApiServer) -> None:
    """Every request over the wire takes a token: on a simulated clock that moves only when the limiter
    sleeps, 10 requests beyond a burst of 1 at 50/s wait 10 x 20 ms (no wall-clock bound: under load the
    adaptive limiter and a busy machine change how long the real run takes, not what it must wait)."""
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    kc = build_client(K8sConnection(endpoint=fake.url, token="t"), ClientSettings(qps=50, burst=1))
    kc.transport.limiter = TokenBucket(qps=50, burst=1, clock=lambda: now[0], sleep=sleep)
    try:
        for _ in range(11):
            kc.get_json("/version")
    finally:
        kc.close()
    assert len(slept) == 10 and now[0] == pytest.approx(0.2)
    assert kc.transport.stats.waited == pytest.approx(0.2)


def test_retry_after_header_forms() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("0.5") == 0.5
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    when = email.utils.formatdate(1_000_010, usegmt=True)
    assert retry_after_seconds(when, now=1_000_000) == pytest.approx(10.0)
    assert retry_after_seconds(email.utils.formatdate(0, usegmt=True)) == 0.0
