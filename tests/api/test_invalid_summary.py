"""NewInvalid's message is ``ErrorList.ToAggregate()``: a message repeated is given once (the
causes keep every entry), and one distinct message has no brackets."""

from kubesvc.api.errors import invalid, invalid_value, required


def test_repeated_field_errors_are_summarised_once():
    error = invalid_value("spec.ports[0].port", 0, "must be between 1 and 65535, inclusive")
    status = invalid("Service", "web", [error, error])
    assert status.message == 'Service "web" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive'
    assert len(status.details["causes"]) == 2


def test_distinct_field_errors_in_brackets():
    status = invalid("Service", "web", [required("spec.ports"), required("spec.selector")], group="")
    assert status.message == 'Service "web" is invalid: [spec.ports: Required value, spec.selector: Required value]'
