"""The core ("legacy", apiVersion ``v1``) kinds: Namespace, Service, Pod, Node, Endpoints, Event.

A **Service** gives a set of Pods (chosen by ``spec.selector``) one stable virtual IP
(``spec.clusterIP``) and ports; ``spec.ports[].targetPort`` names or numbers the Pod port the
traffic goes to. ``type`` widens reachability: ``NodePort`` opens the port on every Node,
``LoadBalancer`` asks for an external balancer (``status.loadBalancer.ingress``),
``ExternalName`` is only a DNS CNAME. The traffic policies pick which endpoints a node may use.

A **Pod** is the unit that backs a Service: its containers, its ports, its probes (readiness
decides whether it receives Service traffic) and, in ``status``, its IPs and conditions
(``Ready``). A **Node** reports its addresses and conditions; ``spec.podCIDR(s)`` is its Pod
address range. **Endpoints** is the legacy one-object-per-Service list of ready and not-ready
addresses (EndpointSlice replaced it). **Event** is core/v1's record of something that happened
to an ``involvedObject``; ``kubectl describe`` finds them by field selector. A **Binding** is
never stored: a scheduler POSTs one to a Pod's ``binding`` subresource to set its node.

Fields follow k8s.io/api/core/v1/types.go: JSON names, int32/int64, and the
``patchStrategy``/``patchMergeKey`` and ``+listType``/``+listMapKey`` markers, which decide how
strategic merge patch and server-side apply combine list entries (ports by ``port`` and
``protocol``, containers and env by ``name``, conditions by ``type``). Sub-structures we do not
interpret (security contexts, affinity, volume sources) are ``Any_``: kept verbatim.
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import CONDITION, LABEL_SELECTOR, MICRO_TIME, OBJECT_REFERENCE, keyed_by_type, kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import (
    BOOL, INT32, INT64, INT_OR_STRING, QUANTITY, STRING, STRING_MAP, TIME, Any_, F, ListOf, MapOf, Obj, Scalar,
)

CORE = "io.k8s.api.core.v1."


def enum(*values: str) -> Scalar:
    return Scalar("string", enum=values)


PROTOCOL = enum("SCTP", "TCP", "UDP")
CONDITION_STATUS = enum("False", "True", "Unknown")
RESOURCE_LIST = MapOf(QUANTITY)


def merged_by(key: str, patch_strategy: str = "merge") -> dict:
    """ListOf keywords for a list whose entries are identified by one ``key`` for both SMP and SSA."""
    return {"list_type": "map", "map_keys": (key,), "patch_strategy": patch_strategy, "patch_merge_key": key}


# ---- Namespace -------------------------------------------------------------------------------

NAMESPACE_CONDITION = Obj(
    CORE + "NamespaceCondition",
    {
        "type": F(STRING, "Type of namespace controller condition."),
        "status": F(CONDITION_STATUS, "Status of the condition, one of True, False, Unknown."),
        "lastTransitionTime": F(TIME, "Last time the condition transitioned from one status to another."),
        "reason": F(STRING, "Unique, one-word, CamelCase reason for the condition's last transition."),
        "message": F(STRING, "Human-readable message indicating details about last transition."),
    },
    description="NamespaceCondition contains details about state of namespace.",
    required=("type", "status"),
)

NAMESPACE = kind_schema(
    CORE + "Namespace", ("", "v1", "Namespace"),
    "Namespace provides a scope for Names. Use of multiple namespaces is optional.",
    {
        "spec": F(Obj(CORE + "NamespaceSpec", {
            "finalizers": F(ListOf(STRING), "Finalizers is an opaque list of values that must be empty to permanently "
                                            "remove object from storage."),
        }, description="NamespaceSpec describes the attributes on a Namespace."),
            "Spec defines the behavior of the Namespace."),
        "status": F(Obj(CORE + "NamespaceStatus", {
            "phase": F(enum("Active", "Terminating"), "Phase is the current lifecycle phase of the namespace."),
            "conditions": F(keyed_by_type(NAMESPACE_CONDITION),
                            "Represents the latest available observations of a namespace's current state."),
        }, description="NamespaceStatus is information about the current status of a Namespace."),
            "Status describes the current status of a Namespace."),
    },
)

# ---- Service ---------------------------------------------------------------------------------

SERVICE_PORT = Obj(
    CORE + "ServicePort",
    {
        "name": F(STRING, "The name of this port within the service. This must be a DNS_LABEL. All ports within a "
                          "ServiceSpec must have unique names."),
        "protocol": F(PROTOCOL, 'The IP protocol for this port. Supports "TCP", "UDP", and "SCTP". Default is TCP.'),
        "appProtocol": F(STRING, "The application protocol for this port. This is used as a hint for implementations "
                                 "to offer richer behavior for protocols that they understand."),
        "port": F(INT32, "The port that will be exposed by this service."),
        "targetPort": F(INT_OR_STRING, "Number or name of the port to access on the pods targeted by the service. "
                                       "If this is a string, it will be looked up as a named port in the target Pod's "
                                       "container ports. If this is not specified, the value of the 'port' field is "
                                       "used (an identity map)."),
        "nodePort": F(INT32, "The port on each node on which this service is exposed when type is NodePort or "
                             "LoadBalancer. Usually assigned by the system."),
    },
    description="ServicePort contains information on service's port.",
    required=("port",),
)

SESSION_AFFINITY_CONFIG = Obj(
    CORE + "SessionAffinityConfig",
    {
        "clientIP": F(Obj(CORE + "ClientIPConfig", {
            "timeoutSeconds": F(INT32, 'timeoutSeconds specifies the seconds of ClientIP type session sticky time. The '
                                       'value must be >0 && <=86400(for 1 day) if ServiceAffinity == "ClientIP". '
                                       'Default value is 10800(for 3 hours).'),
        }, description="ClientIPConfig represents the configurations of Client IP based session affinity."),
            "clientIP contains the configurations of Client IP based session affinity."),
    },
    description="SessionAffinityConfig represents the configurations of session affinity.",
)

SERVICE_SPEC = Obj(
    CORE + "ServiceSpec",
    {
        "ports": F(ListOf(SERVICE_PORT, "map", ("port", "protocol"), "merge", "port"),
                   "The list of ports that are exposed by this service."),
        "selector": F(MapOf(STRING, map_type="atomic"),  # +mapType=atomic
                      "Route service traffic to pods with label keys and values matching this selector. "
                      "If empty or not present, the service is assumed to have an external process managing "
                      "its endpoints, which Kubernetes will not modify."),
        "clusterIP": F(STRING, "clusterIP is the IP address of the service and is usually assigned randomly."),
        "clusterIPs": F(ListOf(STRING), "ClusterIPs is a list of IP addresses assigned to this service, and are "
                                        "usually assigned randomly."),
        "type": F(enum("ClusterIP", "ExternalName", "LoadBalancer", "NodePort"),
                  "type determines how the Service is exposed. Defaults to ClusterIP."),
        "externalIPs": F(ListOf(STRING), "externalIPs is a list of IP addresses for which nodes in the cluster will "
                                         "also accept traffic for this service."),
        "sessionAffinity": F(enum("ClientIP", "None"), 'Supports "ClientIP" and "None". Used to maintain session '
                                                       'affinity. Defaults to None.'),
        "loadBalancerIP": F(STRING, "Only applies to Service Type: LoadBalancer. Deprecated: This field was "
                                    "under-specified and its meaning varies across implementations."),
        "loadBalancerSourceRanges": F(ListOf(STRING), "If specified and supported by the platform, this will restrict "
                                                      "traffic through the cloud-provider load-balancer will be "
                                                      "restricted to the specified client IPs."),
        "externalName": F(STRING, "externalName is the external reference that discovery mechanisms will return as an "
                                  'alias for this service (e.g. a DNS CNAME record). Requires `type` to be "ExternalName".'),
        "externalTrafficPolicy": F(enum("Cluster", "Local"),
                                   "externalTrafficPolicy describes how nodes distribute service traffic they receive "
                                   "on one of the Service's \"externally-facing\" addresses (NodePorts, ExternalIPs, "
                                   "and LoadBalancer IPs)."),
        "healthCheckNodePort": F(INT32, "healthCheckNodePort specifies the healthcheck nodePort for the service."),
        "publishNotReadyAddresses": F(BOOL, "publishNotReadyAddresses indicates that any agent which deals with "
                                            "endpoints for this Service should disregard any indications of "
                                            "ready/not-ready."),
        "sessionAffinityConfig": F(SESSION_AFFINITY_CONFIG,
                                   "sessionAffinityConfig contains the configurations of session affinity."),
        "ipFamilies": F(ListOf(STRING), 'IPFamilies is a list of IP families (e.g. IPv4, IPv6) assigned to this '
                                        'service.'),
        "ipFamilyPolicy": F(enum("PreferDualStack", "RequireDualStack", "SingleStack"),
                            "IPFamilyPolicy represents the dual-stack-ness requested or required by this Service."),
        "allocateLoadBalancerNodePorts": F(BOOL, "allocateLoadBalancerNodePorts defines if NodePorts will be "
                                                 "automatically allocated for services with type LoadBalancer."),
        "loadBalancerClass": F(STRING, "loadBalancerClass is the class of the load balancer implementation this "
                                       "Service belongs to."),
        "internalTrafficPolicy": F(enum("Cluster", "Local"),
                                   "InternalTrafficPolicy describes how nodes distribute service traffic they receive "
                                   "on the ClusterIP."),
        "trafficDistribution": F(STRING, "TrafficDistribution offers a way to express preferences for how traffic is "
                                         "distributed to Service endpoints."),
    },
    description="ServiceSpec describes the attributes that a user creates on a service.",
)

PORT_STATUS = Obj(
    CORE + "PortStatus",
    {
        "port": F(INT32, "Port is the port number of the service port of which status is recorded here"),
        "protocol": F(PROTOCOL, 'Protocol is the protocol of the service port of which status is recorded here The '
                                'supported values are: "TCP", "UDP", "SCTP"'),
        "error": F(STRING, "Error is to record the problem with the service port."),
    },
    required=("port", "protocol"),
)

LOAD_BALANCER_INGRESS = Obj(
    CORE + "LoadBalancerIngress",
    {
        "ip": F(STRING, "IP is set for load-balancer ingress points that are IP based (typically GCE or OpenStack "
                        "load-balancers)"),
        "hostname": F(STRING, "Hostname is set for load-balancer ingress points that are DNS based (typically AWS "
                              "load-balancers)"),
        "ipMode": F(enum("Proxy", "VIP"), "IPMode specifies how the load-balancer IP behaves, and may only be "
                                          "specified when the ip field is specified."),
        "ports": F(ListOf(PORT_STATUS), "Ports is a list of records of service ports If used, every port defined in "
                                        "the service should have an entry in it"),
    },
    description="LoadBalancerIngress represents the status of a load-balancer ingress point: traffic intended for the "
                "service should be sent to an ingress point.",
)

LOAD_BALANCER_STATUS = Obj(
    CORE + "LoadBalancerStatus",
    {
        "ingress": F(ListOf(LOAD_BALANCER_INGRESS), "Ingress is a list containing ingress points for the "
                                                    "load-balancer. Traffic intended for the service should be sent to "
                                                    "these ingress points."),
    },
    description="LoadBalancerStatus represents the status of a load-balancer.",
)

SERVICE_STATUS = Obj(
    CORE + "ServiceStatus",
    {
        "loadBalancer": F(LOAD_BALANCER_STATUS, "LoadBalancer contains the current status of the load-balancer, if "
                                                "one is present."),
        "conditions": F(keyed_by_type(CONDITION), "Current service state"),
    },
    description="ServiceStatus represents the current status of a service.",
)

SERVICE = kind_schema(
    CORE + "Service", ("", "v1", "Service"),
    "Service is a named abstraction of software service (for example, mysql) consisting of local port (for example "
    "3306) that the proxy listens on, and the selector that determines which pods will answer requests sent through "
    "the proxy.",
    {
        "spec": F(SERVICE_SPEC, "Spec defines the behavior of a service."),
        "status": F(SERVICE_STATUS, "Most recently observed status of the service. Populated by the system. Read-only."),
    },
)

# ---- Pod: containers -------------------------------------------------------------------------

CONTAINER_PORT = Obj(
    CORE + "ContainerPort",
    {
        "name": F(STRING, "If specified, this must be an IANA_SVC_NAME and unique within the pod. Each named port in a "
                          "pod must have a unique name. Name for the port that can be referred to by services."),
        "hostPort": F(INT32, "Number of port to expose on the host."),
        "containerPort": F(INT32, "Number of port to expose on the pod's IP address. This must be a valid port number, "
                                  "0 < x < 65536."),
        "protocol": F(PROTOCOL, 'Protocol for port. Must be UDP, TCP, or SCTP. Defaults to "TCP".'),
        "hostIP": F(STRING, "What host IP to bind the external port to."),
    },
    description="ContainerPort represents a network port in a single container.",
    required=("containerPort",),
)

ENV_VAR_SOURCE = Obj(
    CORE + "EnvVarSource",
    {
        "fieldRef": F(Obj(CORE + "ObjectFieldSelector", {
            "apiVersion": F(STRING, 'Version of the schema the FieldPath is written in terms of, defaults to "v1".'),
            "fieldPath": F(STRING, "Path of the field to select in the specified API version."),
        }, description="ObjectFieldSelector selects an APIVersioned field of an object.", required=("fieldPath",),
            map_type="atomic"),
            "Selects a field of the pod: supports metadata.name, metadata.namespace, `metadata.labels['<KEY>']`, "
            "`metadata.annotations['<KEY>']`, spec.nodeName, spec.serviceAccountName, status.hostIP, status.podIP, "
            "status.podIPs."),
        "resourceFieldRef": F(Obj(CORE + "ResourceFieldSelector", {
            "containerName": F(STRING, "Container name: required for volumes, optional for env vars"),
            "resource": F(STRING, "Required: resource to select"),
            "divisor": F(QUANTITY, 'Specifies the output format of the exposed resources, defaults to "1"'),
        }, description="ResourceFieldSelector represents container resources (cpu, memory) and their output format",
            required=("resource",), map_type="atomic"),
            "Selects a resource of the container: only resources limits and requests (limits.cpu, limits.memory, "
            "limits.ephemeral-storage, requests.cpu, requests.memory and requests.ephemeral-storage) are currently "
            "supported."),
        "configMapKeyRef": F(Obj(CORE + "ConfigMapKeySelector", {
            "name": F(STRING, "Name of the referent."),
            "key": F(STRING, "The key to select."),
            "optional": F(BOOL, "Specify whether the ConfigMap or its key must be defined"),
        }, description="Selects a key from a ConfigMap.", required=("key",), map_type="atomic"),
            "Selects a key of a ConfigMap."),
        "secretKeyRef": F(Obj(CORE + "SecretKeySelector", {
            "name": F(STRING, "Name of the referent."),
            "key": F(STRING, "The key of the secret to select from.  Must be a valid secret key."),
            "optional": F(BOOL, "Specify whether the Secret or its key must be defined"),
        }, description="SecretKeySelector selects a key of a Secret.", required=("key",), map_type="atomic"),
            "Selects a key of a secret in the pod's namespace"),
    },
    description="EnvVarSource represents a source for the value of an EnvVar.",
)

ENV_VAR = Obj(
    CORE + "EnvVar",
    {
        "name": F(STRING, "Name of the environment variable. Must be a C_IDENTIFIER."),
        "value": F(STRING, "Variable references $(VAR_NAME) are expanded using the previously defined environment "
                           'variables in the container and any service environment variables. Defaults to "".'),
        "valueFrom": F(ENV_VAR_SOURCE, "Source for the environment variable's value. Cannot be used if value is not "
                                       "empty."),
    },
    description="EnvVar represents an environment variable present in a Container.",
    required=("name",),
)


def _env_source(name: str, what: str) -> Obj:
    return Obj(CORE + name, {
        "name": F(STRING, "Name of the referent."),
        "optional": F(BOOL, f"Specify whether the {what} must be defined"),
    }, description=f"{name} selects a {what} to populate the environment variables with.")


ENV_FROM_SOURCE = Obj(
    CORE + "EnvFromSource",
    {
        "prefix": F(STRING, "Optional text to prepend to the name of each environment variable. Must be a "
                            "C_IDENTIFIER."),
        "configMapRef": F(_env_source("ConfigMapEnvSource", "ConfigMap"), "The ConfigMap to select from"),
        "secretRef": F(_env_source("SecretEnvSource", "Secret"), "The Secret to select from"),
    },
    description="EnvFromSource represents the source of a set of ConfigMaps or Secrets",
)

RESOURCE_REQUIREMENTS = Obj(
    CORE + "ResourceRequirements",
    {
        "limits": F(RESOURCE_LIST, "Limits describes the maximum amount of compute resources allowed."),
        "requests": F(RESOURCE_LIST, "Requests describes the minimum amount of compute resources required."),
        "claims": F(ListOf(Obj(CORE + "ResourceClaim", {
            "name": F(STRING, "Name must match the name of one entry in pod.spec.resourceClaims of the Pod where this "
                              "field is used."),
            "request": F(STRING, "Request is the name chosen for a request in the referenced claim."),
        }, description="ResourceClaim references one entry in PodSpec.ResourceClaims.", required=("name",)),
            "map", ("name",)),
            "Claims lists the names of resources, defined in spec.resourceClaims, that are used by this container."),
    },
    description="ResourceRequirements describes the compute resource requirements.",
)

VOLUME_MOUNT = Obj(
    CORE + "VolumeMount",
    {
        "name": F(STRING, "This must match the Name of a Volume."),
        "readOnly": F(BOOL, "Mounted read-only if true, read-write otherwise (false or unspecified). Defaults to "
                            "false."),
        "recursiveReadOnly": F(STRING, "RecursiveReadOnly specifies whether read-only mounts should be handled "
                                       "recursively."),
        "mountPath": F(STRING, "Path within the container at which the volume should be mounted.  Must not contain "
                               "':'."),
        "subPath": F(STRING, "Path within the volume from which the container's volume should be mounted. Defaults to "
                             '"" (volume\'s root).'),
        "mountPropagation": F(STRING, "mountPropagation determines how mounts are propagated from the host to "
                                      "container and the other way around."),
        "subPathExpr": F(STRING, "Expanded path within the volume from which the container's volume should be "
                                 "mounted."),
    },
    description="VolumeMount describes a mounting of a Volume within a container.",
    required=("name", "mountPath"),
)

EXEC_ACTION = Obj(
    CORE + "ExecAction",
    {
        "command": F(ListOf(STRING), "Command is the command line to execute inside the container, the working "
                                     "directory for the command  is root ('/') in the container's filesystem."),
    },
    description="ExecAction describes a \"run in container\" action.",
)

HTTP_GET_ACTION = Obj(
    CORE + "HTTPGetAction",
    {
        "path": F(STRING, "Path to access on the HTTP server."),
        "port": F(INT_OR_STRING, "Name or number of the port to access on the container. Number must be in the range "
                                 "1 to 65535. Name must be an IANA_SVC_NAME."),
        "host": F(STRING, 'Host name to connect to, defaults to the pod IP. You probably want to set "Host" in '
                          'httpHeaders instead.'),
        "scheme": F(enum("HTTP", "HTTPS"), "Scheme to use for connecting to the host. Defaults to HTTP."),
        "httpHeaders": F(ListOf(Obj(CORE + "HTTPHeader", {
            "name": F(STRING, "The header field name. This will be canonicalized upon output, so case-variant names "
                              "will be understood as the same header."),
            "value": F(STRING, "The header field value"),
        }, description="HTTPHeader describes a custom header to be used in HTTP probes", required=("name", "value"))),
            "Custom headers to set in the request. HTTP allows repeated headers."),
    },
    description="HTTPGetAction describes an action based on HTTP Get requests.",
    required=("port",),
)

TCP_SOCKET_ACTION = Obj(
    CORE + "TCPSocketAction",
    {
        "port": F(INT_OR_STRING, "Number or name of the port to access on the container. Number must be in the range 1 "
                                 "to 65535. Name must be an IANA_SVC_NAME."),
        "host": F(STRING, "Optional: Host name to connect to, defaults to the pod IP."),
    },
    description="TCPSocketAction describes an action based on opening a socket",
    required=("port",),
)

GRPC_ACTION = Obj(
    CORE + "GRPCAction",
    {
        "port": F(INT32, "Port number of the gRPC service. Number must be in the range 1 to 65535."),
        "service": F(STRING, "Service is the name of the service to place in the gRPC HealthCheckRequest (see "
                             "https://github.com/grpc/grpc/blob/master/doc/health-checking.md)."),
    },
    description="GRPCAction specifies an action involving a GRPC service.",
    required=("port",),
)

PROBE = Obj(
    CORE + "Probe",
    {
        "exec": F(EXEC_ACTION, "Exec specifies a command to execute in the container."),
        "httpGet": F(HTTP_GET_ACTION, "HTTPGet specifies an HTTP GET request to perform."),
        "tcpSocket": F(TCP_SOCKET_ACTION, "TCPSocket specifies a connection to a TCP port."),
        "grpc": F(GRPC_ACTION, "GRPC specifies a GRPC HealthCheckRequest."),
        "initialDelaySeconds": F(INT32, "Number of seconds after the container has started before liveness probes are "
                                        "initiated."),
        "timeoutSeconds": F(INT32, "Number of seconds after which the probe times out. Defaults to 1 second. Minimum "
                                   "value is 1."),
        "periodSeconds": F(INT32, "How often (in seconds) to perform the probe. Default to 10 seconds. Minimum value "
                                  "is 1."),
        "successThreshold": F(INT32, "Minimum consecutive successes for the probe to be considered successful after "
                                     "having failed. Defaults to 1."),
        "failureThreshold": F(INT32, "Minimum consecutive failures for the probe to be considered failed after having "
                                     "succeeded. Defaults to 3. Minimum value is 1."),
        "terminationGracePeriodSeconds": F(INT64, "Optional duration in seconds the pod needs to terminate gracefully "
                                                  "upon probe failure."),
    },
    description="Probe describes a health check to be performed against a container to determine whether it is "
                "alive or ready to receive traffic.",
)

LIFECYCLE_HANDLER = Obj(
    CORE + "LifecycleHandler",
    {
        "exec": F(EXEC_ACTION, "Exec specifies a command to execute in the container."),
        "httpGet": F(HTTP_GET_ACTION, "HTTPGet specifies an HTTP GET request to perform."),
        "tcpSocket": F(TCP_SOCKET_ACTION, "Deprecated. TCPSocket is NOT supported as a LifecycleHandler and kept for "
                                          "backward compatibility."),
        "sleep": F(Obj(CORE + "SleepAction", {
            "seconds": F(INT64, "Seconds is the number of seconds to sleep."),
        }, description="SleepAction describes a \"sleep\" action.", required=("seconds",)),
            "Sleep represents a duration that the container should sleep."),
    },
    description="LifecycleHandler defines a specific action that should be taken in a lifecycle hook.",
)

CONTAINER = Obj(
    CORE + "Container",
    {
        "name": F(STRING, "Name of the container specified as a DNS_LABEL. Each container in a pod must have a unique "
                          "name (DNS_LABEL). Cannot be updated."),
        "image": F(STRING, "Container image name."),
        "command": F(ListOf(STRING), "Entrypoint array. Not executed within a shell. The container image's ENTRYPOINT "
                                     "is used if this is not provided."),
        "args": F(ListOf(STRING), "Arguments to the entrypoint. The container image's CMD is used if this is not "
                                  "provided."),
        "workingDir": F(STRING, "Container's working directory. If not specified, the container runtime's default will "
                                "be used, which might be configured in the container image. Cannot be updated."),
        "ports": F(ListOf(CONTAINER_PORT, "map", ("containerPort", "protocol"), "merge", "containerPort"),
                   "List of ports to expose from the container."),
        "envFrom": F(ListOf(ENV_FROM_SOURCE), "List of sources to populate environment variables in the container."),
        "env": F(ListOf(ENV_VAR, **merged_by("name")), "List of environment variables to set in the container. Cannot "
                                                       "be updated."),
        "resources": F(RESOURCE_REQUIREMENTS, "Compute Resources required by this container."),
        "resizePolicy": F(ListOf(Any_("ContainerResizePolicy represents resource resize policy for the container.")),
                          "Resources resize policy for the container."),
        "restartPolicy": F(STRING, "RestartPolicy defines the restart behavior of individual containers in a pod."),
        "volumeMounts": F(ListOf(VOLUME_MOUNT, **merged_by("mountPath")),
                          "Pod volumes to mount into the container's filesystem. Cannot be updated."),
        "volumeDevices": F(ListOf(Any_("volumeDevice describes a mapping of a raw block device within a container."),
                                  **merged_by("devicePath")),
                           "volumeDevices is the list of block devices to be used by the container."),
        "livenessProbe": F(PROBE, "Periodic probe of container liveness. Container will be restarted if the probe "
                                  "fails."),
        "readinessProbe": F(PROBE, "Periodic probe of container service readiness. Container will be removed from "
                                   "service endpoints if the probe fails."),
        "startupProbe": F(PROBE, "StartupProbe indicates that the Pod has successfully initialized."),
        "lifecycle": F(Obj(CORE + "Lifecycle", {
            "postStart": F(LIFECYCLE_HANDLER, "PostStart is called immediately after a container is created."),
            "preStop": F(LIFECYCLE_HANDLER, "PreStop is called immediately before a container is terminated due to an "
                                            "API request or management event such as liveness/startup probe failure, "
                                            "preemption, resource contention, etc."),
        }, description="Lifecycle describes actions that the management system should take in response to container "
                       "lifecycle events."),
            "Actions that the management system should take in response to container lifecycle events."),
        "terminationMessagePath": F(STRING, "Optional: Path at which the file to which the container's termination "
                                            "message will be written is mounted into the container's filesystem."),
        "terminationMessagePolicy": F(enum("FallbackToLogsOnError", "File"),
                                      "Indicate how the termination message should be populated."),
        "imagePullPolicy": F(enum("Always", "IfNotPresent", "Never"),
                             "Image pull policy. One of Always, Never, IfNotPresent."),
        "securityContext": F(Any_("SecurityContext holds security configuration that will be applied to a "
                                  "container."),
                             "SecurityContext defines the security options the container should be run with."),
        "stdin": F(BOOL, "Whether this container should allocate a buffer for stdin in the container runtime."),
        "stdinOnce": F(BOOL, "Whether the container runtime should close the stdin channel after it has been opened by "
                             "a single attach."),
        "tty": F(BOOL, "Whether this container should allocate a TTY for itself, also requires 'stdin' to be true."),
    },
    description="A single application container that you want to run within a pod.",
    required=("name",),
)

# ---- Pod: spec -------------------------------------------------------------------------------

TOLERATION = Obj(
    CORE + "Toleration",
    {
        "key": F(STRING, "Key is the taint key that the toleration applies to. Empty means match all taint keys."),
        "operator": F(enum("Equal", "Exists"), "Operator represents a key's relationship to the value."),
        "value": F(STRING, "Value is the taint value the toleration matches to."),
        "effect": F(enum("NoExecute", "NoSchedule", "PreferNoSchedule"),
                    "Effect indicates the taint effect to match. Empty means match all taint effects."),
        "tolerationSeconds": F(INT64, "TolerationSeconds represents the period of time the toleration (which must be "
                                      "of effect NoExecute, otherwise this field is ignored) tolerates the taint."),
    },
    description="The pod this Toleration is attached to tolerates any taint that matches the triple "
                "<key,value,effect> using the matching operator <operator>.",
)

TOPOLOGY_SPREAD_CONSTRAINT = Obj(
    CORE + "TopologySpreadConstraint",
    {
        "maxSkew": F(INT32, "MaxSkew describes the degree to which pods may be unevenly distributed."),
        "topologyKey": F(STRING, "TopologyKey is the key of node labels."),
        "whenUnsatisfiable": F(enum("DoNotSchedule", "ScheduleAnyway"),
                               "WhenUnsatisfiable indicates how to deal with a pod if it doesn't satisfy the spread "
                               "constraint."),
        "labelSelector": F(LABEL_SELECTOR, "LabelSelector is used to find matching pods."),
        "minDomains": F(INT32, "MinDomains indicates a minimum number of eligible domains."),
        "nodeAffinityPolicy": F(enum("Honor", "Ignore"), "NodeAffinityPolicy indicates how we will treat Pod's "
                                                         "nodeAffinity/nodeSelector when calculating pod topology "
                                                         "spread skew."),
        "nodeTaintsPolicy": F(enum("Honor", "Ignore"), "NodeTaintsPolicy indicates how we will treat node taints when "
                                                       "calculating pod topology spread skew."),
        "matchLabelKeys": F(ListOf(STRING), "MatchLabelKeys is a set of pod label keys to select the pods over which "
                                            "spreading will be calculated."),
    },
    description="TopologySpreadConstraint specifies how to spread matching pods among the given topology.",
    required=("maxSkew", "topologyKey", "whenUnsatisfiable"),
)

POD_SPEC = Obj(
    CORE + "PodSpec",
    {
        "volumes": F(ListOf(Any_("Volume represents a named volume in a pod that may be accessed by any container in "
                                 "the pod."), **merged_by("name", "merge,retainKeys")),
                     "List of volumes that can be mounted by containers belonging to the pod."),
        "initContainers": F(ListOf(CONTAINER, **merged_by("name")),
                            "List of initialization containers belonging to the pod."),
        "containers": F(ListOf(CONTAINER, **merged_by("name")),
                        "List of containers belonging to the pod. Containers cannot currently be added or removed. "
                        "There must be at least one container in a Pod. Cannot be updated."),
        "ephemeralContainers": F(ListOf(Any_("An EphemeralContainer is a temporary container that you may add to an "
                                             "existing Pod for user-initiated activities such as debugging."),
                                        **merged_by("name")),
                                 "List of ephemeral containers run in this pod."),
        "restartPolicy": F(enum("Always", "Never", "OnFailure"),
                           "Restart policy for all containers within the pod. One of Always, OnFailure, Never. "
                           "Default to Always."),
        "terminationGracePeriodSeconds": F(INT64, "Optional duration in seconds the pod needs to terminate gracefully. "
                                                  "Defaults to 30 seconds."),
        "activeDeadlineSeconds": F(INT64, "Optional duration in seconds the pod may be active on the node relative to "
                                          "StartTime before the system will actively try to mark it failed and kill "
                                          "associated containers."),
        "dnsPolicy": F(enum("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"),
                       "Set DNS policy for the pod. Defaults to \"ClusterFirst\"."),
        "nodeSelector": F(STRING_MAP, "NodeSelector is a selector which must be true for the pod to fit on a node."),
        "serviceAccountName": F(STRING, "ServiceAccountName is the name of the ServiceAccount to use to run this pod."),
        "serviceAccount": F(STRING, "DeprecatedServiceAccount is a deprecated alias for ServiceAccountName. "
                                    "Deprecated: Use serviceAccountName instead."),
        "automountServiceAccountToken": F(BOOL, "AutomountServiceAccountToken indicates whether a service account "
                                                "token should be automatically mounted."),
        "nodeName": F(STRING, "NodeName indicates in which node this pod is scheduled."),
        "hostNetwork": F(BOOL, "Host networking requested for this pod. Use the host's network namespace. Default to "
                               "false."),
        "hostPID": F(BOOL, "Use the host's pid namespace. Optional: Default to false."),
        "hostIPC": F(BOOL, "Use the host's ipc namespace. Optional: Default to false."),
        "shareProcessNamespace": F(BOOL, "Share a single process namespace between all of the containers in a pod."),
        "securityContext": F(Any_("PodSecurityContext holds pod-level security attributes and common container "
                                  "settings."),
                             "SecurityContext holds pod-level security attributes and common container settings."),
        "imagePullSecrets": F(ListOf(Obj(CORE + "LocalObjectReference", {
            "name": F(STRING, "Name of the referent."),
        }, description="LocalObjectReference contains enough information to let you locate the referenced object "
                       "inside the same namespace.", map_type="atomic"), **merged_by("name")),
            "ImagePullSecrets is an optional list of references to secrets in the same namespace to use for pulling "
            "any of the images used by this PodSpec."),
        "hostname": F(STRING, "Specifies the hostname of the Pod If not specified, the pod's hostname will be set to a "
                              "system-defined value."),
        "subdomain": F(STRING, 'If specified, the fully qualified Pod hostname will be "<hostname>.<subdomain>.<pod '
                               'namespace>.svc.<cluster domain>".'),
        "affinity": F(Any_("Affinity is a group of affinity scheduling rules."),
                      "If specified, the pod's scheduling constraints"),
        "schedulerName": F(STRING, "If specified, the pod will be dispatched by specified scheduler. If not specified, "
                                   "the pod will be dispatched by default scheduler."),
        "tolerations": F(ListOf(TOLERATION), "If specified, the pod's tolerations."),
        "hostAliases": F(ListOf(Obj(CORE + "HostAlias", {
            "ip": F(STRING, "IP address of the host file entry."),
            "hostnames": F(ListOf(STRING), "Hostnames for the above IP address."),
        }, description="HostAlias holds the mapping between IP and hostnames that will be injected as an entry in the "
                       "pod's hosts file.", required=("ip",)), **merged_by("ip")),
            "HostAliases is an optional list of hosts and IPs that will be injected into the pod's hosts file if "
            "specified."),
        "priorityClassName": F(STRING, "If specified, indicates the pod's priority."),
        "priority": F(INT32, "The priority value. Various system components use this field to find the priority of the "
                             "pod."),
        "dnsConfig": F(Any_("PodDNSConfig defines the DNS parameters of a pod in addition to those generated from "
                            "DNSPolicy."),
                       "Specifies the DNS parameters of a pod."),
        "readinessGates": F(ListOf(Obj(CORE + "PodReadinessGate", {
            "conditionType": F(STRING, "ConditionType refers to a condition in the pod's condition list with matching "
                                       "type."),
        }, description="PodReadinessGate contains the reference to a pod condition", required=("conditionType",))),
            "If specified, all readiness gates will be evaluated for pod readiness."),
        "runtimeClassName": F(STRING, "RuntimeClassName refers to a RuntimeClass object in the node.k8s.io group, "
                                      "which should be used to run this pod."),
        "enableServiceLinks": F(BOOL, "EnableServiceLinks indicates whether information about services should be "
                                      "injected into pod's environment variables, matching the syntax of Docker "
                                      "links. Optional: Defaults to true."),
        "preemptionPolicy": F(enum("Never", "PreemptLowerPriority"),
                              "PreemptionPolicy is the Policy for preempting pods with lower priority."),
        "overhead": F(RESOURCE_LIST, "Overhead represents the resource overhead associated with running a pod for a "
                                     "given RuntimeClass."),
        "topologySpreadConstraints": F(ListOf(TOPOLOGY_SPREAD_CONSTRAINT, "map", ("topologyKey", "whenUnsatisfiable"),
                                              "merge", "topologyKey"),
                                       "TopologySpreadConstraints describes how a group of pods ought to spread across "
                                       "topology domains."),
        "setHostnameAsFQDN": F(BOOL, "If true the pod's hostname will be configured as the pod's FQDN, rather than the "
                                     "leaf name (the default)."),
        "os": F(Any_("PodOS defines the OS parameters of a pod."), "Specifies the OS of the containers in the pod."),
        "hostUsers": F(BOOL, "Use the host's user namespace. Optional: Default to true."),
        "schedulingGates": F(ListOf(Obj(CORE + "PodSchedulingGate", {
            "name": F(STRING, "Name of the scheduling gate. Each scheduling gate must have a unique name field."),
        }, description="PodSchedulingGate is associated to a Pod to guard its scheduling.", required=("name",)),
            **merged_by("name")),
            "SchedulingGates is an opaque list of values that if specified will block scheduling the pod."),
        "resourceClaims": F(ListOf(Any_("PodResourceClaim references exactly one ResourceClaim."),
                                   **merged_by("name", "merge,retainKeys")),
                            "ResourceClaims defines which ResourceClaims must be allocated and reserved before the Pod "
                            "is allowed to start."),
        "resources": F(RESOURCE_REQUIREMENTS, "Resources is the total amount of CPU and Memory resources required by "
                                              "all containers in the pod."),
    },
    description="PodSpec is a description of a pod.",
    required=("containers",),
)

# ---- Pod: status -----------------------------------------------------------------------------

POD_CONDITION = Obj(
    CORE + "PodCondition",
    {
        "type": F(STRING, "Type is the type of the condition."),
        "status": F(CONDITION_STATUS, "Status is the status of the condition. Can be True, False, Unknown."),
        "lastProbeTime": F(TIME, "Last time we probed the condition."),
        "lastTransitionTime": F(TIME, "Last time the condition transitioned from one status to another."),
        "reason": F(STRING, "Unique, one-word, CamelCase reason for the condition's last transition."),
        "message": F(STRING, "Human-readable message indicating details about last transition."),
    },
    description="PodCondition contains details for the current condition of this pod.",
    required=("type", "status"),
)

CONTAINER_STATE = Obj(
    CORE + "ContainerState",
    {
        "waiting": F(Obj(CORE + "ContainerStateWaiting", {
            "reason": F(STRING, "(brief) reason the container is not yet running."),
            "message": F(STRING, "Message regarding why the container is not yet running."),
        }, description="ContainerStateWaiting is a waiting state of a container."),
            "Details about a waiting container"),
        "running": F(Obj(CORE + "ContainerStateRunning", {
            "startedAt": F(TIME, "Time at which the container was last (re-)started"),
        }, description="ContainerStateRunning is a running state of a container."),
            "Details about a running container"),
        "terminated": F(Obj(CORE + "ContainerStateTerminated", {
            "exitCode": F(INT32, "Exit status from the last termination of the container"),
            "signal": F(INT32, "Signal from the last termination of the container"),
            "reason": F(STRING, "(brief) reason from the last termination of the container"),
            "message": F(STRING, "Message regarding the last termination of the container"),
            "startedAt": F(TIME, "Time at which previous execution of the container started"),
            "finishedAt": F(TIME, "Time at which the container last terminated"),
            "containerID": F(STRING, "Container's ID in the format '<type>://<container_id>'"),
        }, description="ContainerStateTerminated is a terminated state of a container.", required=("exitCode",)),
            "Details about a terminated container"),
    },
    description="ContainerState holds a possible state of container. Only one of its members may be specified. If "
                "none of them is specified, the default one is ContainerStateWaiting.",
)

CONTAINER_STATUS = Obj(
    CORE + "ContainerStatus",
    {
        "name": F(STRING, "Name is a DNS_LABEL representing the unique name of the container."),
        "state": F(CONTAINER_STATE, "State holds details about the container's current condition."),
        "lastState": F(CONTAINER_STATE, "LastTerminationState holds the last termination state of the container to "
                                        "help debug container crashes and restarts."),
        "ready": F(BOOL, "Ready specifies whether the container is currently passing its readiness check."),
        "restartCount": F(INT32, "RestartCount holds the number of times the container has been restarted."),
        "image": F(STRING, "Image is the name of container image that the container is running."),
        "imageID": F(STRING, "ImageID is the image ID of the container's image."),
        "containerID": F(STRING, "ContainerID is the ID of the container in the format '<type>://<container_id>'."),
        "started": F(BOOL, "Started indicates whether the container has finished its postStart lifecycle hook and "
                           "passed its startup probe."),
        "allocatedResources": F(RESOURCE_LIST, "AllocatedResources represents the compute resources allocated for this "
                                               "container by the node."),
        "resources": F(RESOURCE_REQUIREMENTS, "Resources represents the compute resource requests and limits that have "
                                              "been successfully enacted on the running container after it has been "
                                              "started or has been successfully resized."),
    },
    description="ContainerStatus contains details for the current status of this container.",
    required=("name", "ready", "restartCount", "image", "imageID"),
)


def _ip_entry(name: str, description: str) -> Obj:
    return Obj(CORE + name, {"ip": F(STRING, "IP is the IP address assigned to the " + description)},
               description=f"{name} represents a single IP address allocated to the {description}.", required=("ip",))


POD_STATUS = Obj(
    CORE + "PodStatus",
    {
        "phase": F(enum("Failed", "Pending", "Running", "Succeeded", "Unknown"),
                   "The phase of a Pod is a simple, high-level summary of where the Pod is in its lifecycle."),
        "conditions": F(keyed_by_type(POD_CONDITION), "Current service state of pod."),
        "message": F(STRING, "A human readable message indicating details about why the pod is in this condition."),
        "reason": F(STRING, "A brief CamelCase message indicating details about why the pod is in this state."),
        "nominatedNodeName": F(STRING, "nominatedNodeName is set only when this pod preempts other pods on the node, "
                                       "but it cannot be scheduled right away as preemption victims receive their "
                                       "graceful termination periods."),
        "hostIP": F(STRING, "hostIP holds the IP address of the host to which the pod is assigned."),
        "hostIPs": F(ListOf(_ip_entry("HostIP", "host"), patch_strategy="merge", patch_merge_key="ip"),
                     "hostIPs holds the IP addresses allocated to the host."),
        "podIP": F(STRING, "podIP address allocated to the pod. Routable at least within the cluster."),
        "podIPs": F(ListOf(_ip_entry("PodIP", "pod"), **merged_by("ip")),
                    "podIPs holds the IP addresses allocated to the pod."),
        "startTime": F(TIME, "RFC 3339 date and time at which the object was acknowledged by the Kubelet."),
        "initContainerStatuses": F(ListOf(CONTAINER_STATUS), "Statuses of init containers in this pod."),
        "containerStatuses": F(ListOf(CONTAINER_STATUS), "Statuses of containers in this pod."),
        "qosClass": F(enum("BestEffort", "Burstable", "Guaranteed"),
                      "The Quality of Service (QOS) classification assigned to the pod based on resource "
                      "requirements."),
        "ephemeralContainerStatuses": F(ListOf(CONTAINER_STATUS), "Statuses for any ephemeral containers that have run "
                                                                  "in this pod."),
    },
    description="PodStatus represents information about the status of a pod.",
)

POD = kind_schema(
    CORE + "Pod", ("", "v1", "Pod"),
    "Pod is a collection of containers that can run on a host. This resource is created by clients and scheduled onto "
    "hosts.",
    {
        "spec": F(POD_SPEC, "Specification of the desired behavior of the pod."),
        "status": F(POD_STATUS, "Most recently observed status of the pod."),
    },
)

# ---- Node ------------------------------------------------------------------------------------

TAINT = Obj(
    CORE + "Taint",
    {
        "key": F(STRING, "Required. The taint key to be applied to a node."),
        "value": F(STRING, "The taint value corresponding to the taint key."),
        "effect": F(enum("NoExecute", "NoSchedule", "PreferNoSchedule"),
                    "Required. The effect of the taint on pods that do not tolerate the taint."),
        "timeAdded": F(TIME, "TimeAdded represents the time at which the taint was added."),
    },
    description="The node this Taint is attached to has the \"effect\" on any pod that does not tolerate the Taint.",
    required=("key", "effect"),
)

NODE_SPEC = Obj(
    CORE + "NodeSpec",
    {
        "podCIDR": F(STRING, "PodCIDR represents the pod IP range assigned to the node."),
        "podCIDRs": F(ListOf(STRING, "set", patch_strategy="merge"),
                      "podCIDRs represents the IP ranges assigned to the node for usage by Pods on that node."),
        "providerID": F(STRING, "ID of the node assigned by the cloud provider in the format: "
                                "<ProviderName>://<ProviderSpecificNodeID>"),
        "unschedulable": F(BOOL, "Unschedulable controls node schedulability of new pods. By default, node is "
                                 "schedulable."),
        "taints": F(ListOf(TAINT), "If specified, the node's taints."),
        "configSource": F(Any_("NodeConfigSource specifies a source of node configuration."),
                          "Deprecated: Previously used to specify the source of the node's configuration for the "
                          "DynamicKubeletConfig feature."),
        "externalID": F(STRING, "Deprecated. Not all kubelets will set this field."),
    },
    description="NodeSpec describes the attributes that a node is created with.",
)

NODE_CONDITION = Obj(
    CORE + "NodeCondition",
    {
        "type": F(STRING, "Type of node condition."),
        "status": F(CONDITION_STATUS, "Status of the condition, one of True, False, Unknown."),
        "lastHeartbeatTime": F(TIME, "Last time we got an update on a given condition."),
        "lastTransitionTime": F(TIME, "Last time the condition transit from one status to another."),
        "reason": F(STRING, "(brief) reason for the condition's last transition."),
        "message": F(STRING, "Human readable message indicating details about last transition."),
    },
    description="NodeCondition contains condition information for a node.",
    required=("type", "status"),
)

NODE_ADDRESS = Obj(
    CORE + "NodeAddress",
    {
        "type": F(enum("ExternalDNS", "ExternalIP", "Hostname", "InternalDNS", "InternalIP"),
                  "Node address type, one of Hostname, ExternalIP or InternalIP."),
        "address": F(STRING, "The node address."),
    },
    description="NodeAddress contains information for the node's address.",
    required=("type", "address"),
)

NODE_SYSTEM_INFO = Obj(
    CORE + "NodeSystemInfo",
    {
        "machineID": F(STRING, "MachineID reported by the node."),
        "systemUUID": F(STRING, "SystemUUID reported by the node."),
        "bootID": F(STRING, "Boot ID reported by the node."),
        "kernelVersion": F(STRING, "Kernel Version reported by the node from 'uname -r' (e.g. "
                                   "3.16.0-0.bpo.4-amd64)."),
        "osImage": F(STRING, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
        "containerRuntimeVersion": F(STRING, "ContainerRuntime Version reported by the node through runtime remote API "
                                             "(e.g. containerd://1.4.2)."),
        "kubeletVersion": F(STRING, "Kubelet Version reported by the node."),
        "kubeProxyVersion": F(STRING, "Deprecated: KubeProxy Version reported by the node."),
        "operatingSystem": F(STRING, "The Operating System reported by the node"),
        "architecture": F(STRING, "The Architecture reported by the node"),
    },
    description="NodeSystemInfo is a set of ids/uuids to uniquely identify the node.",
    required=("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
              "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture"),
)

NODE_STATUS = Obj(
    CORE + "NodeStatus",
    {
        "capacity": F(RESOURCE_LIST, "Capacity represents the total resources of a node."),
        "allocatable": F(RESOURCE_LIST, "Allocatable represents the resources of a node that are available for "
                                        "scheduling. Defaults to Capacity."),
        "phase": F(enum("Pending", "Running", "Terminated"),
                   "NodePhase is the recently observed lifecycle phase of the node. Deprecated."),
        "conditions": F(keyed_by_type(NODE_CONDITION), "Conditions is an array of current observed node conditions."),
        "addresses": F(ListOf(NODE_ADDRESS, patch_strategy="merge", patch_merge_key="type"),
                       "List of addresses reachable to the node."),
        "daemonEndpoints": F(Obj(CORE + "NodeDaemonEndpoints", {
            "kubeletEndpoint": F(Obj(CORE + "DaemonEndpoint", {
                "Port": F(INT32, "Port number of the given endpoint."),
            }, description="DaemonEndpoint contains information about a single Daemon endpoint.", required=("Port",)),
                "Endpoint on which Kubelet is listening."),
        }, description="NodeDaemonEndpoints lists ports opened by daemons running on the Node."),
            "Endpoints of daemons running on the Node."),
        "nodeInfo": F(NODE_SYSTEM_INFO, "Set of ids/uuids to uniquely identify the node."),
        "images": F(ListOf(Obj(CORE + "ContainerImage", {
            "names": F(ListOf(STRING), "Names by which this image is known."),
            "sizeBytes": F(INT64, "The size of the image in bytes."),
        }, description="Describe a container image")), "List of container images on this node"),
        "volumesInUse": F(ListOf(STRING), "List of attachable volumes in use (mounted) by the node."),
        "volumesAttached": F(ListOf(Any_("AttachedVolume describes a volume attached to a node")),
                             "List of volumes that are attached to the node."),
    },
    description="NodeStatus is information about the current status of a node.",
)

NODE = kind_schema(
    CORE + "Node", ("", "v1", "Node"),
    "Node is a worker node in Kubernetes. Each node will have a unique identifier in the cache (i.e. in etcd).",
    {
        "spec": F(NODE_SPEC, "Spec defines the behavior of a node."),
        "status": F(NODE_STATUS, "Most recently observed status of the node. Populated by the system. Read-only."),
    },
)

# ---- Endpoints -------------------------------------------------------------------------------

ENDPOINT_ADDRESS = Obj(
    CORE + "EndpointAddress",
    {
        "ip": F(STRING, "The IP of this endpoint. May not be loopback (127.0.0.0/8 or ::1), link-local "
                        "(169.254.0.0/16 or fe80::/10), or link-local multicast (224.0.0.0/24 or ff02::/16)."),
        "hostname": F(STRING, "The Hostname of this endpoint"),
        "nodeName": F(STRING, "Optional: Node hosting this endpoint. This can be used to determine endpoints local to "
                              "a node."),
        "targetRef": F(OBJECT_REFERENCE, "Reference to object providing the endpoint."),
    },
    description="EndpointAddress is a tuple that describes single IP address. Deprecated: This API is deprecated in "
                "v1.33+.",
    required=("ip",),
    map_type="atomic",
)

ENDPOINT_PORT = Obj(
    CORE + "EndpointPort",
    {
        "name": F(STRING, "The name of this port.  This must match the 'name' field in the corresponding ServicePort."),
        "port": F(INT32, "The port number of the endpoint."),
        "protocol": F(PROTOCOL, "The IP protocol for this port. Must be UDP, TCP, or SCTP. Default is TCP."),
        "appProtocol": F(STRING, "The application protocol for this port."),
    },
    description="EndpointPort is a tuple that describes a single port. Deprecated: This API is deprecated in v1.33+.",
    required=("port",),
    map_type="atomic",
)

ENDPOINTS = kind_schema(
    CORE + "Endpoints", ("", "v1", "Endpoints"),
    "Endpoints is a collection of endpoints that implement the actual service.",
    {
        "subsets": F(ListOf(Obj(CORE + "EndpointSubset", {
            "addresses": F(ListOf(ENDPOINT_ADDRESS), "IP addresses which offer the related ports that are marked as "
                                                     "ready."),
            "notReadyAddresses": F(ListOf(ENDPOINT_ADDRESS), "IP addresses which offer the related ports but are not "
                                                             "currently marked as ready because they have not yet "
                                                             "finished starting, have recently failed a readiness "
                                                             "check, or have recently failed a liveness check."),
            "ports": F(ListOf(ENDPOINT_PORT), "Port numbers available on the related IP addresses."),
        }, description="EndpointSubset is a group of addresses with a common set of ports.")),
            "The set of all endpoints is the union of all subsets."),
    },
)

# ---- Event -----------------------------------------------------------------------------------

EVENT = kind_schema(
    CORE + "Event", ("", "v1", "Event"),
    "Event is a report of an event somewhere in the cluster.",
    {
        "involvedObject": F(OBJECT_REFERENCE, "The object that this event is about."),
        "reason": F(STRING, "This should be a short, machine understandable string that gives the reason for the "
                            "transition into the object's current status."),
        "message": F(STRING, "A human-readable description of the status of this operation."),
        "source": F(Obj(CORE + "EventSource", {
            "component": F(STRING, "Component from which the event is generated."),
            "host": F(STRING, "Node name on which the event is generated."),
        }, description="EventSource contains information for an event."),
            "The component reporting this event. Should be a short machine understandable string."),
        "firstTimestamp": F(TIME, "The time at which the event was first recorded. (Time of server receipt is in "
                                  "TypeMeta.)"),
        "lastTimestamp": F(TIME, "The time at which the most recent occurrence of this event was recorded."),
        "count": F(INT32, "The number of times this event has occurred."),
        "type": F(STRING, "Type of this event (Normal, Warning), new types could be added in the future"),
        "eventTime": F(MICRO_TIME, "Time when this Event was first observed."),
        "series": F(Obj(CORE + "EventSeries", {
            "count": F(INT32, "Number of occurrences in this series up to the last heartbeat time"),
            "lastObservedTime": F(MICRO_TIME, "Time of the last occurrence observed"),
        }, description="EventSeries contain information on series of events, i.e. thing that was/is happening "
                       "continuously for some time."),
            "Data about the Event series this event represents or nil if it's a singleton Event."),
        "action": F(STRING, "What action was taken/failed regarding to the Regarding object."),
        "related": F(OBJECT_REFERENCE, "Optional secondary object for more complex actions."),
        "reportingComponent": F(STRING, "Name of the controller that emitted this Event, e.g. "
                                        "`kubernetes.io/kubelet`."),
        "reportingInstance": F(STRING, "ID of the controller instance, e.g. `kubelet-xyzf`."),
    },
    required=("metadata", "involvedObject"),
)

# ---- Binding ---------------------------------------------------------------------------------

BINDING = kind_schema(
    CORE + "Binding", ("", "v1", "Binding"),
    "Binding ties one object to another; for example, a pod is bound to a node by a scheduler. Deprecated in 1.7, "
    "please use the bindings subresource of pods instead.",
    {
        "target": F(OBJECT_REFERENCE, "The target object that you want to bind to the standard object."),
    },
    required=("target",),
)

# ---- registration ----------------------------------------------------------------------------

register(KindInfo(
    "", "v1", "Namespace", "namespaces", "namespace", namespaced=False, schema=NAMESPACE, short_names=("ns",),
    subresources=("status", "finalize"),
    # "name" is a legacy alias upstream keeps for backward compatibility
    field_labels={"status.phase": ("status", "phase"), "name": ("metadata", "name")},
))
register(KindInfo(
    "", "v1", "Service", "services", "service", namespaced=True, schema=SERVICE, short_names=("svc",),
    categories=("all",), subresources=("status",), delete_returns_object=True,
    field_labels={"spec.clusterIP": ("spec", "clusterIP"), "spec.type": ("spec", "type")},
    storage_prefix="services/specs",
))
register(KindInfo(
    "", "v1", "Pod", "pods", "pod", namespaced=True, schema=POD, short_names=("po",), categories=("all",),
    subresources=("status",), delete_returns_object=True,
    field_labels={
        "spec.nodeName": ("spec", "nodeName"),
        "spec.restartPolicy": ("spec", "restartPolicy"),
        "spec.schedulerName": ("spec", "schedulerName"),
        "spec.serviceAccountName": ("spec", "serviceAccountName"),
        "spec.hostNetwork": ("spec", "hostNetwork"),  # absent means "false"
        "status.phase": ("status", "phase"),
        "status.podIP": ("status", "podIP"),  # upstream reads status.podIPs[0].ip, which mirrors podIP
        "status.nominatedNodeName": ("status", "nominatedNodeName"),
    },
))
register(KindInfo(
    "", "v1", "Node", "nodes", "node", namespaced=False, schema=NODE, short_names=("no",), subresources=("status",),
    field_labels={"spec.unschedulable": ("spec", "unschedulable")},  # absent means "false"
    storage_prefix="minions",
))
register(KindInfo(
    "", "v1", "Endpoints", "endpoints", "endpoints", namespaced=True, schema=ENDPOINTS, short_names=("ep",),
    storage_prefix="services/endpoints",
))
register(KindInfo(
    "", "v1", "Event", "events", "event", namespaced=True, schema=EVENT, short_names=("ev",),
    field_labels={
        "involvedObject.kind": ("involvedObject", "kind"),
        "involvedObject.namespace": ("involvedObject", "namespace"),
        "involvedObject.name": ("involvedObject", "name"),
        "involvedObject.uid": ("involvedObject", "uid"),
        "involvedObject.apiVersion": ("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": ("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": ("involvedObject", "fieldPath"),
        "reason": ("reason",),
        "reportingComponent": ("reportingComponent",),
        "source": ("source", "component"),  # upstream falls back to reportingComponent when empty
        "type": ("type",),
    },
))

# A Binding is never stored, listed or watched: it is only POSTed, to ``pods/{name}/binding``
# or to the legacy ``bindings`` collection, and sets the Pod's ``spec.nodeName`` (upstream
# BindingREST). So it is described here for decoding and OpenAPI but not registered as a
# served kind with a store of its own.
BINDING_INFO = KindInfo("", "v1", "Binding", "bindings", "binding", namespaced=True, schema=BINDING)

# ---- Secret, ConfigMap, ServiceAccount ---------------------------------------------------------
#
# A **Secret** holds small pieces of sensitive data by key; ``data`` values are bytes, written
# in JSON as base64, and ``stringData`` is a write-only convenience merged into ``data`` on every
# write (never stored or returned). ``type`` names the expected keys: ``Opaque`` (anything),
# ``kubernetes.io/service-account-token`` (bound to a ServiceAccount by annotation),
# ``kubernetes.io/dockerconfigjson``, ``kubernetes.io/tls`` (``tls.crt``/``tls.key``),
# ``bootstrap.kubernetes.io/token`` (node join tokens, in kube-system) and a few more; it is
# immutable. A **ConfigMap** is the same for non-secret configuration (``data`` strings and
# ``binaryData`` bytes). With ``immutable: true`` neither may change its data again. Both are
# limited to 1 MiB of data. A **ServiceAccount** is an identity for processes in Pods; tokens
# for it come from the ``serviceaccounts/token`` subresource (a TokenRequest).

_LOCAL_OBJECT_REFERENCE = POD_SPEC.fields["imagePullSecrets"].type.item  # type: ignore[union-attr]
_BYTES_MAP = MapOf(Scalar("byte", "byte"))

SECRET = kind_schema(
    CORE + "Secret", ("", "v1", "Secret"),
    "Secret holds secret data of a certain type. The total bytes of the values in the Data field must be less than "
    "MaxSecretSize bytes.",
    {
        "immutable": F(BOOL, "Immutable, if set to true, ensures that data stored in the Secret cannot be updated (only "
                             "object metadata can be modified). If not set to true, the field can be modified at any "
                             "time. Defaulted to nil."),
        "data": F(_BYTES_MAP, "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' "
                              "or '.'. The serialized form of the secret data is a base64 encoded string, representing "
                              "the arbitrary (possibly non-string) data value here. Described in "
                              "https://tools.ietf.org/html/rfc4648#section-4"),
        "stringData": F(STRING_MAP, "stringData allows specifying non-binary secret data in string form. It is provided "
                                    "as a write-only input field for convenience. All keys and values are merged into "
                                    "the data field on write, overwriting any existing values. The stringData field is "
                                    "never output when reading from the API."),
        "type": F(STRING, "Used to facilitate programmatic handling of secret data. More info: "
                          "https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"),
    },
)

CONFIG_MAP = kind_schema(
    CORE + "ConfigMap", ("", "v1", "ConfigMap"),
    "ConfigMap holds configuration data for pods to consume.",
    {
        "immutable": F(BOOL, "Immutable, if set to true, ensures that data stored in the ConfigMap cannot be updated "
                             "(only object metadata can be modified). If not set to true, the field can be modified at "
                             "any time. Defaulted to nil."),
        "data": F(STRING_MAP, "Data contains the configuration data. Each key must consist of alphanumeric characters, "
                              "'-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The "
                              "keys stored in Data must not overlap with the keys in the BinaryData field, this is "
                              "enforced during validation process."),
        "binaryData": F(_BYTES_MAP, "BinaryData contains the binary data. Each key must consist of alphanumeric "
                                    "characters, '-', '_' or '.'. BinaryData can contain byte sequences that are not in "
                                    "the UTF-8 range. The keys stored in BinaryData must not overlap with the ones in "
                                    "the Data field, this is enforced during validation process."),
    },
)

SERVICE_ACCOUNT = kind_schema(
    CORE + "ServiceAccount", ("", "v1", "ServiceAccount"),
    "ServiceAccount binds together: * a name, understood by users, and perhaps by peripheral systems, for an identity "
    "* a principal that can be authenticated and authorized * a set of secrets",
    {
        "secrets": F(ListOf(OBJECT_REFERENCE, **merged_by("name")),
                     "Secrets is a list of the secrets in the same namespace that pods running using this "
                     "ServiceAccount are allowed to use. Pods are only limited to this list if this service account "
                     'has a "kubernetes.io/enforce-mountable-secrets" annotation set to "true". The '
                     '"kubernetes.io/enforce-mountable-secrets" annotation is deprecated since v1.32. Prefer separate '
                     "namespaces to isolate access to mounted secrets. This field should not be used to find "
                     "auto-generated service account token secrets for use outside of pods. Instead, tokens can be "
                     "requested directly using the TokenRequest API, or service account token secrets can be manually "
                     "created."),
        "imagePullSecrets": F(ListOf(_LOCAL_OBJECT_REFERENCE),
                              "ImagePullSecrets is a list of references to secrets in the same namespace to use for "
                              "pulling any images in pods that reference this ServiceAccount. ImagePullSecrets are "
                              "distinct from Secrets because Secrets can be mounted in the pod, but ImagePullSecrets "
                              "are only accessed by the kubelet."),
        "automountServiceAccountToken": F(BOOL, "AutomountServiceAccountToken indicates whether pods running as this "
                                                "service account should have an API token automatically mounted. Can "
                                                "be overridden at the pod level."),
    },
)

register(KindInfo(
    "", "v1", "Secret", "secrets", "secret", namespaced=True, schema=SECRET, field_labels={"type": ("type",)},
))
register(KindInfo("", "v1", "ConfigMap", "configmaps", "configmap", namespaced=True, schema=CONFIG_MAP,
                  short_names=("cm",)))
register(KindInfo("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", namespaced=True,
                  schema=SERVICE_ACCOUNT, short_names=("sa",)))
