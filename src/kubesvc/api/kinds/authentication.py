"""authentication.k8s.io/v1: who a credential belongs to, asked and answered, never stored.

* **TokenReview**: "whose is this bearer token?" ``spec.token`` (and the ``audiences`` the
  caller accepts) in, ``status.authenticated`` and ``status.user`` (``UserInfo``: username,
  uid, groups, extra) out. A kubelet or webhook authenticates its callers with it.
* **SelfSubjectReview**: "who am I?" (``kubectl auth whoami``): an empty body in, the
  caller's own ``status.userInfo`` out, after impersonation.
* **TokenRequest**: not a resource of its own but the body of ``serviceaccounts/{name}/token``
  (``kubectl create token``): ``spec.audiences``, ``expirationSeconds`` and an optional
  ``boundObjectRef`` (a Pod, Secret or Node the token dies with) in, ``status.token`` (a
  signed JWT) and ``expirationTimestamp`` out.

All are create-only: POST answers 201 with the filled-in object and nothing is persisted.
Field names follow k8s.io/api ``authentication/v1/types.go``.
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import BOOL, INT64, STRING, TIME, F, ListOf, MapOf, Obj

AUTHN = "io.k8s.api.authentication.v1."
GROUP = "authentication.k8s.io"

USER_INFO = Obj(
    AUTHN + "UserInfo",
    {
        "username": F(STRING, "The name that uniquely identifies this user among all active users."),
        "uid": F(STRING, "A unique value that identifies this user across time. If this user is deleted and another "
                         "user by the same name is added, they will have different UIDs."),
        "groups": F(ListOf(STRING), "The names of groups this user is a part of."),
        "extra": F(MapOf(ListOf(STRING)), "Any additional information provided by the authenticator."),
    },
    description="UserInfo holds the information about the user needed to implement the user.Info interface.",
)

TOKEN_REVIEW = kind_schema(
    AUTHN + "TokenReview", (GROUP, "v1", "TokenReview"),
    "TokenReview attempts to authenticate a token to a known user. Note: TokenReview requests may be cached by the "
    "webhook token authenticator plugin in the kube-apiserver.",
    {
        "spec": F(Obj(AUTHN + "TokenReviewSpec", {
            "token": F(STRING, "Token is the opaque bearer token."),
            "audiences": F(ListOf(STRING), "Audiences is a list of the identifiers that the resource server presented "
                                           "with the token identifies as. Audience-aware token authenticators will "
                                           "verify that the token was intended for at least one of the audiences in "
                                           "this list. If no audiences are provided, the audience will default to the "
                                           "audience of the Kubernetes apiserver."),
        }, description="TokenReviewSpec is a description of the token authentication request."),
            "Spec holds information about the request being evaluated"),
        "status": F(Obj(AUTHN + "TokenReviewStatus", {
            "authenticated": F(BOOL, "Authenticated indicates that the token was associated with a known user."),
            "user": F(USER_INFO, "User is the UserInfo associated with the provided token."),
            "audiences": F(ListOf(STRING), "Audiences are audience identifiers chosen by the authenticator that are "
                                           "compatible with both the TokenReview and token. An identifier is any "
                                           "identifier in the intersection of the TokenReviewSpec audiences and the "
                                           "token's audiences."),
            "error": F(STRING, "Error indicates that the token couldn't be checked"),
        }, description="TokenReviewStatus is the result of the token authentication request."),
            "Status is filled in by the server and indicates whether the request can be authenticated."),
    },
    required=("spec",),
)

SELF_SUBJECT_REVIEW = kind_schema(
    AUTHN + "SelfSubjectReview", (GROUP, "v1", "SelfSubjectReview"),
    "SelfSubjectReview contains the user information that the kube-apiserver has about the user making this request. "
    "When using impersonation, users will receive the user info of the user being impersonated.  If impersonation or "
    "request header authentication is used, any extra keys will have their case ignored and returned as lowercase.",
    {
        "status": F(Obj(AUTHN + "SelfSubjectReviewStatus", {
            "userInfo": F(USER_INFO, "User attributes of the user making this request."),
        }, description="SelfSubjectReviewStatus is filled by the kube-apiserver and sent back to a user."),
            "Status is filled in by the server with the user attributes."),
    },
)

BOUND_OBJECT_REFERENCE = Obj(
    AUTHN + "BoundObjectReference",
    {
        "kind": F(STRING, "Kind of the referent. Valid kinds are 'Pod' and 'Secret'."),
        "apiVersion": F(STRING, "API version of the referent."),
        "name": F(STRING, "Name of the referent."),
        "uid": F(STRING, "UID of the referent."),
    },
    description="BoundObjectReference is a reference to an object that a token is bound to.",
)

TOKEN_REQUEST = kind_schema(
    AUTHN + "TokenRequest", (GROUP, "v1", "TokenRequest"),
    "TokenRequest requests a token for a given service account.",
    {
        "spec": F(Obj(AUTHN + "TokenRequestSpec", {
            "audiences": F(ListOf(STRING), "Audiences are the intendend audiences of the token. A recipient of a token "
                                           "must identify themself with an identifier in the list of audiences of the "
                                           "token, and otherwise should reject the token. A token issued for multiple "
                                           "audiences may be used to authenticate against any of the audiences listed "
                                           "but implies a high degree of trust between the target audiences."),
            "expirationSeconds": F(INT64, "ExpirationSeconds is the requested duration of validity of the request. The "
                                          "token issuer may return a token with a different validity duration so a "
                                          "client needs to check the 'expiration' field in a response."),
            "boundObjectRef": F(BOUND_OBJECT_REFERENCE, "BoundObjectRef is a reference to an object that the token will "
                                                        "be bound to. The token will only be valid for as long as the "
                                                        "bound object exists. NOTE: The API server's TokenReview "
                                                        "endpoint will validate the BoundObjectRef, but other audiences "
                                                        "may not. Keep ExpirationSeconds small if you want prompt "
                                                        "revocation."),
        }, description="TokenRequestSpec contains client provided parameters of a token request.",
            required=("audiences",)),
            "Spec holds information about the request being evaluated"),
        "status": F(Obj(AUTHN + "TokenRequestStatus", {
            "token": F(STRING, "Token is the opaque bearer token."),
            "expirationTimestamp": F(TIME, "ExpirationTimestamp is the time of expiration of the returned token."),
        }, description="TokenRequestStatus is the result of a token request.",
            required=("token", "expirationTimestamp")),
            "Status is filled in by the server and indicates whether the token can be authenticated."),
    },
    required=("spec",),
)

register(KindInfo(GROUP, "v1", "SelfSubjectReview", "selfsubjectreviews", "selfsubjectreview", namespaced=False,
                  schema=SELF_SUBJECT_REVIEW, create_only=True))
register(KindInfo(GROUP, "v1", "TokenReview", "tokenreviews", "tokenreview", namespaced=False, schema=TOKEN_REVIEW,
                  create_only=True))

# A TokenRequest is only POSTed to ``serviceaccounts/{name}/token`` (see apiserver/subresources.py):
# described for decoding and OpenAPI, not served as a resource of its own.
TOKEN_REQUEST_INFO = KindInfo(GROUP, "v1", "TokenRequest", "tokenrequests", "tokenrequest", namespaced=True,
                              schema=TOKEN_REQUEST, create_only=True)
