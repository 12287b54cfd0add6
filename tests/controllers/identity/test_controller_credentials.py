"""Whose credentials the controller-manager's controllers write with: each its kube-system
ServiceAccount through TokenRequest tokens renewed at 80 % of their life
(``--use-service-account-credentials``), or the manager's own ``--kubeconfig`` without it.
Observed against a real apiserver with Node,RBAC authorization: who the apiserver says a
client is (SelfSubjectReview, as ``kubectl auth whoami``), which ServiceAccounts exist, what
the controllers write, and the 403s they log when a role binding is taken away."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.client.kubeconfig import load_kubeconfig
from kubesvc.client.rest import ApiError, RestClient
from kubesvc.controllers.clientbuilder import (DEFAULT_EXPIRATION_SECONDS, SERVICEACCOUNTS, ServiceAccountClientBuilder,
                                               ServiceAccountTokenSource, TokenUnavailable, refresh_time)
from kubesvc.controllers.manager import ENDPOINTSLICE, ControllerManager, ManagerConfig
from kubesvc.util.clock import RealClock
from tests.controllers.test_endpointslice_api import slices_of
from tests.support.apiserver import start_controller_manager
from tests.support.cluster import api_client, create_pods, create_service, ensure_node, eventually, new_namespace, running_task

CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("received,expires,leeway,refresh", [
    (T0, T0 + timedelta(seconds=3600), 20, T0 + timedelta(seconds=2880)),
    (T0, T0 + timedelta(seconds=600), 20, T0 + timedelta(seconds=480)),
    (T0, T0 + timedelta(seconds=60), 20, T0 + timedelta(seconds=480)),
    (T0, T0 - timedelta(seconds=30), 20, T0 + timedelta(seconds=480)),
    (T0, T0 + timedelta(hours=24), 20, T0 + timedelta(hours=19, minutes=12)),
    (T0, T0 + timedelta(seconds=3600), 0, T0 + timedelta(seconds=3600)),
], ids=["default-hour", "ten-minutes", "skewed-short-pinned-to-ten-minutes", "already-expired-pinned", "day", "no-leeway"])
def test_refresh_time(received, expires, leeway, refresh):
    assert refresh_time(received, expires, leeway) == refresh


class AheadClock(RealClock):
    """Real time, moved ahead by the test: the controller-manager's view of time, while the
    apiserver keeps the real one."""

    def __init__(self):
        self.ahead = timedelta()

    def now(self) -> datetime:
        return super().now() + self.ahead

    def advance(self, seconds: float) -> None:
        self.ahead += timedelta(seconds=seconds)


async def whoami(client: RestClient) -> dict:
    """``kubectl auth whoami``: the user the apiserver authenticates this client as."""
    review = await client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                  body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    return review["status"]["userInfo"]


def claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def manager_client(server) -> RestClient:
    return RestClient(load_kubeconfig(server.component_kubeconfig("controller-manager")), field_manager="kube-controller-manager",
                      user_agent="kubesvc-controller-manager")


async def test_controller_token_renewed_at_80_percent_while_the_controller_keeps_writing(apiserver):
    """The EndpointSlice controller in this event loop, its token source on a clock the test
    moves: the token it starts with lives 3600 s; 2870 s on it is still the one sent, 2890 s on
    (80 % is 2880 s, less what the apiserver's whole-second expiry takes off) a new one is,
    through the same client, and the controller goes on writing."""
    clock = AheadClock()
    async with manager_client(apiserver) as root, api_client(apiserver) as admin:
        builder = ServiceAccountClientBuilder(root, clock=clock)
        try:
            manager = ControllerManager(root, ManagerConfig(controllers={ENDPOINTSLICE}, leader_elect=False, secure_port=0), client_builder=builder)
            await ensure_node(admin, "node-a")
            ns = await new_namespace(admin)
            await create_pods(admin, ns, 2, {"app": "web"})
            async with running_task(manager.run_controllers()):
                await create_service(admin, ns, "first", {"app": "web"})
                await eventually(lambda: _endpoints(admin, ns, "first", 2), 30, "slices for the first Service")
                client = manager.controller_clients[ENDPOINTSLICE]
                source = builder.token_sources["endpointslice-controller"]
                user = await whoami(client)
                assert user["username"] == "system:serviceaccount:kube-system:endpointslice-controller"
                assert set(user["groups"]) >= {"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}
                first = await source.token()
                assert user["extra"][CREDENTIAL_ID] == [f"JTI={claims(first)['jti']}"]
                assert claims(first)["exp"] - claims(first)["iat"] == DEFAULT_EXPIRATION_SECONDS
                assert source.requested == 1

                clock.advance(2870)
                assert (await whoami(client))["extra"][CREDENTIAL_ID] == [f"JTI={claims(first)['jti']}"]
                assert source.requested == 1
                clock.advance(20)
                renewed = (await whoami(client))["extra"][CREDENTIAL_ID]
                assert renewed != [f"JTI={claims(first)['jti']}"]
                assert source.requested == 2

                clock.advance(DEFAULT_EXPIRATION_SECONDS)  # past the first token's end, and the second renewed in turn
                await create_service(admin, ns, "second", {"app": "web"})
                await eventually(lambda: _endpoints(admin, ns, "second", 2), 30, "slices for a Service made after the renewals")
                assert source.requested == 3
                assert manager.controller_clients[ENDPOINTSLICE] is client
        finally:
            await builder.close()


async def _endpoints(client, ns: str, service: str, count: int) -> bool:
    return sum(len(s.get("endpoints") or []) for s in await slices_of(client, ns, service)) == count


async def test_a_refused_token_is_replaced_and_a_failed_renewal_keeps_the_current_one(fresh_apiserver, caplog):
    server = fresh_apiserver()
    clock = AheadClock()
    async with manager_client(server) as root, api_client(server) as admin:
        builder = ServiceAccountClientBuilder(root, clock=clock)
        try:
            client = await builder.client("endpoint-controller")
            account = await admin.resource(SERVICEACCOUNTS).get("endpoint-controller", "kube-system")  # made by the builder
            first = (await whoami(client))["extra"][CREDENTIAL_ID]

            # the ServiceAccount deleted: its tokens stop working (after the apiserver's 10 s
            # cache of good tokens); the 401 drops the token and the next request gets a new
            # one, for the ServiceAccount made again
            await admin.resource(SERVICEACCOUNTS).delete("endpoint-controller", "kube-system")

            async def refused():
                try:
                    await whoami(client)
                except ApiError as err:
                    return err.status == 401
                return False

            await eventually(refused, 20, "the old token refused", interval=0.5)
            user = await whoami(client)
            assert user["username"] == "system:serviceaccount:kube-system:endpoint-controller"
            assert user["extra"][CREDENTIAL_ID] != first
            again = await admin.resource(SERVICEACCOUNTS).get("endpoint-controller", "kube-system")
            assert again["metadata"]["uid"] != account["metadata"]["uid"]

            # the manager may no longer ask for tokens: renewal fails, the current token is kept
            current = user["extra"][CREDENTIAL_ID]
            binding = await admin.get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:kube-controller-manager")
            await admin.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:kube-controller-manager")
            clock.advance(2890)
            assert (await whoami(client))["extra"][CREDENTIAL_ID] == current
            assert builder.token_sources["endpoint-controller"].requested == 2
            assert ("Unable to rotate token: failed to get token for kube-system/endpoint-controller: "
                    "timed out waiting for the condition") in caplog.text
            with pytest.raises(TokenUnavailable, match="failed to get token for kube-system/fresh: timed out waiting for the condition"):
                await ServiceAccountTokenSource(root, "kube-system", "fresh").token()  # nothing cached to fall back on
            # given back, the next request renews
            await admin.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                                "metadata": {"name": binding["metadata"]["name"]}, "roleRef": binding["roleRef"], "subjects": binding["subjects"]})
            assert (await whoami(client))["extra"][CREDENTIAL_ID] != current
            assert builder.token_sources["endpoint-controller"].requested == 3
        finally:
            await builder.close()


async def test_each_controller_writes_as_its_service_account(fresh_apiserver, tmp_path):
    """``kubesvc controller-manager --use-service-account-credentials`` with its own kubeconfig:
    the controllers' ServiceAccounts appear in kube-system; with the EndpointSlice controller's
    binding taken away, it is refused as its ServiceAccount while the Endpoints controller (another
    ServiceAccount) goes on; given back, slices follow."""
    server = fresh_apiserver()
    manager = start_controller_manager(server, tmp_path / "cm.log", "--leader-elect=false", "--secure-port=0",
                                       "--controllers=endpointslice-controller,endpoints-controller")
    try:
        async with api_client(server) as admin:
            await ensure_node(admin, "node-a")
            for account in ("endpointslice-controller", "endpoint-controller"):
                await eventually(lambda: _exists(admin, account), 30, f"ServiceAccount kube-system/{account}")
            assert not await _exists(admin, "generic-garbage-collector")  # only the enabled controllers'

            server.kubectl("delete", "clusterrolebinding", "system:controller:endpointslice-controller")
            ns = await new_namespace(admin)
            await create_pods(admin, ns, 2, {"app": "web"})
            await create_service(admin, ns, "web", {"app": "web"})
            await eventually(lambda: _endpoints_object(admin, ns, "web", 2), 30, "Endpoints by the endpoint-controller")
            refusal = (f'endpointslices.discovery.k8s.io is forbidden: User "system:serviceaccount:kube-system:endpointslice-controller" '
                       f'cannot create resource "endpointslices" in API group "discovery.k8s.io" in the namespace "{ns}"')
            await eventually(lambda: refusal in manager.log(), 30, "the EndpointSlice controller's 403 in the log", interval=0.2)
            assert await slices_of(admin, ns, "web") == []

            server.kubectl("create", "clusterrolebinding", "system:controller:endpointslice-controller",
                           "--clusterrole=system:controller:endpointslice-controller", "--serviceaccount=kube-system:endpointslice-controller")
            server.kubectl("-n", ns, "label", "service", "web", "touched=yes")
            await eventually(lambda: _endpoints(admin, ns, "web", 2), 60, "slices once the binding is back")
            assert "system:kube-controller-manager" not in manager.log()  # no controller fell back to the manager's identity
    finally:
        assert manager.stop() == 0, manager.log()[-3000:]


async def _exists(admin, account: str) -> bool:
    try:
        await admin.resource(SERVICEACCOUNTS).get(account, "kube-system")
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


async def _endpoints_object(admin, ns: str, name: str, count: int) -> bool:
    try:
        endpoints = await admin.get(f"/api/v1/namespaces/{ns}/endpoints/{name}")
    except ApiError:
        return False
    return sum(len(subset.get("addresses") or []) for subset in endpoints.get("subsets") or []) == count


async def test_without_the_flag_every_controller_is_the_manager(fresh_apiserver, tmp_path):
    """Upstream's default: the controllers write with the manager's own credentials, which RBAC
    does not let write EndpointSlices; no ServiceAccount is made for them."""
    server = fresh_apiserver()
    manager = start_controller_manager(server, tmp_path / "cm.log", "--leader-elect=false", "--secure-port=0",
                                       "--controllers=endpointslice-controller", use_service_account_credentials=False)
    try:
        async with api_client(server) as admin:
            await ensure_node(admin, "node-a")
            ns = await new_namespace(admin)
            await create_pods(admin, ns, 1, {"app": "web"})
            await create_service(admin, ns, "web", {"app": "web"})
            refusal = (f'endpointslices.discovery.k8s.io is forbidden: User "system:kube-controller-manager" '
                       f'cannot create resource "endpointslices" in API group "discovery.k8s.io" in the namespace "{ns}"')
            await eventually(lambda: refusal in manager.log(), 30, "the manager's own identity refused", interval=0.2)
            assert not await _exists(admin, "endpointslice-controller")
            assert "system:serviceaccount:" not in manager.log()
    finally:
        assert manager.stop() == 0, manager.log()[-3000:]


def test_a_manager_that_may_not_make_service_accounts_stops_with_the_reason(apiserver, tmp_path):
    """The proxy's identity as the manager's: the first controller's client cannot be built
    (upstream's ``Error in getting client``): the command ends with that, not a traceback."""
    result = subprocess.run([sys.executable, "-m", "kubesvc", "controller-manager", f"--kubeconfig={apiserver.component_kubeconfig('proxy')}",
                             "--use-service-account-credentials", "--leader-elect=false", "--secure-port=0",
                             "--controllers=endpointslice-controller"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr[-2000:]
    assert ('Error: Error in getting client for endpointslice-controller: 403 Forbidden: serviceaccounts "endpointslice-controller" is forbidden: '
            'User "system:kube-proxy" cannot get resource "serviceaccounts" in API group "" in the namespace "kube-system"') in result.stderr
    assert "Traceback" not in result.stderr
