"""A Pod's ``/etc/resolv.conf`` and ``/etc/hosts``, as the kubelet makes them. Pure.

**resolv.conf** (kubelet pkg/kubelet/network/dns/dns.go ``GetPodDNS``; rendered as
containerd's ``parseDNSOptions``: ``search``, then one ``nameserver`` line each, then
``options``). The base comes from ``dnsPolicy``:

=============================  ==========================  =====================================  ============
policy                         nameservers                 search                                 options
=============================  ==========================  =====================================  ============
``ClusterFirst`` (default)     ``--cluster-dns``           ``<ns>.svc.<domain> svc.<domain>       ``ndots:5``
                                                           <domain>`` + the node's, deduplicated
``ClusterFirstWithHostNet``    as ClusterFirst
``ClusterFirst`` + hostNetwork as Default
``Default``                    the node's resolv.conf      the node's                             the node's
``None``                       (empty)                     (empty)                                (empty)
=============================  ==========================  =====================================  ============

The node's file is ``--resolv-conf`` (``nameserver`` lines accumulate, the last ``search``
line wins without trailing dots and ``.``, ``options`` merge by name; ``--resolv-conf=""``
gives ``nameserver 127.0.0.1`` and ``search .``). ClusterFirst without ``--cluster-dns`` falls
back to Default with a ``MissingClusterDNS`` Warning. ``dnsConfig`` then appends its
nameservers and searches (duplicates dropped, the first kept) and merges its options by name
(``value`` unset: a bare name); kubesvc keeps the options in the order first seen (the
kubelet's map order is random). Last the limits (validation's ``MaxDNSNameservers`` 3,
``MaxDNSSearchPaths`` 32, ``MaxDNSSearchListChars`` 2048, a search path over 253 characters
dropped since glibc 2.28 aborts on it), each cut a ``DNSConfigForming`` Warning worded as the
kubelet's.

**hosts** (kubelet_pods.go ``managedHostsFileContent``): the fixed localhost lines, then per
Pod IP ``<ip>\\t<hostname>.<subdomain>.<ns>.svc.<domain>\\t<hostname>`` (with
``spec.subdomain``; else ``<ip>\\t<hostname>``), then the ``hostAliases`` block. The hostname is
``spec.hostname`` or the Pod's name, cut to 63 characters without trailing ``-``/``.``. A
hostNetwork Pod gets the node's hosts file under its own header, then the aliases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CLUSTER_FIRST = "ClusterFirst"
CLUSTER_FIRST_WITH_HOST_NET = "ClusterFirstWithHostNet"
DEFAULT = "Default"
NONE = "None"

MAX_NAMESERVERS = 3
MAX_SEARCH_PATHS = 32
MAX_SEARCH_LIST_CHARS = 2048
MAX_SEARCH_PATH_LENGTH = 253  # DNS1123SubdomainMaxLength
HOSTNAME_MAX = 63

MISSING_CLUSTER_DNS = ('kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. '
                       'Falling back to "Default" policy.')

MANAGED_HOSTS_HEADER = "# Kubernetes-managed hosts file.\n"
MANAGED_HOSTS_HEADER_HOST_NETWORK = "# Kubernetes-managed hosts file (host network).\n"
LOCALHOST_LINES = ("127.0.0.1\tlocalhost\n"
                   "::1\tlocalhost ip6-localhost ip6-loopback\n"
                   "fe00::0\tip6-localnet\n"
                   "fe00::0\tip6-mcastprefix\n"
                   "fe00::1\tip6-allnodes\n"
                   "fe00::2\tip6-allrouters\n")


@dataclass(frozen=True)
class ResolvConf:
    nameservers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def render(self) -> str:
        lines = []
        if self.searches:
            lines.append("search " + " ".join(self.searches))
        lines += [f"nameserver {server}" for server in self.nameservers]
        if self.options:
            lines.append("options " + " ".join(self.options))
        return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class Event:
    """A Warning the kubelet records: ``on`` is ``Pod`` or ``Node``."""

    reason: str
    message: str
    on: str = "Pod"


@dataclass
class PodDNS:
    resolv_conf: ResolvConf
    events: list[Event] = field(default_factory=list)


def _merge_options(existing, extra) -> list[str]:
    """Options by name, a later value winning (kubelet ``mergeDNSOptions``/``appendOptions``)."""
    merged: dict[str, str] = {}
    for option in existing:
        name, _, value = option.partition(":")
        merged[name] = value
    for name, value in extra:
        merged[name] = value
    return [f"{name}:{value}" if value else name for name, value in merged.items()]


def parse_resolv_conf(text: str) -> ResolvConf:
    """The kubelet's ``parseResolvConf``."""
    nameservers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0]
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) >= 2:
            nameservers.append(fields[1])
        elif fields[0] == "search":
            searches = [s.removesuffix(".") for s in fields[1:] if s != "."]
        elif fields[0] == "options":
            options = _merge_options(options, [(o.partition(":")[0], o.partition(":")[2]) for o in fields[1:]])
    return ResolvConf(tuple(nameservers), tuple(searches), tuple(options))


def _unique(items) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def dns_type(pod: dict, has_cluster_dns: bool) -> tuple[str, list[Event]]:
    """``cluster``, ``host`` or ``none`` (kubelet ``getPodDNSType``), with its events."""
    spec = pod.get("spec") or {}
    policy = spec.get("dnsPolicy") or CLUSTER_FIRST
    if policy == NONE:
        return "none", []
    if policy == DEFAULT or (policy == CLUSTER_FIRST and spec.get("hostNetwork")):
        return "host", []
    if policy not in (CLUSTER_FIRST, CLUSTER_FIRST_WITH_HOST_NET):
        policy = CLUSTER_FIRST  # an invalid policy is logged and taken as ClusterFirst
    if not has_cluster_dns:
        meta = pod.get("metadata") or {}
        pod_name = f'{meta.get("name")}_{meta.get("namespace")}({meta.get("uid", "")})'
        return "host", [Event("MissingClusterDNS", f'pod: "{pod_name}". {MISSING_CLUSTER_DNS}'),
                        Event("MissingClusterDNS", MISSING_CLUSTER_DNS, on="Node")]
    return "cluster", []


def host_resolv_conf(text: str | None) -> ResolvConf:
    """The node's configuration; ``None`` is ``--resolv-conf=""`` (a local resolver)."""
    if text is None:
        return ResolvConf(("127.0.0.1",), (".",), ())
    return parse_resolv_conf(text)


def pod_dns(pod: dict, cluster_dns: list[str], cluster_domain: str, host: ResolvConf) -> PodDNS:
    """The Pod's resolv.conf and the events forming it records (kubelet ``GetPodDNS``)."""
    kind, events = dns_type(pod, bool(cluster_dns))
    if kind == "none":
        base = ResolvConf()
    elif kind == "host":
        base = host
    else:
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        domain = cluster_domain.strip(".")
        cluster_search = (f"{namespace}.svc.{domain}", f"svc.{domain}", domain) if domain else ()
        base = ResolvConf(tuple(cluster_dns), _unique((*cluster_search, *host.searches)), ("ndots:5",))
    config = (pod.get("spec") or {}).get("dnsConfig")
    if config:
        base = ResolvConf(_unique((*base.nameservers, *(config.get("nameservers") or ()))),
                          _unique((*base.searches, *(config.get("searches") or ()))),
                          tuple(_merge_options(base.options, [(o.get("name") or "", o.get("value") or "") for o in config.get("options") or ()])))
    nameservers, searches = list(base.nameservers), list(base.searches)
    if len(nameservers) > MAX_NAMESERVERS:
        nameservers = nameservers[:MAX_NAMESERVERS]
        events.append(Event("DNSConfigForming", "Nameserver limits were exceeded, some nameservers have been omitted, "
                                                f"the applied nameserver line is: {' '.join(nameservers)}"))
    searches, cut = fit_search(searches)
    if cut:
        events.append(Event("DNSConfigForming", "Search Line limits were exceeded, some search paths have been omitted, "
                                                f"the applied search line is: {' '.join(searches)}"))
    return PodDNS(ResolvConf(tuple(nameservers), tuple(searches), base.options), events)


def fit_search(searches: list[str]) -> tuple[list[str], bool]:
    """kubelet ``formDNSSearchFitsLimits``: at most 32 paths, none over 253 characters, the line
    at most 2048 characters (whole paths cut from the end); whether anything was cut."""
    cut = False
    if len(searches) > MAX_SEARCH_PATHS:
        searches, cut = searches[:MAX_SEARCH_PATHS], True
    kept = [s for s in searches if len(s) <= MAX_SEARCH_PATH_LENGTH]
    cut = cut or len(kept) != len(searches)
    while len(" ".join(kept)) > MAX_SEARCH_LIST_CHARS:
        kept.pop()
        cut = True
    return kept, cut


def host_limit_events(text: str, path: str, cluster_domain: str) -> list[Event]:
    """kubelet ``CheckLimitsForResolvConf`` at start: a Node Warning for the first limit the
    node's own search line breaks (3 paths are kept for the cluster's when it has a domain)."""
    searches = list(parse_resolv_conf(text).searches)
    limit = MAX_SEARCH_PATHS - (3 if cluster_domain else 0)
    reason = "CheckLimitsForResolvConf"
    if len(searches) > limit:
        return [Event(reason, f"Resolv.conf file '{path}' contains search line consisting of more than {limit} domains!", on="Node")]
    if any(len(s) > MAX_SEARCH_PATH_LENGTH for s in searches):
        return [Event(reason, f'Resolv.conf file "{path}" contains a search path which length is more than allowed {MAX_SEARCH_PATH_LENGTH} chars!',
                      on="Node")]
    if len(" ".join(searches)) > MAX_SEARCH_LIST_CHARS:
        return [Event(reason, f"Resolv.conf file '{path}' contains search line which length is more than allowed {MAX_SEARCH_LIST_CHARS} chars!",
                      on="Node")]
    return []


# -- /etc/hosts ---------------------------------------------------------------------------------


def hostname_and_domain(pod: dict, cluster_domain: str) -> tuple[str, str]:
    """kubelet ``GeneratePodHostNameAndDomain``: (hostname, domain or "")."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    hostname = (spec.get("hostname") or meta.get("name") or "")[:HOSTNAME_MAX].rstrip("-.")
    subdomain = spec.get("subdomain") or ""
    domain = f"{subdomain}.{meta.get('namespace') or 'default'}.svc.{cluster_domain.strip('.')}" if subdomain else ""
    return hostname, domain


def _aliases(pod: dict) -> str:
    aliases = (pod.get("spec") or {}).get("hostAliases") or []
    if not aliases:
        return ""
    lines = "".join(f"{a.get('ip', '')}\t{chr(9).join(a.get('hostnames') or [])}\n" for a in aliases)
    return "\n# Entries added by HostAliases.\n" + lines


def hosts_file(pod: dict, pod_ips: list[str], cluster_domain: str, node_hosts: str = "") -> str:
    """The Pod's /etc/hosts (``node_hosts``: the node's file, for a hostNetwork Pod)."""
    if (pod.get("spec") or {}).get("hostNetwork"):
        return MANAGED_HOSTS_HEADER_HOST_NETWORK + node_hosts + _aliases(pod)
    hostname, domain = hostname_and_domain(pod, cluster_domain)
    if domain:
        own = "".join(f"{ip}\t{hostname}.{domain}\t{hostname}\n" for ip in pod_ips)
    else:
        own = "".join(f"{ip}\t{hostname}\n" for ip in pod_ips)
    return MANAGED_HOSTS_HEADER + LOCALHOST_LINES + own + _aliases(pod)
