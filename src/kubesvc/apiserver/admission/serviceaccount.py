"""ServiceAccount admission: every Pod runs as a ServiceAccount and, unless it opts out, gets the
API credentials volume (upstream plugin/pkg/admission/serviceaccount/admission.go, enabled by
default in kube-apiserver; identity.md §1.5).

On Pod **create** (other operations, subresources and other kinds pass untouched):

1. A mirror Pod (annotation ``kubernetes.io/config.mirror``) is not changed; it may reference no
   ServiceAccount (``a mirror pod may not reference service accounts``), no Secret (``... may
   not reference secrets``) and no ``serviceAccountToken`` projection (``... may not use
   ServiceAccountToken volume projections``).
2. An empty ``spec.serviceAccountName`` becomes ``default`` (or the deprecated alias
   ``spec.serviceAccount`` when only that is set, as the v1 conversion reads it); the alias is
   then set to the same name, as every v1 Pod upstream shows it.
3. The ServiceAccount must exist, else 403 ``pods "p" is forbidden: error looking up service
   account NS/SA: serviceaccount "SA" not found``. Upstream retries a missing ``default`` up to
   10 times, 100-200 ms apart (the ServiceAccount controller makes it just after the
   namespace); :meth:`ServiceAccountAdmission.wait_ready` is that wait, run by the create
   handler before the store's create (whose admission then looks it up once, without waiting).
4. Unless ``automountServiceAccountToken`` is false (the Pod's setting wins over the
   ServiceAccount's; unset means true), the token volume is added: the first existing volume
   named ``kube-api-access-*`` is reused, else ``kube-api-access-<5 random chars>`` (the
   ``names.SimpleNameGenerator`` alphabet); every init container and container without a mount
   at ``/var/run/secrets/kubernetes.io/serviceaccount`` gets one there, ``readOnly``; the volume
   is added only when some container took the mount. The volume (``TokenVolumeSource``)::

       projected: {defaultMode: 420, sources: [
         {serviceAccountToken: {expirationSeconds: 3607, path: token}},
         {configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}},
         {downwardAPI: {items: [{path: namespace, fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}}]}}]}

   3607 s is ``WarnOnlyBoundTokenExpirationSeconds``: the TokenRequest may then be extended.
5. A Pod without ``imagePullSecrets`` gets the ServiceAccount's.
6. With the ServiceAccount annotation ``kubernetes.io/enforce-mountable-secrets: "true"``, the
   Pod may use only Secrets the ServiceAccount lists (secret volumes, env and envFrom secret
   references, image pull secrets), with upstream's messages.

kubesvc runs the plugin inside the registry: the Pod strategy is wrapped (:meth:`wrap`,
``admission/strategy.py``) so the Pod is changed after defaulting and before validation,
before NodeRestriction (upstream's plugin order), on dry runs too.
"""

from __future__ import annotations

import asyncio
import random
from typing import Callable, Mapping

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.apiserver.admission.strategy import CREATE, admitted, object_name
from kubesvc.apiserver.auth.node import MIRROR_ANNOTATION, pod_references
from kubesvc.util import golang

DEFAULT_SERVICE_ACCOUNT = "default"
VOLUME_PREFIX = "kube-api-access"
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
ENFORCE_MOUNTABLE_SECRETS = "kubernetes.io/enforce-mountable-secrets"
TOKEN_EXPIRATION_SECONDS = 3607  # serviceaccount.WarnOnlyBoundTokenExpirationSeconds
PROJECTED_DEFAULT_MODE = 0o644  # corev1.ProjectedVolumeSourceDefaultMode (420)
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apiserver/pkg/storage/names SimpleNameGenerator
DEFAULT_LOOKUP_ATTEMPTS = 10


class Refused(Exception):
    """The Pod may not be created (the text after ``pods "p" is forbidden: ``)."""


def token_volume_source() -> dict:
    """Upstream ``TokenVolumeSource()``, as the API shows it."""
    return {"defaultMode": PROJECTED_DEFAULT_MODE, "sources": [
        {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
        {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}


def generate_volume_name(choice: Callable[[str], str] = random.choice) -> str:
    return f"{VOLUME_PREFIX}-" + "".join(choice(NAME_ALPHABET) for _ in range(5))


def should_automount(service_account: Mapping, pod: Mapping) -> bool:
    """The Pod's ``automountServiceAccountToken`` wins, then the ServiceAccount's; unset: true."""
    for setting in ((pod.get("spec") or {}).get("automountServiceAccountToken"), service_account.get("automountServiceAccountToken")):
        if setting is not None:
            return bool(setting)
    return True


def _dicts(items) -> list[dict]:
    return [item for item in items or [] if isinstance(item, dict)]


def mount_service_account_token(pod: dict, new_volume_name: Callable[[], str]) -> None:
    """Upstream ``mountServiceAccountToken``, in place."""
    spec = pod.setdefault("spec", {})
    volumes = _dicts(spec.get("volumes"))
    existing = next((v["name"] for v in volumes if isinstance(v.get("name"), str) and v["name"].startswith(VOLUME_PREFIX + "-")), None)
    name = existing or new_volume_name()
    needs_volume = False
    for group in ("initContainers", "containers"):
        for container in _dicts(spec.get(group)):
            mounts = container.get("volumeMounts")
            if any(isinstance(m, dict) and m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts or []):
                continue  # an existing mount at the path keeps the token out
            container["volumeMounts"] = [*(mounts or []), {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH}]
            needs_volume = True
    if existing is None and needs_volume:
        spec["volumes"] = [*(spec.get("volumes") or []), {"name": name, "projected": token_volume_source()}]


def mirror_pod_problem(pod: Mapping) -> str | None:
    """Why a mirror Pod may not be created (upstream ``Validate`` for mirror Pods)."""
    spec = pod.get("spec") or {}
    if spec.get("serviceAccountName"):
        return "a mirror pod may not reference service accounts"
    if any(kind == "secrets" for kind, _, _ in pod_references({**pod, "spec": {**spec, "serviceAccountName": ""}})):
        return "a mirror pod may not reference secrets"
    for volume in _dicts(spec.get("volumes")):
        if any(isinstance(s, dict) and s.get("serviceAccountToken") is not None for s in ((volume.get("projected") or {}).get("sources") or [])):
            return "a mirror pod may not use ServiceAccountToken volume projections"
    return None


def enforces_mountable_secrets(service_account: Mapping) -> bool:
    """The annotation, read as Go's ``strconv.ParseBool`` (anything unparsable: false)."""
    value = ((service_account.get("metadata") or {}).get("annotations") or {}).get(ENFORCE_MOUNTABLE_SECRETS)
    try:
        return golang.parse_bool(value) if value is not None else False
    except ValueError:
        return False


def secret_reference_problem(service_account: Mapping, pod: Mapping) -> str | None:
    """Upstream ``limitSecretReferences``: the first Secret the Pod uses that the
    ServiceAccount does not list."""
    account = (service_account.get("metadata") or {}).get("name", "")
    mountable = {s.get("name") for s in _dicts(service_account.get("secrets"))}
    spec = pod.get("spec") or {}
    for volume in _dicts(spec.get("volumes")):
        secret = volume.get("secret")
        if isinstance(secret, dict) and secret.get("secretName") not in mountable:
            return f'volume with secret.secretName="{secret.get("secretName", "")}" is not allowed because service account {account} does not reference that secret'
    for group, label in (("initContainers", "init container"), ("containers", "container")):
        for container in _dicts(spec.get(group)):
            for env in _dicts(container.get("env")):
                ref = (env.get("valueFrom") or {}).get("secretKeyRef") if isinstance(env.get("valueFrom"), dict) else None
                if isinstance(ref, dict) and ref.get("name") not in mountable:
                    return (f'{label} {container.get("name", "")} with envVar {env.get("name", "")} referencing secret.secretName="{ref.get("name", "")}" '
                            f"is not allowed because service account {account} does not reference that secret")
            for source in _dicts(container.get("envFrom")):
                ref = source.get("secretRef")
                if isinstance(ref, dict) and ref.get("name") not in mountable:
                    return (f'{label} {container.get("name", "")} with envFrom referencing secret.secretName="{ref.get("name", "")}" '
                            f"is not allowed because service account {account} does not reference that secret")
    pull = {s.get("name") for s in _dicts(service_account.get("imagePullSecrets"))}
    for i, ref in enumerate(_dicts(spec.get("imagePullSecrets"))):
        if ref.get("name") not in pull:
            return f'imagePullSecrets[{i}].name="{ref.get("name", "")}" is not allowed because service account {account} does not reference that imagePullSecret'
    return None


def account_name(pod: dict) -> str:
    """The ServiceAccount a Pod being created runs as (step 1 of the module docstring)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    return spec.get("serviceAccountName") or spec.get("serviceAccount") or DEFAULT_SERVICE_ACCOUNT


def admit_pod(pod: dict, namespace: str, lookup: Callable[[str, str], dict | None],
              new_volume_name: Callable[[], str] = generate_volume_name) -> None:
    """Steps 1-6 of the module docstring on a Pod being created, in place; raises Refused.
    ``lookup(namespace, name)`` is the ServiceAccount or None."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        problem = mirror_pod_problem(pod)
        if problem:
            raise Refused(problem)
        return
    spec = pod.setdefault("spec", {})
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec.get("serviceAccount") or DEFAULT_SERVICE_ACCOUNT
    account_name = spec["serviceAccount"] = spec["serviceAccountName"]
    account = lookup(namespace, account_name)
    if account is None:
        raise Refused(f'error looking up service account {namespace}/{account_name}: serviceaccount "{account_name}" not found')
    if should_automount(account, pod):
        mount_service_account_token(pod, new_volume_name)
    if not spec.get("imagePullSecrets") and account.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [{"name": s.get("name", "")} for s in _dicts(account.get("imagePullSecrets"))]
    if enforces_mountable_secrets(account):
        problem = secret_reference_problem(account, pod)
        if problem:
            raise Refused(problem)


class ServiceAccountAdmission:
    """The plugin over the registry's ServiceAccounts (``registry_getter()`` is the Registry)."""

    def __init__(self, registry_getter: Callable[[], object], *, sleep=asyncio.sleep):
        self._registry = registry_getter
        self._sleep = sleep

    async def lookup(self, namespace: str, name: str) -> dict | None:
        try:
            return await self._registry().store("", "serviceaccounts").get(namespace, name)
        except StatusError as err:
            if err.code == 404:
                return None
            raise

    async def admit(self, info, operation: str, subresource: str, new: dict | None, old: dict | None) -> None:
        """Only a Pod's create is admitted (changed in place, or refused with a 403)."""
        if info.kind != "Pod" or operation != CREATE or subresource or new is None:
            return
        namespace = (new.get("metadata") or {}).get("namespace") or ""
        account = None
        if MIRROR_ANNOTATION not in (((new.get("metadata") or {}).get("annotations")) or {}):
            account = await self.lookup(namespace, account_name(new))  # the one admit_pod asks for
        try:
            admit_pod(new, namespace, lambda _namespace, _name: account)
        except Refused as refused:
            raise errors.forbidden(info.resource, object_name(new), info.group, str(refused)) from None

    async def wait_ready(self, info, namespace: str | None, obj: dict) -> None:
        """Give the ServiceAccount controller time to make a missing ``default`` (upstream's
        retried lookups); the create itself decides."""
        if info.kind != "Pod" or not namespace or not isinstance(obj.get("spec"), dict):
            return
        if MIRROR_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {}):
            return
        name = obj["spec"].get("serviceAccountName") or DEFAULT_SERVICE_ACCOUNT
        if name != DEFAULT_SERVICE_ACCOUNT:
            return
        for _ in range(DEFAULT_LOOKUP_ATTEMPTS - 1):
            if await self.lookup(namespace, name) is not None:
                return
            await self._sleep(random.uniform(0.1, 0.2))

    def wrap(self, base: Callable) -> Callable:
        """A Pod strategy factory with this plugin in front of its creates."""
        return admitted(base, self)

    def strategies(self, overrides: Mapping[str, Callable] | None = None) -> dict:
        """``overrides`` with the Pod strategy wrapped (outermost: it runs before the plugins
        already there, NodeRestriction's included, as upstream orders them)."""
        from kubesvc.apiserver.registry.strategy import strategy_for

        merged = dict(overrides or {})
        merged["Pod"] = self.wrap(merged.get("Pod") or strategy_for)
        return merged

