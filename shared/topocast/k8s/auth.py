"""Bearer tokens for managed Kubernetes, minted in-process (no ``aws``/``gcloud`` CLI).

EKS follows the ``aws eks get-token`` contract (offline-tooling.md §5): a SigV4
*presigned* STS ``GetCallerIdentity`` URL, signed with the extra header
``x-k8s-aws-id: <cluster name>`` and ``X-Amz-Expires=60``, encoded as
``"k8s-aws-v1." + base64url(url)`` without padding. The API server's
authenticator replays the URL to STS to learn the caller's IAM identity. Signing is
local HMAC work, so the token source simply mints a new token before the URL's 60 s
validity runs out (``refresh_margin`` early), rather than trusting the 14-minute
``expirationTimestamp`` the CLI reports.

GKE uses Google application-default credentials (``google.auth.default``), an
OAuth2 access token refreshed shortly before its expiry.

Endpoint and CA come from configuration (Terraform passes them) or, when absent,
from ``eks:DescribeCluster`` / the GKE ``projects.locations.clusters.get`` REST call.
Cloud SDKs are imported lazily so the core never needs them.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from topocast.errors import TopocastError

EKS_TOKEN_PREFIX = "k8s-aws-v1."
EKS_CLUSTER_HEADER = "x-k8s-aws-id"
EKS_URL_EXPIRES = 60
GCP_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_GKE_PATH = re.compile(r"^projects/[^/]+/locations/[^/]+/clusters/[^/]+$")


class KubernetesAuthError(TopocastError):
    """A token or the cluster endpoint could not be obtained."""


class TokenSource(Protocol):
    """Something that hands out a currently valid bearer token."""

    def token(self) -> str: ...

    def invalidate(self) -> None: ...


@dataclass(frozen=True)
class ClusterEndpoint:
    endpoint: str
    ca_data: str | None  # base64 PEM, as in kubeconfig certificate-authority-data


class RefreshingTokenSource:
    """Caches a token from ``fetch() -> (token, expires_at_epoch)`` until ``refresh_margin`` before expiry."""

    def __init__(
        self,
        fetch: Callable[[], tuple[str, float]],
        refresh_margin: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        self.refresh_margin = refresh_margin
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = threading.Lock()
        self.fetches = 0

    def token(self) -> str:
        with self._lock:
            if self._token is None or self._clock() >= self._expires_at - self.refresh_margin:
                self._token, self._expires_at = self._fetch()
                self.fetches += 1
            return self._token

    def invalidate(self) -> None:
        with self._lock:
            self._token = None

    @property
    def expires_at(self) -> float:
        return self._expires_at


# ----- EKS ------------------------------------------------------------------------------------------------


def sts_endpoint(region: str) -> str:
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://sts.{region}.{suffix}"


def eks_presigned_url(cluster_name: str, region: str, credentials: Any, expires_in: int = EKS_URL_EXPIRES) -> str:
    """SigV4 query-presign ``GET sts:GetCallerIdentity`` with the cluster name as a signed header."""
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest

    if not cluster_name:
        raise KubernetesAuthError("EKS token: the cluster name is empty")
    url = f"{sts_endpoint(region)}/?Action=GetCallerIdentity&Version=2011-06-15"
    request = AWSRequest(method="GET", url=url, headers={EKS_CLUSTER_HEADER: cluster_name})
    frozen = credentials.get_frozen_credentials() if hasattr(credentials, "get_frozen_credentials") else credentials
    SigV4QueryAuth(frozen, "sts", region, expires=expires_in).add_auth(request)
    return str(request.url)


def eks_token(cluster_name: str, region: str, credentials: Any, expires_in: int = EKS_URL_EXPIRES) -> str:
    """The bearer token ``aws eks get-token --cluster-name <cluster_name>`` would print."""
    url = eks_presigned_url(cluster_name, region, credentials, expires_in)
    return EKS_TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def make_eks_token_source(
    cluster_name: str,
    region: str,
    session: Any = None,
    refresh_margin: float = 15.0,
    clock: Callable[[], float] = time.time,
) -> RefreshingTokenSource:
    """Token source from the default AWS credential chain (or ``session``: boto3 or botocore)."""
    if session is None:
        import botocore.session

        session = botocore.session.get_session()

    def fetch() -> tuple[str, float]:
        credentials = session.get_credentials()  # refreshable credentials renew themselves here
        if credentials is None:
            raise KubernetesAuthError(
                f"EKS token for cluster {cluster_name!r}: no AWS credentials found (role, env or profile)"
            )
        now = clock()
        return eks_token(cluster_name, region, credentials), now + EKS_URL_EXPIRES

    return RefreshingTokenSource(fetch, refresh_margin, clock)


def eks_cluster_endpoint(cluster_name: str, region: str, eks_client: Any = None) -> ClusterEndpoint:
    """API server URL and CA from ``eks:DescribeCluster``."""
    try:
        if eks_client is None:
            import boto3

            eks_client = boto3.client("eks", region_name=region)
        cluster = eks_client.describe_cluster(name=cluster_name)["cluster"]
    except Exception as exc:  # botocore raises many types; one clear message is what an operator needs
        raise KubernetesAuthError(f"eks:DescribeCluster {cluster_name!r} in {region}: {exc}") from None
    endpoint = cluster.get("endpoint")
    if not endpoint:
        raise KubernetesAuthError(f"EKS cluster {cluster_name!r} has no endpoint yet (status {cluster.get('status')})")
    return ClusterEndpoint(endpoint.rstrip("/"), (cluster.get("certificateAuthority") or {}).get("data"))


# ----- GKE ------------------------------------------------------------------------------------------------


def _epoch(expiry: Any, clock: Callable[[], float]) -> float:
    if expiry is None:
        return clock() + 3600.0
    # google.auth keeps expiry as a naive UTC datetime
    import calendar

    return float(calendar.timegm(expiry.utctimetuple()))


def make_gke_token_source(
    credentials: Any = None,
    request: Any = None,
    refresh_margin: float = 300.0,
    clock: Callable[[], float] = time.time,
) -> RefreshingTokenSource:
    """Token source from Google application-default credentials (or the given ``credentials``)."""
    state: dict[str, Any] = {"credentials": credentials}

    def fetch() -> tuple[str, float]:
        try:
            if state["credentials"] is None:
                import google.auth

                state["credentials"], _ = google.auth.default(scopes=list(GCP_SCOPES))
            req = request
            if req is None:
                import google.auth.transport.requests

                req = google.auth.transport.requests.Request()
            creds = state["credentials"]
            creds.refresh(req)
        except KubernetesAuthError:
            raise
        except Exception as exc:
            raise KubernetesAuthError(f"GKE token from Google default credentials: {exc}") from None
        if not creds.token:
            raise KubernetesAuthError("GKE token: Google credentials refreshed without an access token")
        return creds.token, _epoch(creds.expiry, clock)

    return RefreshingTokenSource(fetch, refresh_margin, clock)


def gke_cluster_endpoint(cluster_path: str, session: Any = None) -> ClusterEndpoint:
    """API server URL and CA from ``GET container.googleapis.com/v1/<cluster_path>``."""
    if not _GKE_PATH.match(cluster_path):
        raise KubernetesAuthError(
            f"GKE cluster {cluster_path!r}: expected projects/<project>/locations/<location>/clusters/<name>"
        )
    try:
        if session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(scopes=list(GCP_SCOPES))
            session = AuthorizedSession(credentials)
        # google-auth's session carries the credential: no redirect followed, a bounded wait (docs/security.md)
        resp = session.get(f"https://container.googleapis.com/v1/{cluster_path}", timeout=30, allow_redirects=False)
        resp.raise_for_status()
        data = resp.json()
    except Exception as exc:
        raise KubernetesAuthError(f"GKE get_cluster {cluster_path}: {exc}") from None
    endpoint = data.get("endpoint")
    if not endpoint:
        raise KubernetesAuthError(f"GKE cluster {cluster_path} has no endpoint (status {data.get('status')})")
    if "://" not in endpoint:
        endpoint = f"https://{endpoint}"
    return ClusterEndpoint(endpoint, (data.get("masterAuth") or {}).get("clusterCaCertificate"))
