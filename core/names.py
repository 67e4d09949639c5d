"""Object names and namespaces, checked as the Kubernetes API server checks them, before
anything else looks at a request (admission, the projection, the bus).

Pure: no I/O. Messages follow apimachinery word for word (`validation.IsDNS1123Label`,
`IsDNS1123Subdomain`, `field.Error.ErrorBody`, `errors.NewInvalid`), because users and
scripts match on them. One rule is ours: a VM's or VMI's `<namespace>_<name>` names its
launcher's unix socket (`<run-dir>/<node>/launchers/<ns>_<name>.sock`), and a unix socket
path holds at most 107 bytes, so a name that cannot fit is refused here rather than failing
at start with "AF_UNIX path too long".
"""

from __future__ import annotations

import re
from enum import StrEnum

from events.objects import Status, StatusCause, StatusDetails

INVALID = "FieldValueInvalid"
REQUIRED = "FieldValueRequired"

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
# `<ns>_<name>` of a launcher socket. A socket path holds 107 bytes; `/`, `/launchers/`
# and `.sock` take 17, so this leaves 34 for the run dir and the node name
# (`/root/.virtstream/run` + `node-12` fits).
SOCKET_NAME_MAX = 56

LABEL_PATTERN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
SUBDOMAIN_PATTERN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL = re.compile(LABEL_PATTERN)
_SUBDOMAIN = re.compile(SUBDOMAIN_PATTERN)
LABEL_FMT = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_FMT = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


class NameRule(StrEnum):
    """Which apimachinery name function a kind's names pass (`ValidateObjectMeta`'s
    nameFn): CRDs and nodes use the subdomain; namespaces are labels."""

    SUBDOMAIN = "subdomain"
    LABEL = "label"


def label_errors(value: str) -> list[str]:
    """`validation.IsDNS1123Label`."""
    errors = []
    if len(value) > LABEL_MAX:
        errors.append(f"must be no more than {LABEL_MAX} characters")
    if not _LABEL.fullmatch(value):
        errors.append(LABEL_FMT)
    return errors


QUALIFIED_NAME_FMT = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_FMT = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def qualified_name_errors(value: str) -> list[str]:
    """`validation.IsQualifiedName`: a label key, an annotation key, a taint key."""
    prefix, slash, name = value.rpartition("/")
    if value.count("/") > 1:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyName',  or "
            "'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain "
            "prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errors = []
    if slash:
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {e}" for e in subdomain_errors(prefix)]
    if not name:
        return [*errors, "name part must be non-empty"]
    if len(name) > LABEL_MAX:
        errors.append(f"name part must be no more than {LABEL_MAX} characters")
    if not _QUALIFIED.fullmatch(name):
        errors.append(f"name part {QUALIFIED_NAME_FMT}")
    return errors


def label_value_errors(value: str) -> list[str]:
    """`validation.IsValidLabelValue`."""
    errors = []
    if len(value) > LABEL_MAX:
        errors.append(f"must be no more than {LABEL_MAX} characters")
    if value and not _QUALIFIED.fullmatch(value):
        errors.append(LABEL_VALUE_FMT)
    return errors


def validate_labels(labels: dict[str, str], field: str = "metadata.labels") -> list[StatusCause]:
    """apimachinery's `ValidateLabels`: each key a qualified name, each value a label value."""
    causes = []
    for k, v in labels.items():
        causes += [invalid(field, k, e) for e in qualified_name_errors(k)]
        causes += [invalid(field, v, e) for e in label_value_errors(v)]
    return causes


def validate_annotation_keys(
    annotations: dict[str, str], field: str = "metadata.annotations"
) -> list[StatusCause]:
    """apimachinery's `ValidateAnnotations`: each key a qualified name (lower case)."""
    causes = []
    for k in annotations:
        causes += [invalid(field, k, e) for e in qualified_name_errors(k.lower())]
    return causes


def subdomain_errors(value: str) -> list[str]:
    """`validation.IsDNS1123Subdomain`."""
    errors = []
    if len(value) > SUBDOMAIN_MAX:
        errors.append(f"must be no more than {SUBDOMAIN_MAX} characters")
    if not _SUBDOMAIN.fullmatch(value):
        errors.append(SUBDOMAIN_FMT)
    return errors


_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}


def go_quote(value: str) -> str:
    """Go's `%q`: how `field.Invalid` prints a bad string value."""
    out = []
    for ch in value:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def invalid(field: str, value: str, detail: str) -> StatusCause:
    """`field.Invalid(path, value, detail)` as a Status cause (the body without the path)."""
    return StatusCause(
        type=INVALID, message=f"Invalid value: {go_quote(value)}: {detail}", field=field
    )


def required(field: str, detail: str) -> StatusCause:
    return StatusCause(type=REQUIRED, message=f"Required value: {detail}", field=field)


def validate_namespace(namespace: str) -> list[StatusCause]:
    """`ValidateObjectMeta`'s namespace check: a DNS-1123 label."""
    return [invalid("metadata.namespace", namespace, e) for e in label_errors(namespace)]


def validate_object_name(
    name: str, rule: NameRule = NameRule.SUBDOMAIN, generate_name: str = ""
) -> list[StatusCause]:
    """`ValidateObjectMeta`'s name check for a kind whose names follow `rule`."""
    if not name:
        if generate_name:
            return []
        return [required("metadata.name", "name or generateName is required")]
    errors = subdomain_errors(name) if rule is NameRule.SUBDOMAIN else label_errors(name)
    return [invalid("metadata.name", name, e) for e in errors]


def validate_socket_fit(
    namespace: str, name: str, limit: int = SOCKET_NAME_MAX
) -> list[StatusCause]:
    """The launcher's socket `<ns>_<name>.sock` must fit a unix socket path."""
    size = len(namespace.encode()) + 1 + len(name.encode())
    if size <= limit:
        return []
    most = max(limit - 1 - len(namespace.encode()), 0)
    detail = (
        f"must be no more than {most} characters in namespace {go_quote(namespace)} "
        f"(<namespace>_<name> names the launcher's unix socket and may hold {limit} bytes)"
    )
    return [invalid("metadata.name", name, detail)]


def validate_identity(
    namespace: str,
    name: str,
    *,
    namespaced: bool,
    rule: NameRule = NameRule.SUBDOMAIN,
    generate_name: str = "",
    socket_limit: int | None = None,
) -> list[StatusCause]:
    """Everything the API server checks about where an object lives, in its order:
    the name, then the namespace; plus the socket fit for kinds that run a launcher."""
    causes = validate_object_name(name, rule, generate_name)
    if namespaced:
        causes += validate_namespace(namespace)
    if socket_limit is not None and name and not causes:
        causes += validate_socket_fit(namespace, name, socket_limit)
    return causes


def invalid_object(kind: str, group: str, name: str, causes: list[StatusCause]) -> Status:
    """`errors.NewInvalid`: `<Kind>.<group> "<name>" is invalid: <path>: <body>` (several
    errors are printed as a bracketed list, as an aggregate error prints)."""
    errors = [f"{c.field}: {c.message}" for c in causes]
    joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    qualified = f"{kind}.{group}" if group else kind
    return Status(
        message=f"{qualified} {go_quote(name)} is invalid: {joined}",
        reason="Invalid",
        code=422,
        details=StatusDetails(name=name, group=group or None, kind=kind, causes=causes),
    )
