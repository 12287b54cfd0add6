"""The authenticated user (k8s.io/apiserver pkg/authentication/user ``DefaultInfo``) and the
names upstream gives to special users and groups (``user.go``)."""

from __future__ import annotations

from dataclasses import dataclass, field

SYSTEM_PRIVILEGED_GROUP = "system:masters"
NODES_GROUP = "system:nodes"
MONITORING_GROUP = "system:monitoring"
ALL_UNAUTHENTICATED = "system:unauthenticated"
ALL_AUTHENTICATED = "system:authenticated"
ANONYMOUS = "system:anonymous"
API_SERVER_USER = "system:apiserver"
KUBE_PROXY = "system:kube-proxy"
KUBE_CONTROLLER_MANAGER = "system:kube-controller-manager"
KUBE_SCHEDULER = "system:kube-scheduler"
NODE_USER_PREFIX = "system:node:"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
BOOTSTRAPPERS_GROUP = "system:bootstrappers"


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def to_api(self) -> dict:
        """As authentication.k8s.io/v1 UserInfo (SelfSubjectReview, TokenReview)."""
        out: dict = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


def node_name(user: UserInfo) -> str | None:
    """The node a user is (upstream nodeidentifier): ``system:node:<name>`` in ``system:nodes``."""
    if user.name.startswith(NODE_USER_PREFIX) and NODES_GROUP in user.groups:
        return user.name[len(NODE_USER_PREFIX):] or None
    return None


def service_account_user(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return (SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}")


def split_service_account(username: str) -> tuple[str, str] | None:
    """(namespace, name) of ``system:serviceaccount:<ns>:<name>``, else None."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    namespace, sep, name = username[len(SERVICE_ACCOUNT_PREFIX):].partition(":")
    if not sep or not namespace or not name or ":" in name:
        return None
    return namespace, name
